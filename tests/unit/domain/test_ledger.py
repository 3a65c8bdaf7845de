"""The segment and offset ledger (mirror.domain.ledger), driven through its public API.

Only a segment's first and last record carry a delivery report; the offsets of the records
between them are derived. The target's answers are fed in by hand, no cluster, no engine.
"""

from __future__ import annotations

from mirror import config
from mirror.domain.ledger import Ledger, PartitionLedger, Segment
from mirror.domain.offsetmap import OffsetSync, translate
from mirror.domain.route import route

TEXT = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: [".*"]}}
"""
FLOW = config.parse(TEXT, env={}).flows[0]


def ledger(*partitions: int) -> tuple[Ledger[PartitionLedger], list[PartitionLedger]]:
    led: Ledger[PartitionLedger] = Ledger("p")
    return led, [led.assign(("orders", p), PartitionLedger(route(FLOW, "orders", p))) for p in partitions or (0,)]


def produced(st: PartitionLedger, offsets: list[int], size: int = 10) -> Segment:
    """A run of records produced together (what an engine records per record and per segment)."""
    seg = Segment(offsets[0])
    for o in offsets:
        seg.add(o, size, 1000 + o)
    st.begin(seg)
    return seg


def acked(st: PartitionLedger, seg: Segment, t_first: int | None, t_last: int) -> None:
    """The target's answers for a whole segment: its first record's offset, then its last."""
    st.placed(seg, t_first)
    if st.settled(seg):
        st.acked(seg, t_last)


def test_contiguous_segment_gives_every_delta_change_exactly():
    led, [st] = ledger()
    seg = produced(st, [10, 11, 12, 15, 16])  # 13-14: a transaction marker and an aborted record
    acked(st, seg, 100, 104)
    [b] = led.take_batches()
    assert b.syncs == [(10, 100), (15, 103)]
    assert (b.flow, b.first_offset, b.next_offset, b.count, b.bytes, b.max_timestamp_ms) == ("p", 10, 17, 5, 50, 1016)
    assert st.acked_next == 17 and not st.inflight and led.take_batches() == []


def test_interleaved_segment_never_translates_past_a_record():
    """Another writer put 2 records between ours: the gap's row is a lower bound and the last
    record's row is exact, so translation errs towards re-reading, never skipping."""
    led, [st] = ledger()
    acked(st, produced(st, [10, 11, 12, 15, 16]), 100, 106)
    [b] = led.take_batches()
    assert b.syncs == [(10, 100), (15, 103), (16, 106)]
    rows = [OffsetSync("orders", 0, s, t) for s, t in b.syncs]
    # wherever the foreign records went, source 15 landed at 103..105 and 16 at 106
    assert translate(rows, 15, 200).target_offset <= 103
    assert translate(rows, 16, 200).target_offset == 106
    assert translate(rows, 17, 200).target_offset == 107


def test_one_record_segment_and_consecutive_segments_keep_one_delta():
    led, [st] = ledger()
    a, b = produced(st, [0]), produced(st, [1, 2, 3])
    acked(st, a, None, 0)  # a one-record segment asks for one report only
    acked(st, b, 1, 3)
    [batch] = led.take_batches()
    assert batch.syncs == [(0, 0)]  # the delta never changed after the first record
    assert st.acked_next == 4 and batch.count == 4


def test_a_segment_without_its_first_placement_is_placed_by_its_last_record_only():
    led, [st] = ledger()
    acked(st, produced(st, [0, 1, 2]), None, 52)
    assert st.unplaced(Segment(0, count=3)) and not st.unplaced(Segment(0, count=1))
    [b] = led.take_batches()
    assert b.syncs == [(2, 52)] and st.acked_next == 3


def test_duplicate_sequence_report_without_offset_writes_only_a_lower_bound():
    """librdkafka reports DUPLICATE_SEQUENCE_NUMBER as success with offset -1."""
    led, [st] = ledger()
    acked(st, produced(st, [0, 1, 2]), 50, 52)
    acked(st, produced(st, [3, 4, 6, 7]), None, -1)  # 5: a transaction marker
    acked(st, produced(st, [8]), None, 60)
    # No row with offset -1; the segment without offsets is placed right after the last
    # acknowledged record (53), the earliest it can be: re-reading, never skipping.
    [b] = led.take_batches()
    assert b.syncs == [(0, 50), (6, 55), (8, 60)]
    assert (st.acked_next, b.count) == (9, 8)


def test_nothing_past_a_refused_segment_counts_even_if_its_last_record_is_acknowledged():
    led, [st] = ledger()
    acked(st, produced(st, [0, 1]), 0, 1)
    seg, later = produced(st, [5, 6, 7]), produced(st, [8])
    st.refused(seg)  # its first record's report failed (the last one fails too: gapless)
    acked(st, seg, None, 9)
    acked(st, later, None, 10)
    assert st.failed_at == 5 and st.acked_next == 2 and not st.quiet
    assert led.positions(led.parts, {("orders", 0): 9}) == {("orders", 0): 2}


def test_a_dropped_segment_is_ignored_and_nothing_else_is_attributed_to_it():
    led, [st] = ledger()
    seg = produced(st, [0, 1])
    st.drop_open()
    acked(st, seg, 0, 1)
    assert st.acked_next is None and not st.inflight and st.open is None and st.tainted
    assert led.take_batches() == [] and led.positions(led.parts, {("orders", 0): 2}) == {}


def test_reports_of_a_forgotten_partition_do_not_count():
    led, [st] = ledger()
    seg = produced(st, [0, 1])
    led.forget({("orders", 0)})
    acked(st, seg, 0, 1)
    assert st.acked_next is None and led.parts == {} and led.take_batches() == []


