"""`mirror audit`: compare a flow's source and target with a Spark batch job (exit 0 equal, 1 not)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from mirror.cli import AppContext, config_option, json_option, pass_app
from mirror.errors import ExitCode, UsageError


@click.command()
@config_option
@click.option("--flow", "flow_name", required=True, help="The flow to audit.")
@click.option(
    "--topic", "topics", multiple=True, help="Only this source topic (repeatable); default all the flow mirrors."
)
@click.option(
    "--from",
    "from_time",
    default=None,
    help="Only records with event time at or after TIME (ISO 8601, epoch ms, or -15m).",
)
@click.option("--to", "to_time", default=None, help="Only records with event time before TIME.")
@click.option("--master", default=None, help="Spark master URL; default local[*].")
@json_option
@pass_app
def audit(
    app: AppContext,
    config_path: Path,
    flow_name: str,
    topics: tuple[str, ...],
    from_time: str | None,
    to_time: str | None,
    master: str | None,
    as_json: bool,
) -> int:
    """Counts, checksums and (with provenance headers) an exact join of source and target, per partition.

    The window ends at what the flow's group committed (records in flight are not missing).
    Without provenance headers the partitions are compared by counts and checksums only, in
    total and per minute of event time, the target's side ending at the copy of the
    committed offset (the offset map). Records gone from the start of a target partition
    that the target topic's retention explains (older than its retention.ms, or any with a
    retention.bytes) are reported as trimmed, not as a difference; gone records retention
    does not explain (deleted by hand) are missing. Records the source lost before the flow
    copied them (recorded source gaps) are counted as skipped, apart from the differences.
    Exit 0 when equal, 1 when not.
    """
    from mirror.cli.times import parse_time
    from mirror.spark.audit import audit as run_audit
    from mirror.spark.session import check_java, check_master, start_session

    config = app.config(config_path)
    (flow,) = config.select_flows((flow_name,))
    now = int(time.time() * 1000)

    def when(value: str | None, flag: str) -> int | None:
        if value is None:
            return None
        try:
            return parse_time(value, now)
        except UsageError as exc:
            raise UsageError(exc.message.replace("--at", flag), hint=exc.hint) from None

    from_ms, to_ms = when(from_time, "--from"), when(to_time, "--to")
    check_java()
    check_master(master or "local[*]")
    # Started as `mirror spark run` starts its own: a JVM that does not start is one line.
    starting = start_session(master or "local[*]", f"mirror-audit-{flow.name}", quiet=not app.debug)
    try:
        report = run_audit(starting.get(), config, flow, list(topics) or None, from_ms=from_ms, to_ms=to_ms)
    finally:
        starting.close()  # stops the session
    if as_json:
        click.echo(report.to_json())
    else:
        for p in report.partitions:
            state = "equal" if p.equal else "DIFFERENT"
            line = (
                f"{p.source_topic}[{p.partition}] -> {p.target_topic}: {p.source_count} source, "
                f"{p.target_count} target, {state}"
            )
            details = [f"{k} {v}" for k, v in (("missing", p.missing), ("extra", p.extra), ("altered", p.altered)) if v]
            if not p.checksum_equal:
                details.append("checksum differs")
            if p.trimmed:
                details.append(f"{p.trimmed} older records trimmed by the target's retention")
            if p.skipped:
                ranges = ", ".join(f"{first}..{last}" for first, last in p.skipped_ranges)
                details.append(f"{p.skipped} records skipped at the source, never mirrored ({ranges})")
            if p.minutes_differing:
                details.append(f"{p.minutes_differing} minutes differ")
            click.echo(line + (f" ({'; '.join(details)})" if details else ""))
    return ExitCode.OK if report.equal else ExitCode.FAILURE
