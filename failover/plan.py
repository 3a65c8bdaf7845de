"""Failover plans: where a consumer group should start on the target, per partition (pure).

The inputs are facts already gathered (`failover.gather` does the I/O): the group's source
positions (live, or from its newest checkpoints when the source is gone), the offset map,
the target's watermarks and timestamp lookups. The output is the plan docs/design.md fixes for
`mirror failover plan --json`, plus the facts a reviewer needs to trust it: which source of
truth was used, how old the checkpoints are, and for `--at` how many records share the
boundary millisecond (they may be processed twice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from mirror.domain.gaps import SourceGap, gap_inside
from mirror.domain.offsetmap import OffsetSync, translate


class Method(str, Enum):
    TRANSLATE = "translate"
    TIMESTAMP = "timestamp"
    EARLIEST = "earliest"
    LATEST = "latest"


class Truth(str, Enum):
    """Where the plan's offsets come from (printed, so an on-call engineer knows what to trust)."""

    SOURCE = "source-offsets"  # the group's committed offsets, read live from the source
    CHECKPOINTS = "checkpoints"  # the source did not answer: the newest stored checkpoints
    TIMESTAMPS = "target-timestamps"
    WATERMARKS = "target-watermarks"


@dataclass(frozen=True)
class PartitionFacts:
    """Everything known about one partition of the group, gathered before planning."""

    source_topic: str
    target_topic: str
    partition: int
    target_low: int
    target_high: int
    source_offset: int | None = None  # the group's position on the source (live or checkpointed)
    syncs: Sequence[OffsetSync] = ()  # the floor row for source_offset (or the first rows)
    mirrored_end: int | None = None  # next source offset not on the target
    source_end: int | None = None  # live, or last seen by the checkpointer
    # The source partition's log start and end, read after the target's watermarks (live
    # only): what translating a partition with no offset-map row may rely on.
    source_log: tuple[int, int] | None = None
    tip: OffsetSync | None = None  # newest acknowledged record the stored rows are complete for
    checkpoint_offset: int | None = None  # the checkpoint's own translation (CHECKPOINTS only)
    time_offset: int | None = None  # --at: first target offset with timestamp >= T, -1 if none
    boundary_records: int = 0  # --at: records sharing the boundary millisecond
    gaps: Sequence[SourceGap] = ()  # recorded source gaps of the partition (records never mirrored)


@dataclass(frozen=True)
class PartitionPlan:
    source_topic: str
    target_topic: str
    partition: int
    source_offset: int | None
    target_offset: int
    unmirrored: int
    boundary_records: int | None = None
    exact: bool = True
    # Records past the start the group may have read already (see `make_plan`).
    may_reread: int = 0
    # Records from the group's position on that the source lost before they were copied
    # (a recorded source gap): never mirrored, part of `unmirrored`, never re-read.
    skipped: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "source_topic": self.source_topic,
            "target_topic": self.target_topic,
            "partition": self.partition,
            "source_offset": self.source_offset,
            "target_offset": self.target_offset,
            "unmirrored": self.unmirrored,
            "may_reread": self.may_reread,
        }
        if self.skipped:
            out["skipped"] = self.skipped
        if self.boundary_records is not None:
            out["boundary_records"] = self.boundary_records
        if not self.exact:
            out["exact"] = False
        return out


@dataclass(frozen=True)
class Plan:
    flow: str
    group: str
    method: Method
    truth: Truth
    partitions: list[PartitionPlan]
    at_ms: int | None = None
    checkpoint_time_ms: int | None = None  # oldest checkpoint used (CHECKPOINTS only)
    notes: list[str] = field(default_factory=list)

    @property
    def unmirrored(self) -> int:
        return sum(p.unmirrored for p in self.partitions)

    @property
    def skipped(self) -> int:
        return sum(p.skipped for p in self.partitions)

    @property
    def boundary_records(self) -> int:
        return sum(p.boundary_records or 0 for p in self.partitions)

    @property
    def may_reread(self) -> int:
        return sum(p.may_reread for p in self.partitions)

    def offsets(self) -> dict[tuple[str, int], int]:
        """What `apply` commits on the target: (target topic, partition) -> offset."""
        return {(p.target_topic, p.partition): p.target_offset for p in self.partitions}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "flow": self.flow,
            "group": self.group,
            "method": self.method.value,
            "source_of_truth": self.truth.value,
            "partitions": [p.to_json() for p in self.partitions],
            "unmirrored": self.unmirrored,
            "may_reread": self.may_reread,
        }
        if self.skipped:
            out["skipped"] = self.skipped
        if self.at_ms is not None:
            out["at_ms"] = self.at_ms
            out["boundary_records"] = self.boundary_records
        if self.checkpoint_time_ms is not None:
            out["checkpoint_time_ms"] = self.checkpoint_time_ms
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def _unmirrored(f: PartitionFacts) -> int:
    if f.mirrored_end is None:
        return 0
    end = f.source_end if f.source_end is not None else f.source_offset
    return max(0, (end or 0) - f.mirrored_end)


