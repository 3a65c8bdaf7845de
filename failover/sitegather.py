"""The I/O half of a site failover plan: every flow from a site, every group they checkpoint.

A site is a cluster or a datacenter label (`Config.site`). Each flow reading from it is
planned once for all its groups (`failover.gather.build_plans` shares the flow's reads);
a cluster that does not answer is asked once, then planned from checkpoints. What apply
must re-check (the groups' commits on the target, their live source offsets, their
members on both sides) is read here, after the plans, and written into the plan.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from failover.gather import FlowContext, build_plans
from failover.offsets_file import coordinated
from failover.plan import Method, Plan, Truth
from failover.site import LANES, Key, SiteGroup, SitePlan, active
from mirror.config import Config, FlowConfig
from mirror.errors import ClusterUnavailable, NotFound, UnsafeOperation, UsageError
from mirror.kafka import Admin
from mirror.store import FullOffsetStore, checkpointed_groups


@dataclass(frozen=True)
class SiteRequest:
    site: str
    to: str | None
    patterns: Sequence[str]  # --group: full-match regexes narrowing the flows' groups
    method: Method
    at_ms: int | None
    now_ms: int
    config_path: str


def site_flows(config: Config, site: str, to: str | None) -> list[FlowConfig]:
    clusters = config.site(site, "--from")
    targets = config.site(to, "--to") if to else None
    flows = [f for f in config.flows if f.source in clusters and (targets is None or f.target in targets)]
    if not flows:
        where = f" to {to!r}" if to else ""
        raise UsageError(
            f"--from: no flow reads from {site!r} ({', '.join(clusters)}){where}",
            hint="check the flows' source and target clusters in the config",
        )
    return flows


def build_site_plan(config: Config, store: FullOffsetStore, req: SiteRequest) -> SitePlan:
    flows = site_flows(config, req.site, req.to)
    admins: dict[str, Admin] = {}
    dead: set[str] = set()
    ctxs = [FlowContext(config, f, lambda: store, _admins=admins, dead=dead, lanes=LANES) for f in flows]
    found = discover(ctxs, req.patterns)
    groups: dict[str, SiteGroup] = {}
    for ctx in ctxs:
        for g, result in build_plans(ctx, found[ctx.flow.name], req.method, at_ms=req.at_ms).items():
            sg = groups.setdefault(g, SiteGroup(g, ctx.flow.target, []))
            if isinstance(result, Plan):
                sg.plans.append(result)
                sg.sources = sorted({*sg.sources, ctx.flow.source})
            elif not isinstance(result, NotFound):  # NotFound: it reads none of this flow's topics
                sg.errors.append(f"{ctx.flow.name}: {result}")
    # A group its flows' patterns name but with no offsets and no checkpoints for any of
    # their topics reads nothing this site mirrors: not part of the plan (and no reason to
    # refuse it). One that reads them but cannot be planned is refused, with the reason.
    idle = sorted(g for g, sg in groups.items() if not sg.plans and not sg.errors)
    site_groups = [_settle(groups[g], {c.flow.name: c.flow for c in ctxs}) for g in sorted(groups) if g not in idle]
    if not site_groups:
        raise nothing_to_move(req, ctxs, found, dead)
    read_states(ctxs[0], site_groups, dead, {f.name: f.source for f in flows})
    refusal = every_group_refused(req.site, site_groups)
    if refusal is not None:
        raise refusal
    notes = [
        f"cluster {c!r} did not answer: its groups are planned from their newest checkpoints" for c in sorted(dead)
    ]
    if idle:
        notes.append(
            f"{len(idle)} group(s) the flows' patterns match read none of their topics (left out): "
            f"{', '.join(idle[:10])}" + (" ..." if len(idle) > 10 else "")
        )
    unmatched = [p for p in req.patterns if not any(re.fullmatch(p, g) for g in groups)]
    if unmatched:
        notes.append(f"--group matched no checkpointed group: {', '.join(unmatched)}")
    return SitePlan(
        req.site,
        config.site(req.site),
        req.to,
        req.method,
        req.now_ms,
        req.config_path,
        [(f.name, f.source, f.target) for f in flows],
        site_groups,
        req.at_ms,
        notes,
    )


def group_site_plan(ctx: FlowContext, plan: Plan, config_path: str, now_ms: int) -> SitePlan:
    """A one-group plan as the plan file `apply --plan` takes: a site of one flow and one
    group, with what apply re-checks (the group's commits, members, live source offsets)
    read as for a site, so one format and one apply serve both."""
    f = ctx.flow
    sg = _settle(SiteGroup(plan.group, f.target, [f.source], [plan]), {f.name: f})
    read_states(ctx, [sg], ctx.dead, {f.name: f.source})
    return SitePlan(
        f.source,
        [f.source],
        f.target,
        plan.method,
        now_ms,
        config_path,
        [(f.name, f.source, f.target)],
        [sg],
        plan.at_ms,
        list(plan.notes),
    )


def nothing_to_move(
    req: SiteRequest, ctxs: Sequence[FlowContext], found: dict[str, list[str]], dead: set[str]
) -> UnsafeOperation:
    """The refusal of a plan that would move no group: why, one line per flow (a plan of
    nothing, applied, says "moved 0 groups" and exit 0 in the middle of an incident)."""
    lines = []
    for ctx in ctxs:
        f = ctx.flow
        wanted = " and --group ".join(", ".join(p) for p in (f.groups, req.patterns) if p)
        if not f.groups:
            why = f"it names no groups to fail over (flows[{ctx.config.flows.index(f)}].groups is empty)"
        elif found[f.name]:
            why = (
                f"{len(found[f.name])} group(s) match {wanted} but none read its topics: "
                + ", ".join(found[f.name][:5])
                + (" ..." if len(found[f.name]) > 5 else "")
            )
        elif f.source in dead:
            why = f"cluster {f.source!r} did not answer, and no stored checkpoint is of a group matching {wanted}"
        else:
            why = f"no group on {f.source!r} and no stored checkpoint matches {wanted}"
        lines.append(f"\n  flow {f.name} ({f.source} -> {f.target}): {why}")
    return UnsafeOperation(f"the plan would move no group from {req.site!r}; nothing was written:" + "".join(lines))


def every_group_refused(site: str, groups: Sequence[SiteGroup]) -> UnsafeOperation | None:
    """The refusal of a plan every group of which is refused (apply would move nothing), one
    line per group; None when at least one group can move."""
    if not groups or any(g.refused is None for g in groups):
        return None
    lines = "".join(f"\n  {g.group}: {g.refused}" for g in groups)
    return UnsafeOperation(
        f"the plan would move no group from {site!r}: every group is refused; nothing was written:" + lines
    )


def discover(ctxs: Sequence[FlowContext], patterns: Sequence[str]) -> dict[str, list[str]]:
    """Flow -> its groups: those its source lists and those it holds checkpoints of, that
    match its `groups` patterns and every --group pattern given."""
    listed: dict[str, list[str]] = {}
    for ctx in ctxs:
        source = ctx.flow.source
        if source in listed or source in ctx.dead:
            continue
        try:
            ctx.source.topics()  # metadata first: see `failover.gather.read_source`
            listed[source] = ctx.source.list_groups()
        except ClusterUnavailable:
            ctx.dead.add(source)
    out = {}
    for ctx in ctxs:
        f = ctx.flow
        names = {*listed.get(f.source, []), *checkpointed_groups(ctx.store, f.name)} - {f.group_id}
        out[f.name] = sorted(g for g in names if _matches(f.groups, g) and (not patterns or _matches(patterns, g)))
    return out


def _matches(patterns: Sequence[str], group: str) -> bool:
    return any(re.fullmatch(p, group) for p in patterns)


def _settle(sg: SiteGroup, flows: dict[str, FlowConfig]) -> SiteGroup:
    """The group's offsets, checkpoint time and target from its plans; refused when it has
    none, or when its flows lead to more than one target cluster."""
    if not sg.plans:
        sg.refused = "cannot be planned: " + "; ".join(sg.errors)
        return sg
    targets = sorted({flows[p.flow].target for p in sg.plans})
    sg.target = targets[0]
    if len(targets) > 1:
        sg.refused = f"checkpointed toward {len(targets)} targets ({', '.join(targets)}): choose one with --to"
    for p in sg.plans:
        sg.offsets.update(p.offsets())
    times = [p.checkpoint_time_ms for p in sg.plans if p.checkpoint_time_ms is not None]
    sg.checkpoint_time_ms = min(times) if times else None
    return sg


def read_states(ctx: FlowContext, groups: Sequence[SiteGroup], dead: set[str], sources: dict[str, str]) -> None:
    """Members on both sides, the groups' commits on the target, their live source offsets."""
    planned = [g for g in groups if g.plans]
    for cluster in sorted({g.target for g in planned}):
        mine = [g for g in planned if g.target == cluster]
        admin = ctx.admin(cluster)
        states = coordinated(admin, lambda a=admin, m=mine: a.prepare_groups([g.group for g in m]))  # type: ignore[misc]
        pending = {
            g.group: admin.request_group_offsets(g.group, sorted(g.offsets), strict=True, described=True) for g in mine
        }
        for g in mine:
            g.target_state = states.get(g.group)
            g.target_before = pending[g.group].result()
    for cluster in sorted({s for g in planned for s in g.sources} - dead):
        try:
            states = ctx.admin(cluster).group_states()
        except ClusterUnavailable:
            continue
        for g in planned:
            if cluster in g.sources and (g.source_state is None or active(states.get(g.group))):
                g.source_state = states.get(g.group)
    for g in planned:
        if all(p.truth is Truth.SOURCE for p in g.plans):
            g.source_seen = _source_positions(g.plans, sources)
        if g.refused is None and (active(g.target_state) or active(g.source_state)):
            where = [
                f"{state} on {side}"
                for state, side in ((g.source_state, "the source"), (g.target_state, "the target"))
                if active(state)
            ]
            g.refused = f"still active ({', '.join(where)}): stop its consumers, then plan again"


def _source_positions(plans: Sequence[Plan], sources: dict[str, str]) -> dict[str, dict[Key, int]]:
    """Source cluster -> the group's live offsets there (two source clusters may share topic names)."""
    out: dict[str, dict[Key, int]] = {}
    for plan in plans:
        seen = out.setdefault(sources[plan.flow], {})
        seen.update(
            {(p.source_topic, p.partition): p.source_offset for p in plan.partitions if p.source_offset is not None}
        )
    return out
