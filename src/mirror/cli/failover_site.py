"""The site forms of `mirror failover plan|apply|import` and `mirror failback`: bodies and rendering.

`mirror.cli.failover` owns the click commands (one command serves the single-group and the
site form); what the site form does and prints lives here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from failover import promote as promotion
from failover.failback import report, reversed_flow, scrape
from failover.gather import FlowContext
from failover.offsets_file import read_json
from failover.plan import Method
from failover.site import LANES, PlanDoc, SitePlan, read_plan
from failover.siteapply import apply_site, default_backup, read_backup, restore_backup
from failover.sitegather import SiteRequest, build_site_plan, site_flows
from mirror.cli import AppContext
from mirror.cli.times import format_ms
from mirror.config import Config
from mirror.errors import UnsafeOperation, UsageError
from mirror.kafka import Admin
from mirror.store import open_store


def _now_ms() -> int:
    return int(time.time() * 1000)


def _admins(config: Config) -> Any:
    cache: dict[str, Admin] = {}

    def admin(name: str) -> Admin:
        if name not in cache:
            cache[name] = Admin(name, config.cluster(name), lanes=LANES)
        return cache[name]

    return admin


def plan_site(
    config: Config,
    config_path: Path,
    site: str,
    to: str | None,
    patterns: Sequence[str],
    method: Method,
    at_ms: int | None,
    as_json: bool,
    out: Path | None,
    details: bool,
    *,
    promote: bool = False,
) -> None:
    store = open_store(config.offset_store)
    try:
        plan = build_site_plan(
            config, store, SiteRequest(site, to, patterns, method, at_ms, _now_ms(), str(config_path.resolve()))
        )
    finally:
        store.close()
    text = plan.to_text()
    if out is not None:
        write_plan(out, text)
    if as_json:
        click.echo(text)
        return
    doc = json.loads(text)
    render_site(plan, doc, details)
    if promote:  # what `apply --plan --promote` would add now (it looks again when applied)
        pairs = {(s, t) for _, s, t in plan.flows}
        for p in promotion.plan_promotions(config, pairs, _admins(config)):
            click.echo(f"--promote would add on {p.cluster}: {p.acl.describe()}")
    if out is not None:
        written(doc["id"], out)


def write_plan(out: Path, text: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n", encoding="utf-8")


def written(plan_id: str, out: Path) -> None:
    click.echo(f"plan {plan_id} written to {out}; apply it with: mirror failover apply --plan {out} --yes")


def _age(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 1000:.0f}s" if ms < 120_000 else f"{ms / 60_000:.0f}m"


def render_site(plan: SitePlan, doc: dict[str, Any], details: bool) -> None:
    """One line per group (partitions with -v), then totals per flow and for the site."""
    click.echo(
        f"site {plan.site} ({', '.join(plan.clusters)})"
        + (f" -> {plan.to}" if plan.to else "")
        + f": method {plan.method.value}"
        + (f" at {format_ms(plan.at_ms)}" if plan.at_ms is not None else "")
        + f", planned {format_ms(plan.created_ms)}"
    )
    click.echo(
        f"{'group':<28} {'target':<10} {'parts':>5} {'miss':>8} {'re-read':>8} {'ckpt age':>8}  {'from':<18} status"
    )
    for g in doc["groups"]:
        status = f"REFUSED: {g['refused']}" if g["refused"] else "ok"
        click.echo(
            f"{g['group']:<28} {g['target']:<10} {g['partitions']:>5} {g['unmirrored']:>8} {g['may_reread']:>8} "
            f"{_age(g['checkpoint_age_ms']):>8}  {g['truth']:<18} {status}"
        )
        if details:
            for f in g["flows"]:
                for p in f["partitions"]:
                    click.echo(
                        f"    {f['flow']}: {p['target_topic']}[{p['partition']}] source "
                        f"{p['source_offset']} -> target {p['target_offset']}"
                        f" (miss {p['unmirrored']}, re-read <= {p['may_reread']})"
                    )
        for e in g["errors"]:
            click.echo(f"    error: {e}")
    for f in doc["flows"]:
        click.echo(
            f"flow {f['flow']} ({f['source']} -> {f['target']}): {f['groups']} groups, {f['partitions']} partitions, "
            f"miss {f['unmirrored']}, re-read <= {f['may_reread']}"
            + (f", {f['refused']} refused" if f["refused"] else "")
        )
    t = doc["totals"]
    click.echo(
        f"site: {t['groups']} groups, {t['partitions']} partitions, miss {t['unmirrored']} (never mirrored), "
        f"re-read <= {t['may_reread']}, {t['refused']} refused"
    )
    for note in plan.notes:
        click.echo(f"note: {note}")


def apply_plan_file(
    app: AppContext,
    config_path: Path | None,
    plan_path: Path,
    backup: Path | None,
    as_json: bool,
    *,
    promote: bool = False,
) -> None:
    plan = read_plan(read_json(plan_path, "--plan"), str(plan_path))
    config = app.config(config_path or plan.config)
    backup = backup or default_backup(plan_path)
    result = apply_site(plan, _admins(config), backup, lambda line: None if as_json else click.echo(line), _now_ms())
    promoted = _promote(config, plan, backup, as_json) if promote else []
    if as_json:
        click.echo(
            json.dumps(
                {
                    "plan": plan.id,
                    "backup": str(result.backup),
                    "resumed": result.resumed,
                    "moved": result.moved,
                    "already_moved": result.already,
                    "promoted_acls": [p.to_json() for p in promoted],
                }
            )
        )
        return
    click.echo(
        f"moved {len(result.moved)} group(s)"
        + (f", {len(result.already)} already moved by an earlier run" if result.already else "")
        + f"; backup of every group's previous offsets: {result.backup}"
    )
    click.echo(f"undo: mirror failover import --backup {result.backup} --yes")


def _promote(config: Config, plan: PlanDoc, backup: Path, as_json: bool) -> list[promotion.Promotion]:
    """`--promote`: the producers' WRITE ACLs of the moved topics, added on the targets and recorded in the backup."""
    admins = _admins(config)
    todo = promotion.plan_promotions(config, promotion.plan_pairs(plan), admins)
    if not as_json:
        for p in todo:
            click.echo(f"promote on {p.cluster}: {p.acl.describe()}")
    promotion.promote(backup, todo, admins)
    return todo


