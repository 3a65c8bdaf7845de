"""`failover apply --plan`: a reviewed site plan, committed as written, resumably.

Order: read every group's offsets where it moves to and decide (`failover.site.classify`);
refuse the whole plan (exit 3, nothing written) if a group moved since it was planned or
came back on either side; write ONE backup of every group's offsets on its target and
fsync it; then move the groups one by one, reporting each. A second run after a failure
keeps the first run's backup (it holds the offsets from before anything moved), skips
the partitions already at the plan's offsets and finishes the rest.

`restore_backup` (`failover import --backup`) puts a whole site back from that file, the
same way: all groups checked idle first, then restored one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from failover.offsets_file import GroupOffsets, coordinated, read_json, write_json
from failover.site import KIND, ApplyGroup, PlanDoc, State, active, classify, source_moved
from mirror.errors import ClusterUnavailable, MirrorError, UnsafeOperation, UsageError
from mirror.kafka import Admin

BACKUP_KIND = "site-backup"
_WINDOW = 50  # offset commits in flight at once (one group each)
Progress = Callable[[str], None]


@dataclass
class ApplyResult:
    backup: Path
    resumed: bool  # the backup was there from an earlier run of this plan
    moved: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)  # moved by an earlier run: not touched


def default_backup(plan_path: Path) -> Path:
    return plan_path.with_name(plan_path.stem + ".backup.json")


def read_backup(path: Path) -> tuple[str | None, list[GroupOffsets]]:
    """(plan id, groups) of a site backup; a single-group offsets file is a site of one."""
    doc = read_json(path, "--backup")
    if isinstance(doc, dict) and doc.get("kind") == KIND:
        raise UsageError(
            f"--backup: {path} is a failover plan, not a backup",
            hint=f"apply it with `mirror failover apply --plan {path} --yes`; its backup is {default_backup(path)}",
        )
    if isinstance(doc, dict) and doc.get("kind") == BACKUP_KIND:
        if not isinstance(doc.get("groups"), list):
            raise UsageError(f"--backup: {str(path)!r} has no groups list")
        return doc.get("plan_id"), [GroupOffsets.from_json(g, str(path), "--backup") for g in doc["groups"]]
    return None, [GroupOffsets.from_json(doc, str(path), "--backup")]


def apply_site(
    plan: PlanDoc, admin: Callable[[str], Admin], backup: Path, progress: Progress, now_ms: int
) -> ApplyResult:
    if not plan.groups:  # `plan` refuses to write one; an old or hand-made one would "move 0 groups"
        raise UnsafeOperation(
            f"plan {plan.id} moves no group; nothing was applied",
            hint="plan again (`mirror failover plan --from NAME ... --out PLAN`): it says why no group can be moved",
        )
    refused = [g for g in plan.groups if g.refused]
    if refused:
        who = "; ".join(f"{g.group}: {g.refused}" for g in refused)
        raise UnsafeOperation(
            f"the plan refuses {len(refused)} group(s), so nothing was applied ({who})",
            hint="stop them and plan again, or leave them out with --group",
        )
    current = _target_offsets(plan.groups, admin)
    states = {g.group: classify(g, current[g.group]) for g in plan.groups}
    todo = [g for g in plan.groups if states[g.group][0] in (State.TODO, State.PARTIAL)]
    problems = [
        f"{g.group}: committed on {g.target} since the plan ({_keys(states[g.group][1])})"
        for g in plan.groups
        if states[g.group][0] is State.CHANGED
    ]
    problems += _active_or_moved(todo, admin)
    if problems:
        raise UnsafeOperation(
            f"{len(problems)} group(s) changed since the plan; nothing was changed: {'; '.join(problems)}",
            hint="plan again (`mirror failover plan --from ...`) and review the new plan",
        )
    resumed = _backup_once(plan, backup, current, now_ms)
    result = ApplyResult(backup, resumed, already=[g.group for g in plan.groups if states[g.group][0] is State.DONE])
    if resumed:
        progress(
            f"resuming: {len(result.already)} group(s) already moved by an earlier run are left as they "
            f"are; backup {backup} kept from that run"
        )
    left = {g.group: {k: o for k, o in g.offsets.items() if current[g.group].get(k) != o} for g in todo}

    def moved(i: int, g: ApplyGroup) -> None:
        result.moved.append(g.group)
        partial = " (finishing what an earlier run started)" if states[g.group][0] is State.PARTIAL else ""
        progress(f"[{i}/{len(todo)}] {g.group} -> {g.target}: {len(left[g.group])} partitions set{partial}")

    try:
        _windowed(todo, lambda g: admin(g.target).request_alter_group_offsets(g.group, left[g.group]), moved)
    except MirrorError as exc:
        exc.message += (
            f" (moved at least {len(result.moved)} of {len(todo)} groups; run the same command again to "
            "finish the rest)"
        )
        raise
    return result


def _keys(keys: Sequence[tuple[str, int]], at_most: int = 3) -> str:
    shown = ", ".join(f"{t}[{p}]" for t, p in keys[:at_most])
    return shown + (f" and {len(keys) - at_most} more" if len(keys) > at_most else "")


def _target_offsets(
    groups: Sequence[ApplyGroup], admin: Callable[[str], Admin]
) -> dict[str, dict[tuple[str, int], int]]:
    """Every committed offset of each group on its target (the backup needs them all), in flight together."""
    for cluster in sorted({g.target for g in groups}):  # every coordinator found first (Admin.prepare_groups)
        a = admin(cluster)
        coordinated(a, lambda a=a, c=cluster: a.prepare_groups([g.group for g in groups if g.target == c]))  # type: ignore[misc]
    pending, planned = {}, {}
    for g in groups:
        a = admin(g.target)
        pending[g.group] = a.request_group_offsets(g.group, described=True)
        # The plan's partitions by name as well: a topic we may not Describe is left out of
        # "all the group's offsets" without a word, and must not pass for an uncommitted one.
        planned[g.group] = a.request_group_offsets(g.group, sorted(g.offsets), strict=True, described=True)
    for p in planned.values():
        p.result()
    return {g: p.result() for g, p in pending.items()}


def _active_or_moved(todo: Sequence[ApplyGroup], admin: Callable[[str], Admin]) -> list[str]:
    """Groups to move that have members on either side now, or committed on the source since."""
    problems = []
    for cluster in sorted({g.target for g in todo}):
        states = admin(cluster).group_states()
        problems += [
            f"{g.group}: active on {cluster} ({states[g.group]})"
            for g in todo
            if g.target == cluster and active(states.get(g.group))
        ]
    for cluster in sorted({c for g in todo for c in (g.source_seen or {})}):
        mine = [g for g in todo if cluster in (g.source_seen or {})]
        a = admin(cluster)
        try:
            states = a.prepare_groups([g.group for g in mine])
            pending = {
                g.group: a.request_group_offsets(
                    g.group, sorted((g.source_seen or {})[cluster]), strict=True, described=True
                )
                for g in mine
            }
            now = {g: p.result() for g, p in pending.items()}
        except ClusterUnavailable:
            continue  # gone since the plan: nothing more can happen there
        problems += [f"{g.group}: active on {cluster} ({states[g.group]})" for g in mine if active(states.get(g.group))]
        for g in mine:
            moved = source_moved((g.source_seen or {})[cluster], now[g.group])
            if moved:
                problems.append(f"{g.group}: committed on {cluster} since the plan ({_keys(moved)})")
    return problems


def _backup_once(plan: PlanDoc, path: Path, current: dict[str, dict[tuple[str, int], int]], now_ms: int) -> bool:
    """Write the site's backup unless an earlier run of this plan did; True when it did."""
    if path.exists():
        plan_id, _ = read_backup(path)
        if plan_id == plan.id:
            return True
        raise UsageError(f"--backup: {str(path)!r} exists and belongs to another plan", hint="pass a new --backup path")
    write_json(
        path,
        {
            "version": 1,
            "kind": BACKUP_KIND,
            "plan_id": plan.id,
            "site": plan.site,
            "config": plan.config,
            "time_ms": now_ms,
            "groups": [GroupOffsets(g.target, g.group, now_ms, current[g.group]).to_json() for g in plan.groups],
        },
        indent=None,
    )
    return False


