"""`mirror spark run` and `mirror spark submit`: a flow mirrored by a Spark Structured Streaming query."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from mirror.cli import AppContext, config_option, pass_app
from mirror.cli.signals import stop_on_signals
from mirror.errors import ExitCode
from mirror.spark.submit import DEPLOY_MODES

F = TypeVar("F", bound=Callable[..., Any])

# The options `spark run` and `spark submit` share: one flow's job, wherever its driver runs.
_FLOW_JOB_OPTIONS = (
    config_option,
    click.option("--flow", "flow_name", required=True, help="The flow to mirror (one per Spark application)."),
    click.option(
        "--until-caught-up",
        is_flag=True,
        help="Mirror what the source holds at start (Trigger.AvailableNow), commit, exit 0.",
    ),
    click.option(
        "--checkpoint",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Spark checkpoint directory of this flow (default: <spark.checkpoint_dir>/<flow>, kept across "
        "restarts; the flow's group says where to resume).",
    ),
    click.option(
        "--metrics-port",
        type=click.IntRange(0, 65535),
        default=None,
        help="The driver serves Prometheus metrics on this port (the mirror's and Spark's progress).",
    ),
    click.option(
        "--max-records-per-batch",
        type=click.IntRange(1),
        default=None,
        help="Cap a micro-batch (Spark's maxOffsetsPerTrigger).",
    ),
    click.option(
        "--conf",
        "spark_conf",
        multiple=True,
        metavar="KEY=VALUE",
        help="A Spark setting (repeatable), as spark-submit's --conf, e.g. spark.executor.memory=2g.",
    ),
)


def _flow_job_options(f: F) -> F:
    """Add the options `spark run` and `spark submit` share, in this order in --help."""
    for option in reversed(_FLOW_JOB_OPTIONS):
        f = option(f)
    return f


@click.group()
def spark() -> None:
    """Run a flow's data pipeline on Spark: here (`run`) or as a Spark application (`submit`)."""


@spark.command("run")
@_flow_job_options
@click.option("--master", default=None, help="Spark master URL, e.g. spark://127.0.0.1:7077; default local[*].")
@click.option(
    "--ui-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port of the Spark UI (default 4040; the next free one if taken; 0: any).",
)
@click.option("--no-ui", is_flag=True, help="Do not start the Spark UI.")
@pass_app
def run(
    app: AppContext,
    config_path: Path,
    flow_name: str,
    master: str | None,
    until_caught_up: bool,
    checkpoint: Path | None,
    metrics_port: int | None,
    max_records_per_batch: int | None,
    ui_port: int | None,
    no_ui: bool,
    spark_conf: tuple[str, ...],
) -> int:
    """Mirror one flow with Spark until stopped (or caught up); SIGTERM/Ctrl-C stop after the current batch."""
    from mirror.spark.checkpoint import default_checkpoint, own_checkpoint
    from mirror.spark.session import LOCAL, UI_PORT, check_local, start_session
    from mirror.spark.submit import parse_conf

    conf = dict(parse_conf(spark_conf))
    config = app.config(config_path)
    (flow,) = config.select_flows((flow_name,))
    # The handlers first: a SIGTERM or Ctrl-C while the JVM starts is a stop like any other.
    with stop_on_signals() as signals:
        check_local(config, flow, master or LOCAL)
        # run_flow's own claim, taken before a JVM starts and held until the session is
        # stopped: a second driver of the flow is refused here (exit 3) without starting one.
        with own_checkpoint(checkpoint or default_checkpoint(config, flow), flow):
            # The JVM and the SparkContext start now, beside the engine's imports, the clusters'
            # checks and the flow's start; the first query takes the session when it needs it.
            starting = start_session(
                master or LOCAL,
                f"mirror-{flow.name}",
                conf,
                quiet=not app.debug,
                ui_port=None if no_ui else UI_PORT if ui_port is None else ui_port,
            )
            try:
                from mirror.spark.job import run_flow
                from mirror.spark.jvm import describe_paths

                job = run_flow(
                    config,
                    flow,
                    master=master,
                    checkpoint=checkpoint,
                    until_caught_up=until_caught_up,
                    max_records_per_batch=max_records_per_batch,
                    metrics_port=metrics_port,
                    stop=signals.stop,
                    starting=starting,
                )
            finally:
                starting.close()
    click.echo(
        f"flow {flow.name}: {job.records} records mirrored on Spark ({job.skipped} already on the target; "
        f"{describe_paths(job.paths)})",
        err=True,
    )
    if signals.interrupted:
        return ExitCode.INTERRUPTED
    return ExitCode.OK


