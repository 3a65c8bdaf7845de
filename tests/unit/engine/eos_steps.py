"""Steps and checks shared by the exactly_once worker tests (test_exactly_once_*.py).

A test drives a real `FlowWorker` with exactly_once on against `eos_fakes.TxnTarget` with a
script of steps (`read`: records from where the worker positioned the consumer) and checks
what a read_committed consumer of the target would read (`exactly_once`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mirror.domain.acks import AckBatch, AckListener
from mirror.kafka import TopicPartition
from tests.unit.engine.eos_fakes import EOS_TEXT, StartingConsumer, TxnTarget
from tests.unit.engine.fakes import FakeConsumer, Msg, batch

SLOW = EOS_TEXT.replace("commit_interval: 1s", "commit_interval: 10s")


def read(tp: tuple[str, int], upto: int) -> Any:
    """A step reading `tp` from wherever the worker positioned the consumer, up to `upto`."""

    def step(consumer: FakeConsumer) -> list[Msg]:
        start = max(0, consumer.position_of.get(tp, 0))  # OFFSET_BEGINNING (-2): the first record
        return batch(tp, range(start, upto))

    return step


def exactly_once(target: TxnTarget, tp: tuple[str, int], end: int) -> None:
    got = target.visible(tp)
    lost = sorted(set(range(end)) - set(got))
    doubled = sorted({o for o in got if got.count(o) > 1})
    assert (lost, doubled, got) == ([], [], list(range(end))), f"lost {lost}, doubled {doubled}"


def fail_once(target: TxnTarget, tp: tuple[str, int], offset: int, armed: Any = lambda: True) -> set[int]:
    """The target fails the record `tp`@`offset` once (after `armed()`); returns the failed offsets."""
    failed: set[int] = set()

    def answer(at: tuple[str, int], o: int) -> str:
        if at == tp and o == offset and not failed and armed():
            failed.add(o)
            return "fail"
        return "store"

    target.answer = answer
    return failed


class Rows(AckListener):
    """The offset map's place among the listeners: what it is handed, and whether each batch's
    records were visible on the target (their transaction committed) when it was."""

    def __init__(self, target: TxnTarget) -> None:
        self.target = target
        self.offsets: dict[int, list[int]] = {}  # source partition -> source offsets handed on
        self.early: list[str] = []

    def on_acked(self, batches: Sequence[AckBatch]) -> None:
        for b in batches:
            visible = set(self.target.visible((b.source_topic, b.partition)))
            if not set(range(b.first_offset, b.next_offset)) <= visible:
                self.early.append(f"{b.partition}: {b.first_offset}-{b.next_offset} before its commit")
            self.offsets.setdefault(b.partition, []).extend(range(b.first_offset, b.next_offset))


class AppPositionConsumer(StartingConsumer):
    """As librdkafka: `position` is the offset after the last record returned, unknown
    (-1001) after an assign or a seek until a record of the partition is returned; where it
    fetches from (`position_of`, for the script) is another matter."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.app: dict[tuple[str, int], int] = {}

    def _start(self, tps: list[TopicPartition]) -> None:
        super()._start(tps)
        for tp in tps:
            self.app.pop((tp.topic, tp.partition), None)

    def seek(self, tp: TopicPartition) -> None:
        super().seek(tp)
        self.app.pop((tp.topic, tp.partition), None)

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        msgs = super().consume(num_messages, timeout)
        for m in msgs:
            if m.error() is None:
                self.app[m.tp] = max(self.app.get(m.tp, 0), m.offset() + 1)
        return msgs

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.app.get((tp.topic, tp.partition), -1001)) for tp in tps]
