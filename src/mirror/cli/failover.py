"""`mirror failover plan|apply|export|import` and `mirror failback`: thin click commands over `failover`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from failover import offsets_file
from failover.apply import apply_plan
from failover.failback import report, reversed_flow
from failover.failback import scrape as do_scrape
from failover.gather import FlowContext, build_plan
from failover.plan import Method, Plan
from mirror.cli.times import format_ms, parse_time
from mirror.cli import AppContext, config_option, json_option, pass_app
from mirror.errors import NotFound, UsageError
from mirror.kafka import Admin
from mirror.store import open_store


def _now_ms() -> int:
    return int(time.time() * 1000)


@contextmanager
def _flow_context(app: AppContext, config_path: Path, flow: str) -> Iterator[FlowContext]:
    config = app.config(config_path)
    ctx = FlowContext(config, config.flow(flow), lambda: open_store(config.offset_store))
    try:
        yield ctx
    finally:
        ctx.close()


def _method(translate: bool, at: str | None, to: str | None) -> tuple[Method, int | None]:
    chosen = [n for n, v in (("--translate", translate), ("--at", at), ("--to", to)) if v]
    if len(chosen) != 1:
        raise UsageError(
            "choose exactly one of --translate, --at TIME, --to earliest|latest" + (f" (got {' and '.join(chosen)})" if chosen else ""),
            hint="--translate is the exact one when the offset map is in use",
        )
    if translate:
        return Method.TRANSLATE, None
    if at is not None:
        return Method.TIMESTAMP, parse_time(at, _now_ms())
    return (Method.EARLIEST if to == "earliest" else Method.LATEST), None


def _choice(f):  # type: ignore[no-untyped-def]
    f = click.option("--to", type=click.Choice(["earliest", "latest"]), help="Start at the target's beginning or end.")(f)
    f = click.option("--at", metavar="TIME", help="Start at the first record with timestamp >= TIME (ISO 8601, epoch ms, or -15m).")(f)
    f = click.option("--translate", is_flag=True, help="Translate the group's source offsets (live, else newest checkpoints).")(f)
    f = click.option("--group", required=True, help="Consumer group to move.")(f)
    f = click.option("--flow", required=True, help="Flow whose target the group moves to.")(f)
    return f


def _render(plan: Plan) -> None:
    click.echo(f"flow {plan.flow}, group {plan.group}: method {plan.method.value}, from {plan.truth.value}"
               + (f" (at {format_ms(plan.at_ms)})" if plan.at_ms is not None else "")
               + (f" (checkpoints from {format_ms(plan.checkpoint_time_ms)})" if plan.checkpoint_time_ms else ""))
    click.echo(f"{'target topic':<32} {'part':>4} {'source':>12} {'target':>12} {'unmirrored':>10}" + (f" {'boundary':>8}" if plan.at_ms is not None else ""))
    for p in plan.partitions:
        src = "-" if p.source_offset is None else str(p.source_offset)
        line = f"{p.target_topic:<32} {p.partition:>4} {src:>12} {p.target_offset:>12} {p.unmirrored:>10}"
        if p.boundary_records is not None:
            line += f" {p.boundary_records:>8}"
        click.echo(line)
    click.echo(f"records at risk (on the source, never mirrored to the target): {plan.unmirrored}")
    if plan.at_ms is not None:
        click.echo(f"records sharing the boundary millisecond (may be processed twice): {plan.boundary_records}")
    for note in plan.notes:
        click.echo(f"note: {note}")


@click.group()
def failover() -> None:
    """Move consumer groups to a flow's target cluster: plan, apply, export, import."""


@failover.command()
@config_option
@_choice
@json_option
@pass_app
def plan(app: AppContext, config_path: Path, flow: str, group: str, translate: bool, at: str | None, to: str | None, as_json: bool) -> None:
    """Show where GROUP would start on the target; changes nothing."""
    method, at_ms = _method(translate, at, to)
    with _flow_context(app, config_path, flow) as ctx:
        result = build_plan(ctx, group, method, at_ms=at_ms)
    if as_json:
        # One line, by the C encoder: `indent=` would use the pure-Python one (~1 s at 10,000 partitions).
        click.echo(json.dumps(result.to_json()))
    else:
        _render(result)


