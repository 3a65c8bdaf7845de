"""`mirror drill RUNBOOK`: run an executable runbook and report what the failover cost.

The wiring lives here, the work in `mirror.drill`: commands run through the real `mirror`
command tree (in-process), `--dry-run` parses them with click's own parser without
running them, and a broker is killed only when `mirror dev` (or the test fixture) under
`--dev-home` started it: its bootstrap matches the config's and its pid file and command
line prove it (the same proof `mirror dev down` uses).
"""

from __future__ import annotations

import io
import json
import time
import traceback
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import click

from mirror.cli import AppContext, cli, config_option, json_option, main, pass_app
from mirror.cli.options import option
from mirror.config import Config, FlowConfig
from mirror.devenv.kafka import DevClusters, KafkaNode
from mirror.domain.runbook import parse_runbook
from mirror.drill.runner import Drill, Request
from mirror.drill.runner import dry_run as check_only
from mirror.errors import UnsafeOperation, UsageError
from mirror.kafka import Admin, PartitionReader
from mirror.monitor.gather import gather_flow


def _invoke(argv: list[str]) -> tuple[int, str, str]:
    """Run `mirror ARGV` in this process, as a person would type it; capture its output."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception:  # a bug in a command: the step fails with it, the drill goes on reporting
            traceback.print_exc()
            code = 1
    return int(code), out.getvalue(), err.getvalue()


def parse_argv(argv: list[str]) -> dict[str, Any]:
    """Parse `mirror ARGV` down to its leaf command with click, invoking nothing; its params."""
    try:
        ctx = cli.make_context("mirror", list(argv))
        cmd: click.Command = cli
        while isinstance(cmd, click.Group):
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
            name, sub, args = cmd.resolve_command(ctx, rest)
            if sub is None or name is None:
                raise click.UsageError(f"no command {rest[:1]}")
            ctx = sub.make_context(name, args, parent=ctx)
            cmd = sub
        return dict(ctx.params)
    except click.exceptions.Exit:
        return {}
    except click.ClickException as exc:
        raise ValueError(exc.format_message()) from None


class DevBrokers:
    """Kill/start only brokers of `mirror dev` clusters under one home, matched by bootstrap."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.dev = DevClusters(home)

    def _node(self, cluster: str, bootstrap: str) -> KafkaNode:
        want = bootstrap.replace("localhost", "127.0.0.1").strip()
        for node in self.dev.nodes():
            if node.spec.bootstrap == want:
                return node
        raise UnsafeOperation(
            f"cluster {cluster!r} ({bootstrap}) is not a dev cluster started under {self.home}: a drill "
            "kills only brokers it can prove it started",
            hint="drill unplanned failovers on `mirror dev up` clusters and pass their --dev-home",
        )

    def kill(self, cluster: str, bootstrap: str) -> str:
        node = self._node(cluster, bootstrap)
        pid = node.pid()
        if pid is None:
            raise UnsafeOperation(
                f"cluster {cluster!r}: no running broker under {self.home} whose pid file and command line are ours"
            )
        node.stop(kill=True)
        return f"SIGKILL to the broker of {cluster} (pid {pid}, dev cluster under {self.home})"

    def start(self, cluster: str, bootstrap: str) -> str:
        node = self._node(cluster, bootstrap)
        if node.pid() is None:
            node.start()
        node.wait_ready()
        return f"started the broker of {cluster} again (pid {node.pid()})"


def _measure_lag(config: Config, flows: list[FlowConfig]) -> Callable[[], tuple[int, float | None]]:
    """The flows' lag at the cutover: records summed, the oldest unmirrored record's age."""

    def measure() -> tuple[int, float | None]:
        records, seconds = 0, None
        for flow in flows:
            reader = PartitionReader(f"{flow.source}-drill-lag", config.cluster(flow.source))
            try:
                lag = gather_flow(
                    config,
                    flow,
                    source=Admin(flow.source, config.cluster(flow.source)),
                    target=Admin(flow.target, config.cluster(flow.target)),
                    reader=reader,
                    with_groups=False,
                    strict=True,  # a missing grant fails the drill's step, naming it
                )
            finally:
                reader.close()
            records += lag.lag_records
            if lag.lag_seconds is not None:
                seconds = max(seconds or 0.0, lag.lag_seconds)
        return records, seconds

    return measure


def _site_flows(config: Config, site: str, to: str | None) -> list[FlowConfig]:
    clusters = config.site(site, "--from")
    targets = config.site(to, "--to") if to else None
    flows = [f for f in config.flows if f.source in clusters and (targets is None or f.target in targets)]
    if not flows:
        raise UsageError(f"--from: no flow reads from {site!r} ({', '.join(clusters)})" + (f" to {to!r}" if to else ""))
    return flows