def _container_local(config_path: Path, checkpoint: Path | None, checkpoint_dir: str) -> bool:
    """In cluster mode the driver resolves a relative checkpoint in its own container (the config
    is shipped by base name): only an absolute one can be a volume the drivers share."""
    if checkpoint is not None:
        return not checkpoint.is_absolute()
    # spark.checkpoint_dir, resolved at load beside the config file unless written absolute.
    return Path(checkpoint_dir).is_relative_to(config_path.resolve().parent)


@spark.command("submit")
@_flow_job_options
@click.option(
    "--master", required=True, help="Spark master URL: spark://HOST:PORT, yarn, k8s://https://HOST:PORT or local[N]."
)
@click.option(
    "--deploy-mode",
    type=click.Choice(DEPLOY_MODES),
    default="client",
    show_default=True,
    help="Where the driver runs: here (client) or on the cluster (cluster: YARN and Kubernetes only).",
)
@click.option(
    "--package-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    envvar="MIRROR_SPARK_PACKAGE_DIR",
    help="Where the executors' package is built and kept (default ~/.cache/mirror/spark-submit).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Build (or reuse) the package and print the spark-submit line instead of running it.",
)
@pass_app
def submit(
    app: AppContext,
    config_path: Path,
    flow_name: str,
    master: str,
    deploy_mode: str,
    until_caught_up: bool,
    checkpoint: Path | None,
    max_records_per_batch: int | None,
    metrics_port: int | None,
    spark_conf: tuple[str, ...],
    package_dir: Path | None,
    dry_run: bool,
) -> int:
    """Run one flow as a Spark application through spark-submit; SIGTERM/Ctrl-C stop it after the current batch."""
    from mirror.spark.session import CACHE, check_java, check_master
    from mirror.spark.submit import SubmitRequest, check_deploy_mode, loopback_master, parse_conf, prepare, render
    from mirror.spark.submit import run as run_submit

    config = app.config(config_path)
    (flow,) = config.select_flows((flow_name,))
    flags = (("--debug",) if app.debug else ()) + (("-" + "v" * app.verbose,) if app.verbose else ())
    req = SubmitRequest(
        config_path,
        flow.name,
        master,
        deploy_mode,
        until_caught_up,
        checkpoint,
        max_records_per_batch,
        metrics_port,
        parse_conf(spark_conf),
        flags,
    )
    if not dry_run:  # before building anything; a usage error before a runtime one
        check_deploy_mode(master, deploy_mode)
        check_java()
        check_master(master)
        if deploy_mode == "client":
            # The driver will run here on this checkpoint and hold it (mirror.cli.spark_app); while
            # another driver holds it, refuse now rather than after spark-submit's JVM started.
            # Only a look: held across spark-submit, it would refuse our own driver.
            from mirror.spark.checkpoint import default_checkpoint, own_checkpoint

            with own_checkpoint(checkpoint or default_checkpoint(config, flow), flow):
                pass
        elif _container_local(config_path, checkpoint, config.spark.checkpoint_dir):
            click.echo(
                f"Warning: flow {flow.name}: in cluster mode a relative checkpoint is in the driver "
                "container's own directory, so a second driver of the flow is not refused; give an "
                "absolute --checkpoint (or spark.checkpoint_dir) on a volume every driver mounts",
                err=True,
            )
    cmd = prepare(req, package_dir or CACHE / "spark-submit")
    if dry_run:
        click.echo(render(cmd))
        return ExitCode.OK
    with stop_on_signals() as signals:
        rc = run_submit(cmd, loopback=loopback_master(master), stop=signals.stop, received=signals.received)
    if signals.interrupted and rc == ExitCode.OK:
        return ExitCode.INTERRUPTED
    return rc
