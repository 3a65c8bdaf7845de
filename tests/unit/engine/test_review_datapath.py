"""Review of the source-gap, start_from and read-cap data paths: cases where a partition is
moved, started or held other than the contracts (docs/design.md) say."""

from __future__ import annotations

from typing import Any

import pytest

from mirror import config
from mirror.domain.gaps import SourceGap
from mirror.domain.ledger import Ledger
from mirror.domain.route import route
from mirror.domain.throttle import MAX_DEBT_SECONDS, Throttle
from mirror.engine.assignment import AssignedPartition
from mirror.engine.failures import Failures
from mirror.engine.gaps import SourceGaps
from mirror.engine.status import FlowStatus
from mirror.errors import MirrorError
from mirror.kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
from mirror.kafka.admin import Watermarks
from tests.unit.engine.eos_fakes import StartingConsumer, make_eos
from tests.unit.engine.fakes import P0, P1, TEXT, FakeAdmin, Msg, batch

LOW = 100  # the source log of every partition starts here: 0..99 expired before the flow existed


class Heard:
    def __init__(self) -> None:
        self.gaps: list[SourceGap] = []

    def on_gap(self, flow: str, gap: SourceGap) -> None:
        self.gaps.append(gap)

    # the rest of AckListener: nothing to hear
    def on_acked(self, batches: Any) -> None:
        pass

    def before_commit(self, flow: str, positions: Any) -> None:
        pass

    def on_reset(self, flow: str, partitions: Any) -> None:
        pass

    def close(self) -> None:
        pass


class ExpiredHeadAdmin(FakeAdmin):
    """A source whose partitions hold LOW..LOW+10 (everything before expired long ago)."""

    def watermarks(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        return {tp: Watermarks(LOW, LOW + 10) for tp in parts}


class ExpiredHeadConsumer(StartingConsumer):
    """As librdkafka with auto.offset.reset=error: a partition started at a concrete offset
    below the log start answers with an out-of-range error event instead of records;
    OFFSET_BEGINNING starts at the log start."""

    def _start(self, tps: list[TopicPartition]) -> None:
        super()._start(tps)
        for tp in tps:
            if tp.offset == OFFSET_BEGINNING:
                self.position_of[(tp.topic, tp.partition)] = LOW

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        msgs = super().consume(num_messages, timeout)
        out = []
        for tp in self.assigned:
            at = self.position_of.get(tp)
            if at is not None and 0 <= at < LOW:
                out.append(Msg(tp, at, KafkaError(KafkaError._AUTO_OFFSET_RESET, "offset out of range")))
        return out + [m for m in msgs if m.error() is not None or m.offset() >= LOW]


def _read(tp: tuple[str, int], upto: int) -> Any:
    def step(consumer: Any) -> list[Msg]:
        return batch(tp, range(max(LOW, consumer.position_of.get(tp, LOW)), upto))

    return step


def test_exactly_once_first_start_of_a_never_committed_partition_reports_no_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new exactly_once flow over a topic whose first records expired long ago (any topic
    older than its retention). Never committed, a partition starts "from the beginning" as
    in at-least-once (OFFSET_BEGINNING, no report). The claim starts it at a concrete 0
    (claims.py `_starts_of`: max(0, OFFSET_BEGINNING)); with auto.offset.reset=error that is
    out of range, reported as records 0..99 "never mirrored" (counter, offset map), and with
    on_source_gap: stop the flow cannot start (exit 4)."""
    heard = Heard()
    worker, consumer, target = make_eos(
        monkeypatch,
        [[], _read(P0, LOW + 10), _read(P1, LOW + 10)],
        consumer_cls=ExpiredHeadConsumer,
        admin_cls=ExpiredHeadAdmin,
        listeners=(heard,),
    )
    worker.run()
    assert heard.gaps == [], [g.describe() for g in heard.gaps]
