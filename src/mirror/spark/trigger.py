"""How many records a micro-batch of a query that runs until caught up may take.

A flow's `spark.max_records_per_batch` bounds a micro-batch (the Kafka source's
`maxOffsetsPerTrigger`). Spark's source shares that limit among the partitions in proportion
to what each has left, rounding each share down, so a backlog of exactly two bounds is not two
batches but three, the last a few records per partition: a whole trigger (offsets, planning, a
job of one task per partition, the group commit) for almost nothing.

With `Trigger.AvailableNow` (`--until-caught-up`) the backlog is known when the query starts,
so the limit can split it evenly instead: n = ceil(backlog / bound) batches, each the backlog's
n-th share plus one record per partition for the rounding. A batch may then exceed the bound
by at most one record per partition of the query, never more. A continuous run keeps the bound
as it is (what arrives later is not known). Pure: no Spark, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def available_now_limit(bound: int, backlog: int, partitions: int) -> int:
    """`maxOffsetsPerTrigger` for a query that will read `backlog` records over `partitions`
    partitions and stop, each batch at most `bound` records but for the rounding slack.

    Every batch but the last takes at least the limit less one record per partition (each
    partition's share loses less than one record to the rounding, a floating-point share one
    at most), which is the backlog's n-th share or more, so n batches take it all; the last is
    the rest, never a few records. Within one bound the bound is kept (records that arrive
    before Spark reads the ends still fit the one batch), with the slack above it only when
    the backlog is the bound or just under it, where Spark's rounding could leave a record per
    partition for a second batch."""
    slack = max(1, partitions)
    if backlog <= bound:
        return max(bound, backlog + slack)
    batches = -(-backlog // bound)
    return -(-backlog // batches) + slack


def backlog(starts: Mapping[str, Mapping[str, int]], marks: Mapping[tuple[str, int], Any]) -> int:
    """Records a query has to read: from each partition's start in `starts` (Spark's
    `startingOffsets`; a negative one is its log start) to its end in `marks` (`.low`,
    `.high`). A partition without marks counts nothing, one starting past its end too."""
    total = 0
    for topic, offsets in starts.items():
        for partition, start in offsets.items():
            mark = marks.get((topic, int(partition)))
            if mark is not None:
                total += max(0, mark.high - (start if start >= 0 else mark.low))
    return total
