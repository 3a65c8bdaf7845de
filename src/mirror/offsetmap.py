"""Offset translation: the pure math, and the storage contract behind it.

The mirror writes a row `(source_offset -> target_offset)` for a partition only when
`target - source` differs from the previous record's (see `mirror.acks.AckBatch.syncs`).
Between rows the delta is constant, so translating a source position `C` (the next offset
a group would read) is: take the newest row with `source_offset <= C`, add its delta, clamp
to the target's end offset and to the next row's target offset. That is exact across source
gaps (compaction, transaction markers, aborted batches) because every gap changes the delta
and so starts a new row; the second clamp covers a `C` that points into a gap.

DESIGN.md, "Offset translation: invariants", is the contract this module implements.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


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


def translate(
    syncs: Sequence[OffsetSync],
    position: int,
    target_end: int,
    mirrored_end: int | None = None,
    source_end: int | None = None,
) -> Translation:
    """Translate source position `position` with rows `syncs` (sorted by source_offset).

    `mirrored_end` is the next source offset not yet on the target (the mirror's committed
    position, or the target end minus the newest delta). Records from there on never
    reached the target: up to `source_end` when it is known (all of them are at risk, the
    group has either not read them or read them on a source that is gone), otherwise up to
    `position` (invariant 3: a group ahead of the mirror).
    """
    end = position if source_end is None else max(position, source_end)
    unmirrored = 0 if mirrored_end is None else max(0, end - mirrored_end)
    if not syncs:
        # Nothing of this partition was ever mirrored: start the target at its beginning
        # (callers clamp to the target's low watermark).
        return Translation(0, unmirrored, False)
    keys = [s.source_offset for s in syncs]
    i = bisect.bisect_right(keys, position) - 1
    if i < 0:
        # The group is before the first mirrored record (e.g. the mirror started with the
        # data already partly expired): the target's first mirrored record is the best start.
        return Translation(min(syncs[0].target_offset, target_end), unmirrored, False)
    row = syncs[i]
    if mirrored_end is not None and position > mirrored_end:
        position = mirrored_end
    target = min(position + row.delta, target_end)
    if i + 1 < len(syncs):
        # `position` inside a source gap (compacted or aborted records, transaction markers):
        # the old delta would run past the next record's copy and skip it; the next row
        # says exactly where that record landed.
        target = min(target, syncs[i + 1].target_offset)
    return Translation(max(0, target), unmirrored, True)


class OffsetStore(Protocol):
    """Where offset-map rows and group checkpoints live (SQLite or Cassandra).

    Writes return only once durable: the engine commits source offsets right after
    `write_syncs` returns (invariant 1). Every failure is raised as `OffsetStoreError`.
    """

    def write_syncs(self, flow: str, rows: Sequence[OffsetSync]) -> None: ...

    def syncs(self, flow: str, topic: str, partition: int) -> list[OffsetSync]:
        """All rows of one source partition, sorted by source_offset."""
        ...

    def write_checkpoints(self, flow: str, rows: Sequence[Checkpoint]) -> None: ...

    def checkpoints(self, flow: str, group: str) -> list[Checkpoint]:
        """The newest checkpoint per partition of a group."""
        ...

    def close(self) -> None: ...
