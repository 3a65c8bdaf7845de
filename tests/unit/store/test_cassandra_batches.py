"""The Cassandra store's offset-map writes in UNLOGGED batches: how they are cut (no server)."""

from __future__ import annotations

from mirror.store.cassandra import BATCH_STATEMENTS, batches


def test_writes_are_cut_in_order_into_batches_within_cassandras_warning_thresholds():
    tips = [("f", "t", p, 100, 101) for p in range(23)]
    got = batches(tips)
    assert [len(b) for b in got] == [10, 10, 3]
    assert [w for b in got for w in b] == tips  # each write once, in order
    assert BATCH_STATEMENTS <= 10  # unlogged_batch_across_partitions_warn_threshold's default


def test_nothing_to_write_is_no_batch():
    assert batches([]) == []
    assert batches([("f", "t", 0, 1, 1)]) == [[("f", "t", 0, 1, 1)]]