def import_backup(app: AppContext, config_path: Path | None, path: Path) -> None:
    plan_id, groups = read_backup(path)
    doc_config = None
    if config_path is None:
        doc = read_json(path, "--backup")
        doc_config = doc.get("config") if isinstance(doc, dict) else None
    if config_path is None and not doc_config:
        raise UsageError("-c/--config is required: the backup does not name its config file")
    config = app.config(config_path or doc_config or "")
    # Checked before any group is restored: a damaged entry must not leave the undo half done.
    promoted = promotion.recorded(read_json(path, "--backup"), f"--backup {path}")
    unknown = sorted({p.cluster for p in promoted} - set(config.clusters))
    if unknown:
        raise UsageError(
            f"--backup {path}: {promotion.PROMOTED} names cluster(s) {', '.join(unknown)} "
            f"the config does not define (clusters: {', '.join(config.clusters)})"
        )
    restore_backup(groups, _admins(config), click.echo)
    promotion.demote(promoted, _admins(config))
    for p in promoted:
        click.echo(f"removed from {p.cluster}: {p.acl.describe()} (added by --promote)")
    click.echo(f"restored {len(groups)} group(s) from {path}" + (f" (backup of plan {plan_id})" if plan_id else ""))


def default_failback_backup(name: str, now_ms: int) -> Path:
    return Path(f"failback-backup-{name}-{now_ms}.json")


def failback_promote(
    config: Config, config_path: Path, pairs: set[tuple[str, str]], backup: Path, yes: bool, as_json: bool
) -> dict[str, Any]:
    """`failback --promote`: the DR cluster's WRITE ACLs of the copies, back onto the original
    sources under the source names; only listed without --yes, else recorded in `backup`, then
    created. Returns what `--json` adds."""
    admins = _admins(config)
    todo = promotion.plan_promotions(config, pairs, admins, promotion.Direction.FAILBACK)
    if not as_json:
        verb = "promote on" if yes else "--promote would add on"
        for p in todo:
            click.echo(f"{verb} {p.cluster}: {p.acl.describe()}")
    if not yes:
        if not as_json:
            click.echo(f"{len(todo)} ACL(s) to add; nothing was changed: add --yes to create them")
        return {"would_promote_acls": [p.to_json() for p in todo]}
    if not todo:  # no backup to undo nothing
        if not as_json:
            click.echo("--promote: the old primary holds every grant already; nothing was added")
        return {"promoted_acls": []}
    promotion.start_backup(backup, str(config_path.resolve()), _now_ms())
    promotion.promote(backup, todo, admins)
    if not as_json:
        click.echo(
            f"added {len(todo)} ACL(s), recorded in {backup}; undo: mirror failover import --backup {backup} --yes"
        )
    return {"promoted_acls": [p.to_json() for p in todo], "promote_backup": str(backup)}


def failback_site(
    config: Config,
    site: str,
    do_scrape: bool,
    as_json: bool,
    promoted: Callable[[set[tuple[str, str]]], dict[str, Any]],
) -> None:
    """Every flow from SITE: what never reached the new primary, the scrape, the reversed flows
    (and `--promote`'s ACLs: `promoted`, given the site's (source, target) pairs)."""
    flows = site_flows(config, site, None)
    store = open_store(config.offset_store)
    admins: dict[str, Admin] = {}
    try:
        ctxs = [FlowContext(config, f, lambda: store, _admins=admins, lanes=LANES) for f in flows]
        reports = [report(ctx) for ctx in ctxs]
        if do_scrape:
            busy = [
                f"{r.flow}: {', '.join(r.groups)}"
                for ctx, r in zip(ctxs, reports)
                if any(ctx.source.group_members(g) for g in r.groups)
            ]
            if busy:
                raise UnsafeOperation(
                    f"groups still active on the old primary ({'; '.join(busy)}); nothing was deleted",
                    hint="stop them (and the mirror) first",
                )
            for ctx, r in zip(ctxs, reports):
                scrape(ctx, r)
        reverse = [reversed_flow(ctx) for ctx in ctxs]
    finally:
        store.close()
    pairs = {(f.source, f.target) for f in flows}
    if as_json:
        acls = promoted(pairs)
        click.echo(
            json.dumps(
                {
                    "site": site,
                    "flows": [r.to_json() for r in reports],
                    "never_mirrored": sum(r.stranded for r in reports),
                    "reversed_flows": reverse,
                    **acls,
                },
                indent=2,
            )
        )
        return
    for r in reports:
        click.echo(
            f"flow {r.flow}: {r.stranded} records on {r.old_primary} never reached {r.new_primary}"
            + (f"; scraped (groups {', '.join(r.groups) or 'none'})" if r.scraped else "")
        )
    click.echo(f"site {site}: {sum(r.stranded for r in reports)} records never mirrored")
    click.echo("\nAdd these flows to mirror back (and remove or stop the old ones):\n")
    for text in reverse:
        click.echo(text)
    promoted(pairs)
