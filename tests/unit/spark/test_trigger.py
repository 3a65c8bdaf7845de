"""The Kafka source's per-trigger limit for a query that runs until caught up
(`mirror.spark.trigger`), checked against a model of how Spark's Kafka source shares
`maxOffsetsPerTrigger` among partitions (KafkaMicroBatchStream.rateLimit: each partition
its share of the limit in proportion to what it has left, rounded down, at least one)."""

from __future__ import annotations

import math
import random

from mirror.kafka.admin import Watermarks
from mirror.spark.trigger import available_now_limit, backlog


def _spark_batches(limit: int, sizes: list[int]) -> list[int]:
    """The batch sizes Spark's source makes of `sizes` (records left per partition) with
    `limit`, as its rateLimit does: floating-point shares, floored, at least 1, capped at
    each partition's end."""
    left = list(sizes)
    batches: list[int] = []
    while sum(left) > 0:
        total = float(sum(left))
        took = 0
        for i, size in enumerate(left):
            if size <= 0:
                continue
            prorate = limit * (size / total)
            share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
            share = min(size, share)
            left[i] -= share
            took += share
        batches.append(took)
        assert len(batches) < 10_000, "the model must end"
    return batches


def _sizes(records: int, partitions: int) -> list[int]:
    """`records` spread over `partitions` as the bench's load spreads them: nearly even."""
    return [records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)]


def test_the_default_bound_with_the_bench_backlog_is_two_even_batches_not_a_tiny_tail():
    sizes = _sizes(1_000_000, 12)
    assert _spark_batches(500_000, sizes) == [499_996, 499_992, 12]  # what the plain bound gives
    limit = available_now_limit(500_000, 1_000_000, 12)
    batches = _spark_batches(limit, sizes)
    assert len(batches) == 2 and min(batches) >= 499_000
    assert limit <= 500_000 + 12  # the rounding slack: one record per partition


def test_a_backlog_within_the_bound_keeps_the_bound():
    assert available_now_limit(500_000, 300_000, 12) == 500_000
    assert available_now_limit(500_000, 0, 12) == 500_000
    # Exactly the bound: Spark's share of a partition may round one below its size; the
    # slack keeps it one batch instead of a batch of a record per partition after it.
    assert _spark_batches(available_now_limit(500_000, 500_000, 12), _sizes(500_000, 12)) == [500_000]


def test_random_backlogs_split_into_the_fewest_batches_the_bound_allows_none_of_them_tiny():
    """Where a batch holds many records per partition (the bound at least 100 per partition)
    and the backlog is up to 20 bounds: as few batches as the bound allows, none a tail."""
    rng = random.Random(21)
    for _ in range(400):
        partitions = rng.randint(1, 60)
        bound = rng.randint(100 * partitions, 200_000)
        # Uneven partitions, some empty, some small.
        top = 20 * bound // partitions
        sizes = [rng.choice([0, rng.randint(1, 50), rng.randint(1, top)]) for _ in range(partitions)]
        records = sum(sizes)
        limit = available_now_limit(bound, records, partitions)
        batches = _spark_batches(limit, sizes)
        n = max(1, math.ceil(records / bound))
        assert limit <= max(bound, math.ceil(records / n)) + partitions, (bound, sizes)
        assert len(batches) == n or records == 0, (bound, sizes, limit, batches)
        # Each at most the bound but for the slack, and at least the even share less the
        # others' rounding: no tail.
        assert all(b <= bound + 2 * partitions for b in batches), (bound, sizes, limit, batches)
        assert all(b >= records / n - (n - 1) * 2 * partitions for b in batches), (bound, sizes, limit, batches)


def test_the_backlog_counts_from_each_partitions_start_or_its_log_start():
    starts = {"x": {"0": 10, "1": -2}, "y": {"0": 5}}
    marks = {("x", 0): Watermarks(0, 100), ("x", 1): Watermarks(40, 90), ("y", 0): Watermarks(0, 3)}
    # x[0]: 90 left; x[1] from its log start 40: 50; y[0] past its end (a recreated topic: 0).
    assert backlog(starts, marks) == 140
    assert backlog({"x": {"0": 10}}, {}) == 0  # unknown marks count nothing
