"""Segment acknowledgements (engine.FlowWorker): only a run's first and last record carry a
delivery report; the offsets of the records between them are derived. Pure logic: the
reports are fed by hand, no cluster."""

from __future__ import annotations

import threading

from mirror import config
from mirror.domain.offsetmap import OffsetSync, translate
from mirror.domain.route import route
from mirror.engine.worker import FlowWorker, _Partition, _Segment
from mirror.kafka import KafkaError

TEXT = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: [".*"]}}
"""


class Report:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


def worker_and_partition() -> tuple[FlowWorker, _Partition]:
    cfg = config.parse(TEXT, env={})
    w = FlowWorker(cfg, cfg.flows[0], stop=threading.Event())
    st = _Partition(route(cfg.flows[0], "orders", 0))
    w._parts[("orders", 0)] = w._by_target[("nyc.orders", 0)] = st
    return w, st


def segment(st: _Partition, offsets: list[int]) -> _Segment:
    """What FlowWorker._forward records for a run of produced records."""
    seg = _Segment(offsets[0])
    for i, o in enumerate(offsets):
        if i and o != seg.last + 1:
            seg.gaps.append((seg.count, o))
        seg.last, seg.count, seg.bytes = o, seg.count + 1, seg.bytes + 10
        if seg.big_size < 10:
            seg.big_size, seg.big_offset = 10, o
    st.inflight.append(seg)
    return seg


def test_contiguous_segment_gives_every_delta_change_exactly():
    w, st = worker_and_partition()
    seg = segment(st, [10, 11, 12, 15, 16])  # 13-14: a transaction marker and an aborted record
    w._on_segment_start(st, seg, None, Report(100))
    w._on_segment_end(st, seg, None, Report(104))
    assert st.batch.syncs == [(10, 100), (15, 103)]
    assert (st.batch.count, st.batch.bytes, st.acked_next, st.inflight) == (5, 50, 17, type(st.inflight)())


def test_interleaved_segment_never_translates_past_a_record():
    """Another writer put 2 records between ours: the gap's row is a lower bound and the last
    record's row is exact, so translation errs towards re-reading, never skipping."""
    w, st = worker_and_partition()
    seg = segment(st, [10, 11, 12, 15, 16])
    w._on_segment_start(st, seg, None, Report(100))
    w._on_segment_end(st, seg, None, Report(106))
    assert st.batch.syncs == [(10, 100), (15, 103), (16, 106)]
    rows = [OffsetSync("orders", 0, s, t) for s, t in st.batch.syncs]
    # wherever the foreign records went, source 15 landed at 103..105 and 16 at 106
    assert translate(rows, 15, 200).target_offset <= 103
    assert translate(rows, 16, 200).target_offset == 106
    assert translate(rows, 17, 200).target_offset == 107


def test_one_record_segment_and_consecutive_segments_keep_one_delta():
    w, st = worker_and_partition()
    a, b = segment(st, [0]), segment(st, [1, 2, 3])
    w._on_segment_end(st, a, None, Report(0))
    w._on_segment_start(st, b, None, Report(1))
    w._on_segment_end(st, b, None, Report(3))
    assert st.batch.syncs == [(0, 0)]  # the delta never changed after the first record
    assert st.acked_next == 4 and st.batch.count == 4


def test_a_failed_first_record_fails_the_segment_even_if_the_last_is_acknowledged():
    w, st = worker_and_partition()
    seg = segment(st, [5, 6, 7])
    w._on_segment_start(st, seg, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), Report(-1))
    w._on_segment_end(st, seg, None, Report(9))
    assert st.failed_at == 5 and st.acked_next is None and st.batch is None
    assert w._failure is not None and "@5" in str(w._failure)


def test_a_dropped_segment_is_ignored_and_nothing_else_is_attributed_to_it():
    w, st = worker_and_partition()
    seg = segment(st, [0, 1])
    st.open = seg
    w._drop_open(st)
    w._on_segment_start(st, seg, None, Report(0))
    w._on_segment_end(st, seg, None, Report(1))
    assert st.acked_next is None and not st.inflight and st.open is None


class Msg:
    """The accessors FlowWorker._forward reads from a consumed message."""

    def __init__(self, offset: int, partition: int = 0, error: KafkaError | None = None) -> None:
        self._offset, self._partition, self._error = offset, partition, error

    def error(self):
        return self._error

    def topic(self) -> str:
        return "orders"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._offset)

    def headers(self):
        return None


class Produced:
    def __init__(self) -> None:
        self.calls: list[tuple[bytes, object]] = []

    def produce(self, topic, value, key, *, partition, timestamp, headers, on_delivery=None) -> None:
        self.calls.append((value, on_delivery))


def test_forward_asks_for_reports_only_at_segment_edges_and_closes_before_an_error_event():
    w, st = worker_and_partition()
    w._producer = st.producer = Produced()
    eof = KafkaError(KafkaError._PARTITION_EOF)
    w._forward([Msg(0), Msg(1), Msg(2), Msg(-1, error=eof), Msg(3), Msg(4)])
    asked = [(v, cb.func.__name__ if cb else None) for v, cb in w._producer.calls]
    assert asked == [
        (b"v0", "_on_segment_start"), (b"v1", None), (b"v2", "_on_segment_end"),
        (b"v3", "_on_segment_start"), (b"v4", "_on_segment_end"),
    ]
    assert st.open is None and [(s.first, s.last, s.count) for s in st.inflight] == [(0, 2, 3), (3, 4, 2)]


class Positions:
    """consumer.position(): what librdkafka would answer after handing over offsets < 2000."""

    def position(self, tps):
        from mirror.kafka import TopicPartition

        return [TopicPartition(tp.topic, tp.partition, 2000) for tp in tps]


def test_quiet_partition_commits_the_consumer_position_past_transaction_markers():
    w, st = worker_and_partition()
    w._consumer = Positions()
    st.acked_next = 1998  # 1998-1999: a commit marker, no record to acknowledge
    assert w._positions(w._parts) == {("orders", 0): 2000}


def test_dropped_pending_records_are_never_committed_by_position():
    """A stop (or revoke) drops records read but never produced: the consumer's position is
    past them, so only what the target acknowledged may be committed."""
    from collections import deque

    w, st = worker_and_partition()
    w._consumer = Positions()
    st.acked_next = 500
    w._pending = deque([Msg(500), Msg(501)])
    w._drop_pending()
    assert not w._pending and st.tainted
    assert w._positions(w._parts) == {("orders", 0): 500}


def test_an_abandoned_open_segment_is_never_committed_by_position():
    w, st = worker_and_partition()
    w._consumer = Positions()
    st.acked_next = 100
    st.open = segment(st, [100, 101])
    w._drop_open(st)
    assert w._positions(w._parts) == {("orders", 0): 100}


def test_a_purged_segment_is_never_committed_by_position():
    w, st = worker_and_partition()
    w._consumer = Positions()
    st.acked_next = 100
    seg = segment(st, [100, 101])
    w._on_segment_end(st, seg, KafkaError(KafkaError._PURGE_QUEUE), Report(-1))
    assert not st.inflight and w._failure is None
    assert w._positions(w._parts) == {("orders", 0): 100}
