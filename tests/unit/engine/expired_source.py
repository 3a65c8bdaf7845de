"""A source whose partitions lost their first records to retention (LOW is each log's
start): fakes for tests of what the worker does with positions outside the log
(engine/gaps.py) and the starts that lead there."""

from __future__ import annotations

import threading
from typing import Any

from mirror import config
from mirror.domain.gaps import SourceGap
from mirror.engine.worker import FlowWorker
from mirror.kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
from mirror.kafka.admin import Watermarks
from tests.unit.engine.eos_fakes import StartingConsumer
from tests.unit.engine.fakes import P0, TEXT, Clock, FakeAdmin, FakeProducer, Msg, Target, batch

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


def read_from_low(tp: tuple[str, int], upto: int) -> Any:
    def step(consumer: Any) -> list[Msg]:
        return batch(tp, range(max(LOW, consumer.position_of.get(tp, LOW)), upto))

    return step


class IdleExpiredConsumer(ExpiredHeadConsumer):
    """P0 was committed at 50 before the flow stopped; since then everything up to LOW
    expired and nothing was written (an idle partition: LOW is also its end). librdkafka
    starts an unassigned-offset partition at the group's committed offset."""

    def _start(self, tps: list[TopicPartition]) -> None:
        super()._start(tps)
        for tp in tps:
            key = (tp.topic, tp.partition)
            if tp.offset == -1001 and self.last_commit(key) is not None:
                self.position_of[key] = self.last_commit(key)  # type: ignore[assignment]

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        super().incremental_assign(tps)
        self._start(tps)

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        # librdkafka's position is the offset after the last record returned: none here
        # (see eos_steps.AppPositionConsumer), whatever offset the partition was assigned at.
        got = {tp: max(o) + 1 for tp, o in self.records.items() if o}
        return [TopicPartition(tp.topic, tp.partition, got.get((tp.topic, tp.partition), -1001)) for tp in tps]


class IdleExpiredAdmin(ExpiredHeadAdmin):
    def watermarks(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        return {tp: Watermarks(LOW, LOW) for tp in parts}


def run_idle_expired(commits: list[dict[tuple[str, int], int]], heard: Heard) -> IdleExpiredConsumer:
    cfg = config.parse(TEXT, env={})
    stop, target = threading.Event(), Target()
    consumer = IdleExpiredConsumer([P0], [[], [], []], stop, target)
    consumer.commits = list(commits)
    admins = {"nyc": {"orders": 1}, "sf": {"nyc.orders": 1}}
    worker = FlowWorker(
        cfg,
        cfg.flows[0],
        stop=stop,
        listeners=[heard],
        clock=Clock(),
        consumer_factory=lambda name, cluster, settings: consumer,
        producer_factory=lambda name, cluster, settings: FakeProducer(target, 100_000),
        admin_factory=lambda name, cluster: IdleExpiredAdmin(admins[name]),
    )
    worker.run()
    return consumer
