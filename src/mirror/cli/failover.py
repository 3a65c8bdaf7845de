"""`mirror failover plan|apply|export|import` and `mirror failback`: thin click commands over `failover`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from failover import offsets_file
from failover.apply import BACKUP_WRITTEN, apply_plan, default_backup_path
from failover.failback import report, reversed_flow
from failover.failback import scrape as do_scrape
from failover.gather import FlowContext, build_plan, require_topics_visible
from failover.plan import Method, Plan
from failover.sitegather import group_site_plan
from mirror.cli import AppContext, config_option, json_option, pass_app
from mirror.cli import failover_site as site_cli
from mirror.cli.times import format_ms, parse_time
from mirror.errors import MirrorError, NotFound, UsageError
from mirror.kafka import Admin
from mirror.store import open_store


def _now_ms() -> int:
    return int(time.time() * 1000)


def _restore_command(config_path: Path, cluster: str, backup: Path) -> str:
    return f"mirror failover import -c {config_path} --cluster {cluster} {backup} --yes"


@contextmanager
def _flow_context(app: AppContext, config_path: Path, flow: str) -> Iterator[FlowContext]:
    config = app.config(config_path)
    ctx = FlowContext(config, config.flow(flow), lambda: open_store(config.offset_store))
    try:
        yield ctx
    finally:
        ctx.close()


def _method(translate: bool, at: str | None, to: str | None) -> tuple[Method, int | None]:
    if to is not None and to not in ("earliest", "latest"):
        raise UsageError(
            f"--to: with --flow it is earliest or latest, not {to!r}",
            hint="--to NAME (a cluster or datacenter) goes with --from",
        )
    chosen = [n for n, v in (("--translate", translate), ("--at", at), ("--to", to)) if v]
    if len(chosen) != 1:
        raise UsageError(
            "choose exactly one of --translate, --at TIME, --to earliest|latest"
            + (f" (got {' and '.join(chosen)})" if chosen else ""),
            hint="--translate is the exact one when the offset map is in use",
        )
    if translate:
        return Method.TRANSLATE, None
    if at is not None:
        return Method.TIMESTAMP, parse_time(at, _now_ms())
    return (Method.EARLIEST if to == "earliest" else Method.LATEST), None


def _single(config_path: Path | None, flow: str | None, groups: tuple[str, ...]) -> tuple[Path, str, str]:
    """The single-group form's -c, --flow and its one --group, or a usage error naming what is missing."""
    if config_path is None:
        raise UsageError("-c/--config is required (or MIRROR_CONFIG)")
    if not flow:
        raise UsageError("--flow is required (or --from NAME for a whole site, --plan PLAN for apply)")
    if len(groups) != 1:
        raise UsageError(
            f"--group: with --flow, exactly one group ({len(groups)} given)",
            hint="use --from NAME to move many groups at once",
        )
    return config_path, flow, groups[0]


def _site_method(translate: bool, at: str | None) -> tuple[Method, int | None]:
    if translate == (at is not None):
        raise UsageError(
            "with --from, choose exactly one of --translate, --at TIME",
            hint="--translate is the exact one when the offset map is in use",
        )
    return (Method.TRANSLATE, None) if translate else (Method.TIMESTAMP, parse_time(at or "", _now_ms()))


def _choice(f):  # type: ignore[no-untyped-def]
    f = click.option(
        "--to",
        metavar="NAME",
        help="With --flow: earliest|latest (the target's beginning or end). With --from: only flows to this "
        "cluster or datacenter.",
    )(f)
    f = click.option(
        "--at", metavar="TIME", help="Start at the first record with timestamp >= TIME (ISO 8601, epoch ms, or -15m)."
    )(f)
    f = click.option(
        "--translate", is_flag=True, help="Translate the group's source offsets (live, else newest checkpoints)."
    )(f)
    f = click.option(
        "--group",
        "groups",
        multiple=True,
        help="The consumer group to move (with --from: patterns narrowing the groups; repeatable).",
    )(f)
    f = click.option("--flow", help="Flow whose target the group moves to (one group).")(f)
    return f


optional_config = click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="MIRROR_CONFIG",
    help="Topology YAML file (env MIRROR_CONFIG; default: the one the plan or backup names).",
)