@failover.command()
@config_option
@_choice
@click.option("--yes", is_flag=True, help="Confirm: commit the plan's offsets on the target.")
@click.option("--backup", type=click.Path(dir_okay=False, path_type=Path), help="Where to save the group's current target offsets (default failover-backup-CLUSTER-GROUP-MS.json).")
@json_option
@pass_app
def apply(app: AppContext, config_path: Path, flow: str, group: str, translate: bool, at: str | None, to: str | None, yes: bool, backup: Path | None, as_json: bool) -> None:
    """Commit the plan on the target (group must have no active members there)."""
    method, at_ms = _method(translate, at, to)
    if not yes:
        raise UsageError("--yes is required: apply changes the group's offsets on the target", hint="review `mirror failover plan` first, then add --yes")
    with _flow_context(app, config_path, flow) as ctx:
        result = build_plan(ctx, group, method, at_ms=at_ms)
        path, changes = apply_plan(ctx, result, backup)
    if as_json:
        click.echo(json.dumps({"plan": result.to_json(), "backup": str(path), "changes": [
            {"topic": c.topic, "partition": c.partition, "before": c.before, "after": c.after} for c in changes]}))
        return
    _render(result)
    click.echo(f"backup of the previous offsets: {path} (restore: mirror failover import -c {config_path} --cluster {ctx.flow.target} {path} --yes)")
    for c in changes:
        before = "none" if c.before is None else str(c.before)
        click.echo(f"set {group} {c.topic}[{c.partition}]: {before} -> {c.after}")


@failover.command()
@config_option
@click.option("--cluster", required=True, help="Cluster to read the group's offsets from.")
@click.option("--group", required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="File to write (default: stdout).")
@pass_app
def export(app: AppContext, config_path: Path, cluster: str, group: str, output: Path | None) -> None:
    """Save a group's committed offsets on one cluster as JSON."""
    config = app.config(config_path)
    doc = offsets_file.export(Admin(cluster, config.cluster(cluster)), cluster, group, _now_ms())
    if not doc.offsets:
        raise NotFound(f"group {group!r} has no committed offsets on cluster {cluster!r}", hint="check the group name")
    if output:
        offsets_file.write(output, doc)
        click.echo(f"wrote {len(doc.offsets)} offsets of {group} on {cluster} to {output}")
    else:
        click.echo(json.dumps(doc.to_json(), indent=2))


@failover.command(name="import")
@config_option
@click.option("--cluster", required=True, help="Cluster to write the offsets to.")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--yes", is_flag=True, help="Confirm: replace the group's offsets on the cluster.")
@pass_app
def import_(app: AppContext, config_path: Path, cluster: str, file: Path, yes: bool) -> None:
    """Restore a group's offsets from FILE (an export, or the backup `apply` wrote)."""
    config = app.config(config_path)
    doc = offsets_file.read(file)
    admin = Admin(cluster, config.cluster(cluster))
    if not yes:
        raise UsageError("--yes is required: import replaces the group's offsets", hint="add --yes")
    if doc.cluster != cluster:
        click.echo(f"note: {file} was exported from cluster {doc.cluster!r}; writing it to {cluster!r}", err=True)
    before = offsets_file.restore(admin, offsets_file.GroupOffsets(cluster, doc.group, doc.time_ms, doc.offsets))
    for (t, p) in sorted(set(before) | set(doc.offsets)):
        old, new = before.get((t, p)), doc.offsets.get((t, p))
        if old != new:
            click.echo(f"set {doc.group} {t}[{p}]: {'none' if old is None else old} -> {'none' if new is None else new}")
    click.echo(f"restored {len(doc.offsets)} offsets of group {doc.group} on {cluster}")


@click.command()
@config_option
@click.option("--flow", required=True, help="The flow that was failed over (its source is the old primary).")
@click.option("--scrape", is_flag=True, help="Delete the mirrored topics' records and the flow's groups on the old primary.")
@click.option("--yes", is_flag=True, help="Confirm --scrape.")
@json_option
@pass_app
def failback(app: AppContext, config_path: Path, flow: str, scrape: bool, yes: bool, as_json: bool) -> None:
    """Report what the old primary holds that never reached the new one; print the reversed flow."""
    if scrape and not yes:
        raise UsageError("--scrape deletes data on the old primary and needs --yes", hint="review the report without --scrape first")
    with _flow_context(app, config_path, flow) as ctx:
        rep = report(ctx)
        if scrape:
            do_scrape(ctx, rep)
        reverse = reversed_flow(ctx)
    if as_json:
        click.echo(json.dumps({**rep.to_json(), "reversed_flow": reverse}, indent=2))
        return
    click.echo(f"old primary {rep.old_primary} -> new primary {rep.new_primary} (flow {rep.flow})")
    for p in rep.partitions:
        if p.records:
            click.echo(f"  {p.topic}[{p.partition}]: {p.records} records never reached {rep.new_primary} (offsets {p.old_end - p.records}..{p.old_end - 1})")
    click.echo(f"records on {rep.old_primary} that never reached {rep.new_primary}: {rep.stranded}")
    if rep.scraped:
        click.echo(f"scraped {rep.old_primary}: deleted the records of {len(rep.partitions)} partitions and groups {', '.join(rep.groups) or '(none)'}")
    elif rep.groups:
        click.echo(f"groups on {rep.old_primary} that --scrape would delete: {', '.join(rep.groups)}")
    click.echo("\nAdd this flow to mirror back (and remove or stop the old one):\n")
    click.echo(reverse)
