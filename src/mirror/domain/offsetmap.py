"""Offset translation: the pure math, and the storage contract behind it.

The mirror writes a row `(source_offset -> target_offset)` for a partition only when
`target - source` differs from the previous record's (see `mirror.domain.acks.AckBatch.syncs`).
Between rows the delta is constant, so translating a source position `C` (the next offset
a group would read) is: take the newest row with `source_offset <= C`, add its delta, clamp
to the target's end offset and to the next row's target offset. That is exact across source
gaps (compaction, transaction markers, aborted batches) because every gap changes the delta
and so starts a new row; the second clamp covers a `C` that points into a gap. Rows are
stored once per commit interval, so the newest ones may be missing: the stored *tip* (the
newest acknowledged record they are complete for) bounds how far the last delta is trusted.

docs/design.md, "Offset translation: the invariants", is the contract this module implements.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from mirror.domain.gaps import SourceGap


@dataclass(frozen=True, slots=True)
class OffsetSync:
    """One row of the offset map: from `source_offset` on, target = source + delta."""

    topic: str  # source topic
    partition: int
    source_offset: int
    target_offset: int

    @property
    def delta(self) -> int:
        return self.target_offset - self.source_offset


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A consumer group's source position and its translation, at a point in time."""

    group: str
    topic: str  # source topic
    partition: int
    source_offset: int
    target_offset: int
    time_ms: int


@dataclass(frozen=True, slots=True)
class Translation:
    target_offset: int
    # Records the group has not read on the source that never reached the target
    # (C beyond the newest mirrored position): data at risk in a failover now.
    unmirrored: int
    exact: bool  # False when no row covered C (the group is behind everything mirrored)
    # Records from C on that the source lost before the mirror copied them (C inside a
    # recorded source gap): never mirrored, counted in `unmirrored` too, never re-read.
    skipped: int = 0


def translate(
    syncs: Sequence[OffsetSync],
    position: int,
    target_end: int,
    mirrored_end: int | None = None,
    source_end: int | None = None,
    *,
    tip: OffsetSync | None = None,
    target_start: int = 0,
    source_log: tuple[int, int] | None = None,
    gap: SourceGap | None = None,
) -> Translation:
    """Translate source position `position` with rows `syncs` (sorted by source_offset).

    `gap`: a recorded source gap (records the source lost before they were copied). A
    position inside it translates as the first record after it, the first one copied; the
    records from `position` to the gap's end are `skipped` (never mirrored), not re-read.

    `mirrored_end` is the next source offset not yet on the target (the mirror's committed
    position, or the target end minus the newest delta). Records from there on never
    reached the target: up to `source_end` when it is known (all of them are at risk, the
    group has either not read them or read them on a source that is gone), otherwise up to
    `position` (invariant 3: a group ahead of the mirror).

    `tip` is the newest acknowledged record the stored rows are complete for (the recorder
    stores it with the rows). Past it the rows may trail the target by a commit interval:
    the target holds records whose delta changes (one per transaction marker) are not
    stored yet, so the last known delta would translate too far and skip records. A
    position past the tip therefore resumes right after the tip's copy: the group re-reads
    at most what was mirrored since, never skips.

    `target_start` (the target partition's log start) and `source_log` (the source
    partition's log start and end, read *after* `target_end`) are for partitions with no row
    at all (see `_unmapped`).
    """
    if gap is not None and gap.covers(position):
        skipped = gap.last + 1 - position
        tr = translate(
            syncs,
            gap.last + 1,
            target_end,
            mirrored_end,
            source_end,
            tip=tip,
            target_start=target_start,
            source_log=source_log,
        )
        return Translation(tr.target_offset, tr.unmirrored + skipped, tr.exact, skipped)
    end = position if source_end is None else max(position, source_end)
    unmirrored = 0 if mirrored_end is None else max(0, end - mirrored_end)
    if not syncs:
        return _unmapped(position, target_start, target_end, source_log, unmirrored)
    keys = [s.source_offset for s in syncs]
    i = bisect.bisect_right(keys, position) - 1
    if i < 0:
        # The group is before the first mirrored record (the copy began later, by `start_from`,
        # or with the data already partly expired): the target's first mirrored record is the
        # best start, and the records the source still holds before it never reached the
        # target (miss).
        held_from = max(position, source_log[0]) if source_log is not None else position
        missed = max(0, syncs[0].source_offset - held_from)
        return Translation(min(syncs[0].target_offset, target_end), unmirrored + missed, False)
    row = syncs[i]
    if mirrored_end is not None and position > mirrored_end:
        position = mirrored_end
    target = min(position + row.delta, target_end)
    if i + 1 < len(syncs):
        # `position` inside a source gap (compacted or aborted records, transaction markers):
        # the old delta would run past the next record's copy and skip it; the next row
        # says exactly where that record landed.
        target = min(target, syncs[i + 1].target_offset)
    if tip is not None and position > tip.source_offset:
        target = min(target, tip.target_offset + 1)
    return Translation(max(0, target), unmirrored, True)


def _unmapped(
    position: int, target_start: int, target_end: int, source_log: tuple[int, int] | None, unmirrored: int
) -> Translation:
    """A partition with no offset-map row: nothing of it was ever mirrored (or stored).

    Exact when the group has read everything the source partition holds (its position is at
    or past the source end: every copy on the target is of a record it read, provided the
    source end was read after the target end, and the next record lands at the target end),
    or when the target partition is empty and the group has read nothing the source still
    holds (all of it will land from the target end on). Otherwise start at the target's
    first offset (re-read, never skip). MirrorMaker 2 writes 0, which is out of range on a
    target whose log start moved on.
    """
    if source_log is not None and position >= source_log[1]:
        return Translation(target_end, unmirrored, True)
    if target_start >= target_end:
        return Translation(target_end, unmirrored, source_log is not None and position <= source_log[0])
    return Translation(target_start, unmirrored, False)


class OffsetStore(Protocol):
    """Where offset-map rows and group checkpoints live (SQLite or Cassandra).

    Writes return only once durable: the engine commits source offsets right after
    `write_syncs` returns (invariant 1). Every failure is raised as `OffsetStoreError`.
    """

    def write_syncs(self, flow: str, rows: Sequence[OffsetSync], tips: Sequence[OffsetSync] = ()) -> None:
        """Store delta-change rows, and each partition's tip (its newest acknowledged record,
        replacing the previous tip): rows are complete up to the tip (see `translate`)."""
        ...

    def tip(self, flow: str, topic: str, partition: int) -> OffsetSync | None:
        """The partition's tip, None when none is stored."""
        ...

    def syncs(self, flow: str, topic: str, partition: int) -> list[OffsetSync]:
        """All rows of one source partition, sorted by source_offset."""
        ...

    def write_gaps(self, flow: str, gaps: Sequence[SourceGap]) -> None:
        """Store source gaps (records the source lost before they were copied), for failover
        to name them as never mirrored; writing one already stored changes nothing."""
        ...

    def write_checkpoints(self, flow: str, rows: Sequence[Checkpoint]) -> None: ...

    def checkpoints(self, flow: str, group: str) -> list[Checkpoint]:
        """The newest checkpoint per partition of a group."""
        ...

    def close(self) -> None: ...
