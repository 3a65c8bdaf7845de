"""DeliveryReports: the target's answers turned into the books and the flow's failure."""

from __future__ import annotations

import threading

import pytest

from mirror.domain.route import route
from mirror.errors import FatalProduceError
from mirror.kafka import KafkaError
from tests.unit.engine.fakes import (
    P0,
    P1,
    FakeConsumer,
    FakeProducer,
    Report,
    Step,
    Target,
    batch,
    make,
    opened,
    run,
    segment,
)


def test_a_refused_record_fails_the_flow_naming_it_and_nothing_past_it_is_committed():
    class Refusing(FakeProducer):
        """Refuses P0's segment from offset 4 on (too large): both its reports fail."""

        def poll(self, timeout: float = 0) -> int:
            refused = [(tp, o, cb) for tp, o, cb in self.queue if tp == P0 and o >= 4]
            self.queue = [r for r in self.queue if r not in refused]
            served = super().poll(timeout)
            for _, _, cb in refused:
                if cb is not None:
                    cb(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), Report(-1))
            return served + len(refused)

    worker, consumer, target = make(
        [batch(P0, range(4)), batch(P0, range(4, 7)) + batch(P1, range(3)), [], []], producer_cls=Refusing
    )
    with pytest.raises(FatalProduceError, match=r"orders\[0\]@4") as failed:
        worker.run()
    assert failed.value.size == 3  # b"k" + b"v4": the largest record of the refused segment
    assert not consumer.unsafe and consumer.closed and worker.state.value == "failed"
    assert consumer.last_commit(P0) == 4 and target.stored[P1] == [0, 1, 2]


def test_unknown_partition_at_delivery_on_a_topic_that_exists_rewinds_instead_of_stalling():
    """The first producer's reports for P0's records 3-4 say "unknown partition" though the
    target topic exists (its metadata lagged a partition increase); later records of P0
    landed. The refresh finds nothing gone; P0 must not stay refused for good (committed at
    3, a silent stall): every partition is re-read from what the target acknowledged, by new
    producers: duplicates, never a gap."""
    target = Target()
    target.answer = lambda tp, o: "unknown" if tp == P0 and o in (3, 4) and len(target.producers) == 1 else "store"
    # P1's records between P0's close P0's segments: 3-4 is a segment of its own, with reports.
    first = batch(P0, range(3)) + batch(P1, range(2)) + batch(P0, [3, 4]) + batch(P1, [2, 3]) + batch(P0, range(5, 10))
    script: list[Step] = [first, [], [], lambda c: batch(P0, range(c.position_of[P0], 10)), [], [], []]
    worker, consumer, _ = run(script, target=target)
    assert set(target.stored[P0]) == set(range(10)), target.stored[P0]
    assert consumer.last_commit(P0) == 10


def test_a_segment_whose_first_report_has_no_offset_never_translates_past_its_records():
    """a DUPLICATE_SEQUENCE_NUMBER "success" (offset -1) on a segment's
    first report, an exact offset on its last (the segment spanned two batches, the first
    one retried). Source 5 is a transaction marker: 3, 4, 6, 7 landed at 53-56. A group that
    read up to 5 must resume at or before 55 (record 6's copy)."""
    from mirror.domain.offsetmap import OffsetSync, translate

    w = opened(FakeConsumer([], [], threading.Event(), Target()), producer=lambda: FakeProducer(Target(), 100))
    st = w.ledger.assign(P0, w.assignment.new_partition(route(w.flow, *P0)))
    first = segment(st, [0, 1, 2])
    w.reports.on_segment_start(st, first, None, Report(50))
    w.reports.on_segment_end(st, first, None, Report(52))
    seg = segment(st, [3, 4, 6, 7])
    w.reports.on_segment_start(st, seg, None, Report(-1))
    w.reports.on_segment_end(st, seg, None, Report(56))
    rows = [OffsetSync("orders", 0, s, t) for s, t in st.batch.syncs]
    copies = {0: 50, 1: 51, 2: 52, 3: 53, 4: 54, 6: 55, 7: 56}
    for pos in range(0, 9):
        first_unread = min((t for s, t in copies.items() if s >= pos), default=57)
        got = translate(rows, pos, 57).target_offset
        assert got <= first_unread, (
            f"position {pos} translates to {got}, past the copy of a record the group has not read "
            f"({first_unread}); rows {st.batch.syncs}"
        )
