"""Forwarder: consumed records produced a run at a time, reports asked only at segment edges,
and a record produce() refuses stopping its partition without committing past it."""

from __future__ import annotations

from typing import Any

import pytest

from mirror.errors import FatalProduceError
from mirror.kafka import KafkaError
from tests.unit.engine.fakes import P0, P1, FakeProducer, Msg, Target, batch, make, run


def test_everything_acknowledged_is_committed_and_reports_are_asked_only_at_segment_edges():
    eof = Msg(P0, -1, KafkaError(KafkaError._PARTITION_EOF))
    worker, consumer, target = run([batch(P0, range(3)) + [eof] + batch(P0, [3, 4]) + batch(P1, range(2))])
    # an error event closes the segment before it; a partition change closes one too
    assert target.producers[0].asked == [(0, True), (1, False), (2, True), (3, True), (4, True), (0, True), (1, True)]
    assert target.stored == {P0: [0, 1, 2, 3, 4], P1: [0, 1]}
    assert (consumer.last_commit(P0), consumer.last_commit(P1), worker.records_acked) == (5, 2, 7)


def test_a_refused_record_does_not_acknowledge_the_run_before_it_while_the_flush_left_it_queued():
    """P0's record 5 is refused by produce() itself; the open segment 0-4 before it
    has no closing report, so `_close_open_segment` flushes and acknowledges it from its first
    record's placement. 0-1 landed but 2-4 are still queued when the flush gives up (a slow
    target): acknowledging the segment then would commit 5 past records the target lacks."""
    from mirror.kafka import KafkaException

    class Refusing(FakeProducer):
        def produce(
            self,
            topic: str,
            value: bytes | None = None,
            key: bytes | None = None,
            partition: int = -1,
            callback: Any = None,
            on_delivery: Any = None,
            timestamp: int = 0,
            headers: Any = None,
        ) -> None:
            if dict(headers)["mirror.origin"].endswith(b"/5"):
                raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
            super().produce(topic, value, key, partition, callback, on_delivery, timestamp, headers)

    target = Target()
    target.answer = lambda tp, o: "hold" if 2 <= o < 5 else "store"  # the target never gets to 2-4
    worker, consumer, target = make([batch(P0, range(6)), [], []], target=target, producer_cls=Refusing)
    with pytest.raises(FatalProduceError, match=r"orders\[0\]@5"):
        worker.run()
    assert target.stored[P0] == [0, 1]
    assert not consumer.unsafe, consumer.unsafe
    assert consumer.last_commit(P0) in (None, 0, 1, 2)