def _render(plan: Plan) -> None:
    click.echo(
        f"flow {plan.flow}, group {plan.group}: method {plan.method.value}, from {plan.truth.value}"
        + (f" (at {format_ms(plan.at_ms)})" if plan.at_ms is not None else "")
        + (f" (checkpoints from {format_ms(plan.checkpoint_time_ms)})" if plan.checkpoint_time_ms else "")
    )
    click.echo(
        f"{'target topic':<32} {'part':>4} {'source':>12} {'target':>12} {'unmirrored':>10}"
        + (f" {'boundary':>8}" if plan.at_ms is not None else "")
    )
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
@click.option(
    "--from",
    "site",
    metavar="NAME",
    help="A whole site: every flow from this cluster or datacenter, every group they checkpoint.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the plan file here, for `apply --plan` (one format for one group and for a site).",
)
@click.option(
    "-v",
    "--verbose",
    "details",
    is_flag=True,
    help="Every partition under its group (a one-group plan always lists them).",
)
@click.option(
    "--promote", is_flag=True, help="With --from: also list the WRITE ACLs `apply --plan --promote` would add."
)
@json_option
@pass_app
def plan(
    app: AppContext,
    config_path: Path,
    flow: str | None,
    groups: tuple[str, ...],
    translate: bool,
    at: str | None,
    to: str | None,
    site: str | None,
    out: Path | None,
    details: bool,
    promote: bool,
    as_json: bool,
) -> None:
    """Show where GROUP (or every group of a site) would start on the target; changes nothing."""
    if site is not None:
        if flow:
            raise UsageError("--flow and --from: choose one (one group of a flow, or a whole site)")
        method, at_ms = _site_method(translate, at)
        site_cli.plan_site(
            app.config(config_path),
            config_path,
            site,
            to,
            groups,
            method,
            at_ms,
            as_json,
            out,
            details,
            promote=promote,
        )
        return
    if promote:
        raise UsageError("--promote needs --from: promotion moves a site's producers (`apply --plan --promote`)")
    config_path, flow, group = _single(config_path, flow, groups)
    method, at_ms = _method(translate, at, to)
    with _flow_context(app, config_path, flow) as ctx:
        result = build_plan(ctx, group, method, at_ms=at_ms)
        saved = group_site_plan(ctx, result, str(config_path.resolve()), _now_ms()) if out is not None else None
    if saved is not None and out is not None:
        text = saved.to_text()
        site_cli.write_plan(out, text)
    if as_json:
        # One line, by the C encoder: `indent=` would use the pure-Python one (~1 s at 10,000 partitions).
        click.echo(json.dumps(result.to_json()))
        return
    _render(result)
    if saved is not None and out is not None:
        if saved.groups[0].refused:
            click.echo(f"note: the plan file refuses the group: {saved.groups[0].refused}")
        site_cli.written(json.loads(text)["id"], out)