def restore_backup(groups: Sequence[GroupOffsets], admin: Callable[[str], Admin], progress: Progress) -> None:
    """Every group back to its backed-up offsets, exactly (`offsets_file.restore`, for a
    site at once); refused (exit 3, nothing written) while any is active. Running it again
    after a failure restores the rest: it only ever writes what the file says."""
    busy = []
    for cluster in sorted({g.cluster for g in groups}):
        a = admin(cluster)
        states = coordinated(a, lambda a=a, c=cluster: a.prepare_groups([g.group for g in groups if g.cluster == c]))  # type: ignore[misc]
        busy += [
            f"{g.group} ({states[g.group]} on {cluster})"
            for g in groups
            if g.cluster == cluster and active(states.get(g.group))
        ]
    if busy:
        raise UnsafeOperation(
            f"group(s) still active: {', '.join(busy)}; nothing was restored",
            hint="stop their consumers, then run this again",
        )
    pending = {(g.cluster, g.group): admin(g.cluster).request_group_offsets(g.group, described=True) for g in groups}
    current = {k: p.result() for k, p in pending.items()}
    # Partitions the backup does not list must end up with no commit: only deleting the
    # group does that (allowed while it is empty, checked above), one request per cluster.
    for cluster in sorted({g.cluster for g in groups}):
        admin(cluster).delete_groups(
            [g.group for g in groups if g.cluster == cluster and set(current[(cluster, g.group)]) - set(g.offsets)]
        )
    done: list[str] = []

    def restored(i: int, g: GroupOffsets) -> None:
        done.append(g.group)
        progress(f"[{i}/{len(groups)}] {g.group} on {g.cluster}: {len(g.offsets)} offsets restored")

    try:
        _windowed(
            list(groups),
            lambda g: admin(g.cluster).request_alter_group_offsets(g.group, g.offsets) if g.offsets else (lambda: None),
            restored,
        )
    except MirrorError as exc:
        exc.message += (
            f" (restored at least {len(done)} of {len(groups)} groups; run the same command again to finish: "
            "restoring is idempotent)"
        )
        raise


T = TypeVar("T")


def _windowed(items: Sequence[T], send: Callable[[T], Callable[[], None]], done: Callable[[int, T], None]) -> None:
    """`send` every item, a window at a time in flight; `done(i, item)` in order as each answers."""
    for start in range(0, len(items), _WINDOW):
        sent = [(x, send(x)) for x in items[start : start + _WINDOW]]
        for i, (x, wait) in enumerate(sent, start + 1):
            wait()
            done(i, x)
