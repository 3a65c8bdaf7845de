"""AdminClient fakes answering like a broker, for the admin's own error handling (no network)."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError


@dataclass
class Answered:
    """A partition of an AlterConsumerGroupOffsets answer (confluent-kafka's TopicPartition
    has a read-only `error`)."""

    topic: str
    partition: int
    offset: int
    error: KafkaError | None = None


class Coordinator:
    """An AdminClient whose group coordinator answers each commit with `errors.pop(0)` on every
    partition (None: accepted, the offsets then held), and None once `errors` runs out."""

    def __init__(self, *errors: int | None) -> None:
        self.errors = list(errors)
        self.group: dict[tuple[str, int], int] = {}
        self.asked: list[dict[tuple[str, int], int]] = []

    def poll(self, _timeout: float) -> int:
        return 0

    def alter_consumer_group_offsets(self, requests: Any, **_kw: Any) -> dict[str, Future[Any]]:
        (req,) = requests
        offsets = {(tp.topic, tp.partition): tp.offset for tp in req.topic_partitions}
        self.asked.append(offsets)
        code = self.errors.pop(0) if self.errors else None
        if code is None:
            self.group.update(offsets)

        class Answer:
            topic_partitions = [
                Answered(t, p, o, KafkaError(code) if code is not None else None) for (t, p), o in offsets.items()
            ]

        fut: Future[Any] = Future()
        fut.set_result(Answer())
        return {req.group_id: fut}


class MixedCoordinator(Coordinator):
    """A coordinator answering one commit with an error per partition (`codes`, in the
    answer's order): a broker refuses the topics the principal may not Read itself and hands
    the rest to the group's coordinator, which may be moving (NOT_COORDINATOR) meanwhile."""

    def __init__(self, codes: dict[tuple[str, int], int | None]) -> None:
        super().__init__()
        self.codes = codes

    def alter_consumer_group_offsets(self, requests: Any, **_kw: Any) -> dict[str, Future[Any]]:
        (req,) = requests
        answered = []
        for tp in req.topic_partitions:
            code = self.codes.get((tp.topic, tp.partition))
            answered.append(Answered(tp.topic, tp.partition, tp.offset, KafkaError(code) if code is not None else None))

        class Answer:
            topic_partitions = answered

        fut: Future[Any] = Future()
        fut.set_result(Answer())
        return {req.group_id: fut}