@click.command()
@click.argument("runbook", type=click.Path(dir_okay=False, path_type=Path))
@config_option
@click.option("--flow", help="Flow whose target is the DR cluster.")
@click.option(
    "--group",
    required=True,
    help="Consumer group to drill (must match the flow's `groups`); with --from the prefix of the drill's groups.",
)
@click.option(
    "--from",
    "site",
    metavar="NAME",
    help="Drill a whole site (cluster or datacenter): every flow from it, --groups groups each.",
)
@click.option(
    "--to", "dr_site", metavar="NAME", help="With --from: the DR site ($DR in the runbook; default the flows' target)."
)
@click.option(
    "--groups",
    "groups_per_flow",
    type=click.IntRange(1, 20),
    default=2,
    show_default=True,
    help="With --from: drill groups per flow (GROUP-FLOW-K).",
)
@click.option("--yes", is_flag=True, help="Confirm: the drill moves the group's offsets and may kill a dev broker.")
@option(
    "--out",
    "report_dir",
    aliases=["--report"],
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for report.md, report.json and the commands' files (default drill-FLOW-TIME).",
)
@click.option(
    "--from-step",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Resume a drill (same --out) at this step.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check every command parses and every flow, cluster and group exists; change nothing.",
)
@click.option(
    "--topic",
    default="mirror-drill",
    show_default=True,
    help="The drill workload's topic on the primary (the flow must mirror it).",
)
@click.option(
    "--partitions",
    type=click.IntRange(1, 64),
    default=3,
    show_default=True,
    help="Partitions of the drill topic when the drill creates it.",
)
@click.option(
    "--dev-home",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".mirror/dev"),
    envvar="MIRROR_DEV_HOME",
    show_default=True,
    help="Where `mirror dev up` keeps its clusters: the only brokers `manual: kill-primary` may kill.",
)
@json_option
@pass_app
def drill(
    app: AppContext,
    runbook: Path,
    config_path: Path,
    flow: str | None,
    group: str,
    site: str | None,
    dr_site: str | None,
    groups_per_flow: int,
    yes: bool,
    report_dir: Path | None,
    from_step: int,
    dry_run: bool,
    topic: str,
    partitions: int,
    dev_home: Path,
    as_json: bool,
) -> None:
    """Run RUNBOOK's steps against the clusters, check each expectation, report RTO, RPO, lost and duplicated."""
    try:
        text = runbook.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(
            f"RUNBOOK: cannot read {str(runbook)!r}: {exc.strerror}",
            hint="pass the path of a runbook, e.g. runbooks/drill.md",
        ) from None
    book = parse_runbook(text, str(runbook))
    config = app.config(config_path)
    if (flow is None) == (site is None):
        raise UsageError("choose one of --flow NAME (one group) and --from NAME (a whole site)")
    flows = _site_flows(config, site, dr_site) if site is not None else [config.flow(flow or "")]
    req = Request(
        runbook,
        config_path.resolve(),
        config,
        flows[0],
        group,
        (report_dir or Path(f"drill-{flow or site}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")).resolve(),
        from_step,
        topic,
        partitions,
        dev_home=dev_home.resolve(),
    )
    if site is not None:
        req.site, req.dr_site, req.site_flows, req.groups_per_flow = site, dr_site, flows, groups_per_flow
        req.site_groups = {f"{group}-{f.name}-{k}": f.name for f in flows for k in range(groups_per_flow)}
    summary = check_only(book, req, parse_argv)
    if dry_run:
        click.echo(summary)
        return
    if not yes:
        raise UsageError(
            "--yes is required: a drill moves the group's offsets (and kill-primary kills a dev broker)",
            hint="check it first with --dry-run",
        )
    report = Drill(book, req, _invoke, DevBrokers(dev_home), _measure_lag(config, flows)).run()
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    line = f"drill {report['outcome']}: {len(report['steps'])} steps"
    if report.get("rto_seconds") is not None:
        line += f"; RTO {report['rto_seconds']:g} s"
    if report.get("rpo"):
        secs = report["rpo"]["seconds"]
        line += f"; RPO {report['rpo']['records']} records, " + ("? s" if secs is None else f"{secs:.1f} s")
    if report.get("workload"):
        line += f"; lost {report['workload']['lost']}, duplicated {report['workload']['duplicated']}"
    click.echo(line)
    click.echo(f"report: {req.report_dir / 'report.md'} and report.json")
