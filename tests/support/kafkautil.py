"""Plain confluent-kafka helpers for tests: create, produce, read back whole partitions."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]

    def own_headers(self) -> tuple[tuple[str, bytes | None], ...]:
        return tuple(h for h in self.headers if h[0] != "mirror.origin")

    def provenance(self) -> dict[str, str] | None:
        from mirror.domain.route import provenance

        return provenance(self.headers)

    def content(self) -> tuple:
        """What must survive mirroring unchanged."""
        return (self.key, self.value, self.timestamp, self.own_headers())


def create_topic(bootstrap: str, topic: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(30)
    # Created is not yet led: a watermark request right after the creation can meet "Not
    # leader for partition" (seen in test_hard_bounce under load). Return once every
    # partition answers.
    deadline = time.monotonic() + 30
    while True:
        try:
            end_offsets(bootstrap, topic, partitions)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)


def topics(bootstrap: str) -> dict[str, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {t.topic: len(t.partitions) for t in md.topics.values()}


def producer(bootstrap: str, **extra) -> Producer:
    # Idempotent, so the source holds records in the order the test produced them: without
    # it, a retry after a new topic's first NOT_LEADER lets later batches land first.
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, **extra})


def end_offsets(bootstrap: str, topic: str, partitions: int, *, committed: bool = True) -> dict[int, int]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-watermarks",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()


def wait_settled(bootstrap: str, topic: str, partitions: int, timeout: float = 60) -> None:
    """Wait until no transaction is open on `topic`: its last stable offsets at its log ends.

    A commit returns once the coordinator has logged it; the markers reach the partitions a
    little later, and until then a read_committed read ends at the first open transaction's
    first record (a loaded machine: the copies of a just-committed transaction not read)."""
    wait_for(
        lambda: end_offsets(bootstrap, topic, partitions) == end_offsets(bootstrap, topic, partitions, committed=False),
        timeout,
        f"the transactions on {topic} to settle (last stable offsets at the log ends)",
    )


def read_partition(
    bootstrap: str, topic: str, partition: int, *, timeout: float = 60, settings: dict | None = None
) -> list[Rec]:
    """Every committed record of a partition, in offset order (`settings`: a secured cluster's client settings)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            **(settings or {}),
        }
    )
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        if hi <= lo:
            return []
        c.assign([TopicPartition(topic, partition, lo)])
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pos = c.position([TopicPartition(topic, partition)])[0].offset
            if pos >= hi:
                break
            for m in c.consume(5000, timeout=0.5):
                if m.error() is None:
                    out.append(Rec(m.offset(), m.key(), m.value(), m.timestamp()[1], tuple(m.headers() or ())))
        else:
            raise AssertionError(f"could not read {topic}[{partition}] to {hi} within {timeout}s")
        return out
    finally:
        c.close()


def read_topic(bootstrap: str, topic: str, partitions: int) -> dict[int, list[Rec]]:
    return {p: read_partition(bootstrap, topic, p) for p in range(partitions)}


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {
            tp.partition: tp.offset
            for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        }
    finally:
        c.close()


def commit_group(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit `offsets` for `group` as a consumer of it would (the group stays empty after)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def wait_for(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    interval: float = 0.25,
    detail: Callable[[], str] | None = None,
) -> None:
    """Poll `check` until true; a Kafka error while polling (a leader moving, a topic being
    created) counts as "not yet", and the last one is reported on time-out, followed by
    `detail()` (a mirror's log, say)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except KafkaException as exc:
            last = exc
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}"
        + (f" (last error: {last})" if last else "")
        + ("\n" + detail() if detail else "")
    )
