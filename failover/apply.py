"""`failover apply`: commit a plan's offsets on the target, safely.

Order matters: refuse while the group is active (exit 3, nothing touched), write and
fsync the backup of the group's current target offsets, and only then change them. A
failed write after the backup leaves a file `mirror failover import` restores from.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from failover import offsets_file
from failover.gather import FlowContext
from failover.plan import Plan
from mirror.errors import MirrorError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Change:
    topic: str  # target topic
    partition: int
    before: int | None
    after: int


def default_backup_path(cluster: str, group: str, now_ms: int) -> Path:
    return Path(f"failover-backup-{cluster}-{group}-{now_ms}.json")


# An error raised after the backup was written carries this note (+ the path): the CLI adds
# the restore command only then, whatever the error's text says.
BACKUP_WRITTEN = "failover backup written: "


def _move_aside(path: Path, now_ms: int) -> None:
    """An existing backup (an earlier apply's, perhaps of one whose write timed out but landed,
    or a drill's re-run into its old folder) may be the only record of where the group was:
    kept beside as PATH.MS, never overwritten."""
    if path.exists():
        aside = path.with_name(f"{path.name}.{now_ms}")
        os.replace(path, aside)
        log.warning("an earlier backup was at %s: kept as %s", path, aside)


def apply_plan(
    ctx: FlowContext, plan: Plan, backup: Path | None = None, *, now_ms: int | None = None
) -> tuple[Path, list[Change]]:
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    cluster = ctx.flow.target
    offsets_file.require_idle(ctx.target, cluster, plan.group)
    current = offsets_file.export(ctx.target, cluster, plan.group, now_ms)
    path = backup or default_backup_path(cluster, plan.group, now_ms)
    _move_aside(path, now_ms)
    offsets_file.write(path, current)
    wanted = plan.offsets()
    if wanted:
        try:
            ctx.target.alter_group_offsets(plan.group, wanted)
        except MirrorError as exc:
            # Some partitions may have moved: the on-call engineer needs the way back in the same line.
            exc.message += f"; the group's previous offsets are in {path}"
            exc.add_note(BACKUP_WRITTEN + str(path))
            raise
    changes = [Change(t, p, current.offsets.get((t, p)), o) for (t, p), o in sorted(wanted.items())]
    return path, changes
