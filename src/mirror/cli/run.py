"""`mirror run`: the mirror daemon."""

from __future__ import annotations

from pathlib import Path

import click

from mirror.cli import AppContext, config_option, pass_app
from mirror.cli.signals import stop_on_signals
from mirror.errors import ExitCode, UsageError
from mirror.run.daemon import run_flows
from mirror.run.supervisor import stop_with_supervisor, supervise


@click.command()
@config_option
@click.option("--flow", "flows", multiple=True, help="Run only this flow (repeatable); default all.")
@click.option(
    "--until-caught-up",
    is_flag=True,
    help="Exit 0 once every matched partition is mirrored up to the end offsets seen at start and committed.",
)
@click.option(
    "--metrics-port", type=click.IntRange(0, 65535), default=None, help="Serve Prometheus metrics on this port."
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Worker processes on this host (one core each); they share partitions.",
)
# Hidden: set by `--workers N` on each worker it starts, which reads a N-th of a flow's cap.
@click.option("--pool-size", "pool_size", type=click.IntRange(1, 64), default=1, hidden=True)
# Hidden: for measuring the offset map's cost (bench/). Without it failover cannot translate.
@click.option("--no-offset-store", "no_offset_store", is_flag=True, hidden=True)
@pass_app
def run(
    app: AppContext,
    config_path: Path,
    flows: tuple[str, ...],
    until_caught_up: bool,
    metrics_port: int | None,
    workers: int,
    pool_size: int,
    no_offset_store: bool,
) -> int:
    """Mirror the flows' topics from source to target until stopped (SIGTERM/Ctrl-C drain and commit).

    SIGHUP re-reads the config file: added flows start, removed ones drain and stop, changed
    ones restart, the others carry on; a file that does not validate is refused (logged)."""
    if metrics_port and metrics_port + workers - 1 > 65535:  # worker i serves on metrics_port + i
        raise UsageError(
            f"--metrics-port {metrics_port} with --workers {workers}: worker {workers - 1} would serve on "
            f"{metrics_port + workers - 1}",
            hint="choose a port at most 65536 - workers",
        )
    config = app.config(config_path)
    selected = config.select_flows(flows)
    with stop_on_signals(reload=True) as signals:
        stop = signals.stop
        if workers > 1:
            argv = [
                "run",
                "-c",
                str(config_path),
                "--pool-size",
                str(workers),
                *[a for f in flows for a in ("--flow", f)],
            ]
            if until_caught_up:
                argv.append("--until-caught-up")
            if no_offset_store:
                argv.append("--no-offset-store")
            if app.debug:
                argv.insert(0, "--debug")
            if app.verbose:
                argv.insert(0, "-" + "v" * app.verbose)
            rc = supervise(argv, workers, metrics_port=metrics_port, stop=stop, reload=signals.reload)
        else:
            stop_with_supervisor(stop)
            run_flows(
                config,
                selected,
                stop=stop,
                until_caught_up=until_caught_up,
                metrics_port=metrics_port,
                offset_store=not no_offset_store,
                reload=signals.reload,
                config_path=config_path,
                names=flows,
                pool_size=pool_size,
            )
            rc = ExitCode.OK
    if signals.interrupted:
        click.echo("Interrupted: drained and committed.", err=True)
        return ExitCode.INTERRUPTED
    return rc