@failover.command()
@optional_config
@_choice
@click.option(
    "--plan",
    "plan_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A plan file written by `plan ... --out` (one group or a site): apply it as written.",
)
@click.option("--yes", is_flag=True, help="Confirm: commit the plan's offsets on the target.")
@click.option(
    "--promote",
    is_flag=True,
    help="With --plan: also copy the source's WRITE ACLs of the moved topics to the target (recorded in the backup).",
)
@click.option(
    "--backup",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to save the current target offsets (default failover-backup-CLUSTER-GROUP-MS.json; with "
    "--plan PLAN.backup.json).",
)
@json_option
@pass_app
def apply(
    app: AppContext,
    config_path: Path | None,
    flow: str | None,
    groups: tuple[str, ...],
    translate: bool,
    at: str | None,
    to: str | None,
    plan_path: Path | None,
    yes: bool,
    promote: bool,
    backup: Path | None,
    as_json: bool,
) -> None:
    """Commit the plan on the target (groups must have no active members)."""
    if not yes:
        raise UsageError(
            "--yes is required: apply changes the group's offsets on the target",
            hint="review `mirror failover plan` first, then add --yes",
        )
    if plan_path is not None:
        if flow or groups or translate or at or to:
            raise UsageError(
                "--plan applies the plan as written: no --flow, --group, --translate, --at or --to with it"
            )
        site_cli.apply_plan_file(app, config_path, plan_path, backup, as_json, promote=promote)
        return
    if promote:
        raise UsageError("--promote needs --plan: the promoted ACLs are recorded in the site backup")
    config_path, flow, group = _single(config_path, flow, groups)
    method, at_ms = _method(translate, at, to)
    with _flow_context(app, config_path, flow) as ctx:
        result = build_plan(ctx, group, method, at_ms=at_ms)
        now_ms = int(time.time() * 1000)
        backup = backup or default_backup_path(ctx.flow.target, result.group, now_ms)
        try:
            path, changes = apply_plan(ctx, result, backup, now_ms=now_ms)
        except MirrorError as exc:
            if BACKUP_WRITTEN + str(backup) in getattr(exc, "__notes__", ()):
                # Failed after the backup: the way back, as on success (the error's own hint
                # stays: what to fix before trying again).
                exc.message += f" (restore: {_restore_command(config_path, ctx.flow.target, backup)})"
            raise
    if as_json:
        click.echo(
            json.dumps(
                {
                    "plan": result.to_json(),
                    "backup": str(path),
                    "changes": [
                        {"topic": c.topic, "partition": c.partition, "before": c.before, "after": c.after}
                        for c in changes
                    ],
                }
            )
        )
        return
    _render(result)
    click.echo(
        f"backup of the previous offsets: {path} (restore: {_restore_command(config_path, ctx.flow.target, path)})"
    )
    for c in changes:
        before = "none" if c.before is None else str(c.before)
        click.echo(f"set {group} {c.topic}[{c.partition}]: {before} -> {c.after}")


@failover.command()
@config_option
@click.option("--cluster", required=True, help="Cluster to read the group's offsets from.")
@click.option("--group", required=True, help="Consumer group whose committed offsets are exported.")
@click.option(
    "--out", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path), help="File to write (default: stdout)."
)
# The earlier spelling, kept working for scripts; `--out` is the one name for output files.
@click.option("-o", "--output", "old_out", type=click.Path(dir_okay=False, path_type=Path), hidden=True)
@pass_app
def export(
    app: AppContext, config_path: Path, cluster: str, group: str, out: Path | None, old_out: Path | None
) -> None:
    """Save a group's committed offsets on one cluster as JSON."""
    output = out or old_out
    config = app.config(config_path)
    admin = Admin(cluster, config.cluster(cluster))
    doc = offsets_file.export(admin, cluster, group, _now_ms())
    if not doc.offsets:
        require_topics_visible(admin, config, cluster)  # hidden topics' offsets are left out, not refused
        raise NotFound(f"group {group!r} has no committed offsets on cluster {cluster!r}", hint="check the group name")
    if output:
        offsets_file.write(output, doc)
        click.echo(f"wrote {len(doc.offsets)} offsets of {group} on {cluster} to {output}")
    else:
        click.echo(json.dumps(doc.to_json(), indent=2))


@failover.command(name="import")
@optional_config
@click.option("--cluster", help="Cluster to write the offsets of FILE to.")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--backup",
    "backup",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A site backup `apply --plan` wrote: every group back to where it was.",
)
@click.option("--yes", is_flag=True, help="Confirm: replace the group's offsets on the cluster.")
@pass_app
def import_(
    app: AppContext, config_path: Path | None, cluster: str | None, file: Path | None, backup: Path | None, yes: bool
) -> None:
    """Restore a group's offsets from FILE (an export, or the backup `apply` wrote), or a whole site's from --backup."""
    if backup is not None:
        if file is not None or cluster:
            raise UsageError(
                "--backup restores every group to the cluster it was backed up from: no FILE or --cluster with it"
            )
        if not yes:
            raise UsageError("--yes is required: import replaces the groups' offsets", hint="add --yes")
        site_cli.import_backup(app, config_path, backup)
        return
    if file is None or not cluster or config_path is None:
        raise UsageError("give -c CONFIG --cluster NAME FILE (one group), or --backup FILE (a whole site)")
    config = app.config(config_path)
    doc = offsets_file.read(file)
    admin = Admin(cluster, config.cluster(cluster))
    if not yes:
        raise UsageError("--yes is required: import replaces the group's offsets", hint="add --yes")
    if doc.cluster != cluster:
        click.echo(f"note: {file} was exported from cluster {doc.cluster!r}; writing it to {cluster!r}", err=True)
    before = offsets_file.restore(admin, offsets_file.GroupOffsets(cluster, doc.group, doc.time_ms, doc.offsets))
    for t, p in sorted(set(before) | set(doc.offsets)):
        old, new = before.get((t, p)), doc.offsets.get((t, p))
        if old != new:
            click.echo(
                f"set {doc.group} {t}[{p}]: {'none' if old is None else old} -> {'none' if new is None else new}"
            )
    click.echo(f"restored {len(doc.offsets)} offsets of group {doc.group} on {cluster}")