def test_quiet_partition_commits_the_consumer_position_past_transaction_markers():
    led, [st] = ledger()
    acked(st, produced(st, [1996, 1997]), 0, 1)  # 1998-1999: a commit marker, no record to acknowledge
    assert Ledger.quiet(led.parts) == [("orders", 0)]
    assert led.positions(led.parts, {("orders", 0): 2000}) == {("orders", 0): 2000}
    assert led.positions(led.parts) == {("orders", 0): 1998}


def test_a_partition_with_records_in_flight_commits_only_what_was_acknowledged():
    led, [st] = ledger()
    acked(st, produced(st, [0, 1]), 0, 1)
    produced(st, [2, 3])
    assert Ledger.quiet(led.parts) == [] and st.inflight_records() == 2 == led.inflight_records()
    # whatever the consumer's position, it is not taken for a partition in flight
    assert led.positions(led.parts, {("orders", 0): 4}) == {("orders", 0): 2}


def test_an_abandoned_open_segment_is_never_committed_by_position():
    led, [st] = ledger()
    acked(st, produced(st, [99]), 0, 0)
    produced(st, [100, 101])  # its rest never produced (a stop while the queue was full)
    st.drop_open()
    assert not st.inflight and st.tainted and Ledger.quiet(led.parts) == []
    assert led.positions(led.parts, {("orders", 0): 102}) == {("orders", 0): 100}


def test_a_purged_segment_is_never_committed_by_position():
    led, [st] = ledger()
    acked(st, produced(st, [99]), 0, 0)
    seg = produced(st, [100, 101])
    assert st.settled(seg)
    st.purged(seg)
    assert not st.inflight and st.failed_at is None
    assert led.positions(led.parts, {("orders", 0): 102}) == {("orders", 0): 100}


def test_a_flushed_open_segment_is_acknowledged_from_its_first_placement():
    led, [st] = ledger()
    seg = produced(st, [0, 1, 2])
    st.placed(seg, 40)
    assert st.flushed(seg)
    [b] = led.take_batches()
    assert (b.syncs, st.acked_next, st.open) == ([(0, 40)], 3, None)
    unplaced = produced(st, [3, 4])  # flushed, but its first record's report never came
    assert not st.flushed(unplaced) and st.tainted and st.acked_next == 3


def test_commits_move_forward_only():
    led, [st] = ledger()
    acked(st, produced(st, [0, 1]), 0, 1)
    pos = led.positions(led.parts)
    Ledger.committed(led.parts, pos)
    assert pos == {("orders", 0): 2} and led.positions(led.parts) == {}
    st.rewound()
    assert st.quiet and led.positions(led.parts, {("orders", 0): 2}) == {}


def test_a_batch_engine_acknowledges_after_its_flush():
    """A batch engine (the Spark one) produces a whole batch, flushes, then records the
    target's answers segment by segment: the same rules, the same commit positions."""
    led, [p0, p1] = ledger(0, 1)
    # produce order; the answers seen after the flush: p0's runs landed at 10..12 and 13..14,
    # p1's was refused
    batch = [
        (p0, produced(p0, [0, 1, 2]), (10, 12)),
        (p0, produced(p0, [4, 5]), (13, 14)),
        (p1, produced(p1, [7, 8]), None),
    ]
    # nothing answered yet: nothing is safe to commit, whatever was read
    assert led.positions(led.parts, {("orders", 0): 6, ("orders", 1): 9}) == {}
    for st, seg, answer in batch:
        if answer is None:
            assert st.settled(seg)
            st.refused(seg)
        else:
            acked(st, seg, *answer)
    by_partition = {b.partition: b for b in led.take_batches()}
    assert by_partition[0].syncs == [(0, 10), (4, 13)] and by_partition[0].count == 5 and 1 not in by_partition
    assert led.positions(led.parts, {("orders", 0): 6, ("orders", 1): 9}) == {("orders", 0): 6}


def test_records_dropped_in_flight_taint_the_partition_and_their_reports_do_not_count():
    """A resync or a freeze purges everything in flight: those records are re-read, never
    committed past by position, and a late report of theirs is ignored."""
    led, [p0, p1] = ledger(0, 1)
    acked(p0, produced(p0, [0]), 0, 0)
    seg = produced(p0, [1, 2])
    for st in led:
        st.drop_inflight()
    acked(p0, seg, 1, 2)
    assert p0.tainted and not p1.tainted  # p1 had nothing in flight: nothing of it dropped
    assert led.positions(led.parts, {("orders", 0): 3, ("orders", 1): 5}) == {("orders", 0): 1, ("orders", 1): 5}


def test_records_the_target_held_already_count_as_acknowledged_and_the_next_segment_follows():
    # A restart skipped source 0..4 (copies at target 3..7, one marker between 2 and 3) and
    # copies 5.. now: the offset map and the commit move as if all were copied now.
    led, [st] = ledger()
    assert st.skipped([(0, 3), (1, 4), (2, 5), (4, 6), (5, 7)], 5, 50, 1005)
    assert st.position() == 6 and st.t_next == 8
    seg = produced(st, [6, 7])
    acked(st, seg, 8, 9)
    (b,) = led.take_batches()
    assert (b.first_offset, b.next_offset, b.count, b.bytes) == (0, 8, 7, 70)
    assert b.syncs == [(0, 3), (4, 6)]  # 6, 7 copied now at 8, 9: the same delta as 4 -> 6


def test_records_held_already_are_not_recorded_behind_records_in_flight():
    _, [st] = ledger()
    produced(st, [0])
    assert not st.skipped([(1, 1)], 1, 10, 1001)
    assert st.acked_next is None
