"""Source gaps that open while a Spark query runs: records deleted past the query's position.

Spark's reader and the JVM writer's `SourceReader` skip a batch's records that retention (or
delete-records) removed before they were read (failOnDataLoss false), and only the executors
would know. The driver tells it from what it has: each partition's range start (the previous
batch's end in Spark's offset log, or where the query started), the first offset the tasks
copied, and the source's log start read after the tasks. Offsets of the range the tasks did not
copy and that lie below the log start were deleted before they were copied: a gap, reported as
at a query's start (`mirror.spark.starts`) and as `mirror run` reports it: one WARNING in
`SourceGap.describe`'s words, the counter, an `offset_gaps` row. Offsets not copied that the log
still holds are transaction markers or aborted records (read_committed), not a gap.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from mirror.domain.gaps import GapPolicy, GapReason, SourceGap
from mirror.engine.gaps import RESUME_HINT
from mirror.errors import MirrorError, SourceGapError
from mirror.spark.commits import Partition
from mirror.spark.task import TaskResult

log = logging.getLogger(__name__)

# The JVM writer's words for a range's deleted records (`SourceReader.DELETED`): the driver
# reports those itself, in `SourceGap.describe`'s words, so the task's text is not logged twice.
JVM_DELETED = " were deleted before they were read"


def unread(
    begins: Mapping[Partition, int], ends: Mapping[Partition, int], results: Iterable[TaskResult]
) -> dict[Partition, tuple[int, int]]:
    """Per partition, the offsets [start, first copied) of the batch's range the tasks did not
    copy (a partition with no result: its whole range). Partitions whose start is unknown
    are left out."""
    firsts: dict[Partition, int] = {}
    for r in results:
        tp = (r.topic, r.partition)
        if r.first_offset >= 0:
            firsts[tp] = min(r.first_offset, firsts.get(tp, r.first_offset))
    out = {}
    for tp, end in ends.items():
        start = begins.get(tp)
        if start is None or start < 0 or start >= end:
            continue
        first = min(firsts.get(tp, end), end)
        if first > start:
            out[tp] = (start, first)
    return out


def deleted(uncopied: Mapping[Partition, tuple[int, int]], lows: Mapping[Partition, int]) -> list[SourceGap]:
    """The gaps among the `uncopied` ranges: the part of each below the source's log start."""
    gaps = []
    for (topic, partition), (start, first) in sorted(uncopied.items()):
        low = lows.get((topic, partition))
        if low is not None and start < low:
            gaps.append(SourceGap(topic, partition, start, min(first, low) - 1, GapReason.RETENTION))
    return gaps


def without_deleted(warning: str | None) -> str | None:
    """A JVM task's warning without the parts naming deleted records (reported as gaps)."""
    if not warning:
        return warning
    kept = [part for part in warning.split("; ") if not part.endswith(JVM_DELETED)]
    return "; ".join(kept) or None


class BatchGaps:
    """The driver's report of the gaps each batch skipped: before the batch's rows are stored
    and its group committed, so the `offset_gaps` rows are durable before the group moves past.

    With `on_source_gap: stop` (Spark's failOnDataLoss true, so the tasks fail first) a gap
    found here all the same stops the query before its commit."""

    def __init__(self, flow: str, source: Any, recorder: Any, metrics: Any = None) -> None:
        self.flow, self.source, self.recorder, self.metrics = flow, source, recorder, metrics
        self.policy = GapPolicy.SKIP

    def report(
        self, batch_id: int, begins: Mapping[Partition, int], ends: Mapping[Partition, int], results: list[TaskResult]
    ) -> list[SourceGap]:
        uncopied = unread(begins, ends, results)
        if not uncopied:
            return []
        try:
            marks = self.source.watermarks(list(uncopied), committed_only=False)
        except MirrorError as exc:
            log.warning(
                "flow %s: batch %d: %d partition(s) have offsets no task copied, and the source's log starts "
                "are unreadable (%s): some of those records may never have been mirrored; the first: %s[%d] from %d",
                self.flow,
                batch_id,
                len(uncopied),
                exc,
                *min(uncopied),
                uncopied[min(uncopied)][0],
            )
            return []
        gaps = deleted(uncopied, {tp: m.low for tp, m in marks.items()})
        report_gaps(self.flow, gaps, self.policy, (self.recorder, self.metrics))
        return gaps


def report_gaps(flow: str, gaps: Iterable[SourceGap], policy: GapPolicy, listeners: Iterable[Any]) -> None:
    """Each gap once, in `mirror run`'s words, told to the listeners (the offset map, the
    counter) that hear gaps; with `on_source_gap: stop`, the run stops at the first."""
    for gap in gaps:
        if policy is GapPolicy.STOP:
            raise SourceGapError(f"flow {flow}: {gap.describe()}; on_source_gap: stop", hint=RESUME_HINT)
        log.warning("flow %s: %s; mirroring on from offset %d", flow, gap.describe(), gap.last + 1)
        for listener in listeners:
            on_gap = getattr(listener, "on_gap", None)
            if on_gap is not None:
                on_gap(flow, gap)