@click.command()
@config_option
@click.option("--flow", help="The flow that was failed over (its source is the old primary).")
@click.option("--from", "site", metavar="NAME", help="A whole site: every flow from this cluster or datacenter.")
@click.option(
    "--scrape", is_flag=True, help="Delete the mirrored topics' records and the flows' groups on the old primary."
)
@click.option(
    "--promote",
    is_flag=True,
    help="Also copy the DR cluster's WRITE ACLs of the copies to the old primary under the source names "
    "(listed; created with --yes, recorded in --backup first).",
)
@click.option("--yes", is_flag=True, help="Confirm --scrape and --promote.")
@click.option(
    "--backup",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --promote --yes: where the added ACLs are recorded, for `failover import --backup` "
    "(default failback-backup-NAME-MS.json).",
)
@json_option
@pass_app
def failback(
    app: AppContext,
    config_path: Path,
    flow: str | None,
    site: str | None,
    scrape: bool,
    promote: bool,
    yes: bool,
    backup: Path | None,
    as_json: bool,
) -> None:
    """Report what the old primary holds that never reached the new one; print the reversed flow(s)."""
    if scrape and not yes:
        raise UsageError(
            "--scrape deletes data on the old primary and needs --yes", hint="review the report without --scrape first"
        )
    if (flow is None) == (site is None):
        raise UsageError(
            "choose one of --flow NAME (one flow) and --from NAME (every flow from a cluster or datacenter)"
        )
    if backup is not None and not (promote and yes):
        raise UsageError("--backup records the ACLs --promote --yes adds: give it with both")
    config = app.config(config_path)
    path = backup or site_cli.default_failback_backup(site or flow or "", _now_ms())

    def promoted(pairs: set[tuple[str, str]]) -> dict[str, Any]:
        return site_cli.failback_promote(config, config_path, pairs, path, yes, as_json) if promote else {}

    if site is not None:
        site_cli.failback_site(config, site, scrape, as_json, promoted)
        return
    assert flow is not None
    with _flow_context(app, config_path, flow) as ctx:
        rep = report(ctx)
        if scrape:
            do_scrape(ctx, rep)
        reverse = reversed_flow(ctx)
    pairs = {(ctx.flow.source, ctx.flow.target)}
    if as_json:
        click.echo(json.dumps({**rep.to_json(), "reversed_flow": reverse, **promoted(pairs)}, indent=2))
        return
    click.echo(f"old primary {rep.old_primary} -> new primary {rep.new_primary} (flow {rep.flow})")
    for p in rep.partitions:
        if p.records:
            click.echo(
                f"  {p.topic}[{p.partition}]: {p.records} records never reached {rep.new_primary} "
                f"(offsets {p.old_end - p.records}..{p.old_end - 1})"
            )
    click.echo(f"records on {rep.old_primary} that never reached {rep.new_primary}: {rep.stranded}")
    if rep.scraped:
        click.echo(
            f"scraped {rep.old_primary}: deleted the records of {len(rep.partitions)} partitions and "
            f"groups {', '.join(rep.groups) or '(none)'}"
        )
    elif rep.groups:
        click.echo(f"groups on {rep.old_primary} that --scrape would delete: {', '.join(rep.groups)}")
    click.echo("\nAdd this flow to mirror back (and remove or stop the old one):\n")
    click.echo(reverse)
    promoted(pairs)