def plan_partition(method: Method, f: PartitionFacts) -> PartitionPlan:
    unmirrored = _unmirrored(f)
    boundary = None
    exact = True
    skipped = 0
    if method is Method.TRANSLATE:
        if f.source_offset is None:
            raise ValueError(f"{f.source_topic}[{f.partition}]: translation needs the group's source offset")
        tr = translate(
            f.syncs,
            f.source_offset,
            f.target_high,
            f.mirrored_end,
            f.source_end,
            tip=f.tip,
            target_start=f.target_low,
            source_log=f.source_log,
            gap=gap_inside(f.gaps, f.source_offset),
        )
        target, unmirrored, exact = max(tr.target_offset, f.target_low), tr.unmirrored, tr.exact
        skipped = tr.skipped
        if not f.syncs and f.checkpoint_offset is not None:
            # Nothing mirrored from this partition, source gone: the checkpointer translated
            # it against a consistent view then (the target's end, if the group had read
            # everything); later copies on the target are of records it had not read.
            target, exact = min(max(f.checkpoint_offset, f.target_low), f.target_high), True
    elif method is Method.TIMESTAMP:
        # No record at or after T on the target: start at its end (nothing to re-read).
        target = f.target_high if f.time_offset is None or f.time_offset < 0 else f.time_offset
        target = min(max(target, f.target_low), f.target_high)
        boundary = f.boundary_records
    elif method is Method.EARLIEST:
        target = f.target_low
    else:
        target = f.target_high
    return PartitionPlan(
        f.source_topic,
        f.target_topic,
        f.partition,
        f.source_offset,
        target,
        unmirrored,
        boundary,
        exact,
        skipped=skipped,
    )


def make_plan(
    flow: str,
    group: str,
    method: Method,
    truth: Truth,
    facts: Sequence[PartitionFacts],
    *,
    at_ms: int | None = None,
    checkpoint_time_ms: int | None = None,
) -> Plan:
    parts = []
    for f in sorted(facts, key=lambda f: (f.source_topic, f.partition)):
        p = plan_partition(method, f)
        if not (method is Method.TRANSLATE and truth is Truth.SOURCE and p.exact):
            # Not an exact translation of where the group stands now: everything on the
            # target past the start may have been read already. From checkpoints that is,
            # at most, what the group consumed after its newest checkpoint.
            p = replace(p, may_reread=max(0, f.target_high - p.target_offset))
        parts.append(p)
    notes = []
    if truth is Truth.CHECKPOINTS:
        notes.append(
            "the source did not answer: positions are the group's newest checkpoints; it may re-read "
            "what it consumed after them"
        )
    inexact = [f"{p.source_topic}[{p.partition}]" for p in parts if not p.exact]
    if inexact:
        notes.append(
            f"no offset-map row at or below the group's position for {', '.join(inexact)}: starting at "
            "the first mirrored record "
            "(or the target's first offset when nothing was mirrored); records there may be read twice"
        )
    return Plan(flow, group, method, truth, parts, at_ms, checkpoint_time_ms, notes)


def mirrored_end_from_target(target_high: int, newest: OffsetSync | None) -> int | None:
    """Next source offset not on the target, from the target end and the newest delta.

    Exact when nothing but the mirror writes the target topic and the newest delta change
    is stored; a change not yet stored (the recorder writes before each commit) only makes
    it smaller, i.e. `unmirrored` errs on the side of reporting more at risk.
    """
    if newest is None:
        return None
    return max(0, target_high - newest.delta)
