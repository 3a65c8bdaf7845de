"""In-memory fakes of a flow worker's ports (consumer, producers, admin clients), and helpers.

The worker takes consumer, producer and admin factories; here they make fakes: a source
that hands out scripted batches, a target that stores records (or holds or purges them) and
answers delivery reports in order per partition. Every commit is checked against the target
when it is made: a committed offset is safe only if the target holds every source record
before it. The real clients are covered by tests/integration (test_mirror_datapath,
test_datapath_faults, test_mirror_lifecycle).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mirror import config
from mirror.domain.ledger import PartitionLedger, Segment
from mirror.engine.worker import FlowWorker
from mirror.kafka import KafkaError, TopicPartition

TEXT = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: ["orders"]}, commit_interval: 1s}
"""
P0, P1 = ("orders", 0), ("orders", 1)


class Msg:
    def __init__(self, tp: tuple[str, int], offset: int, error: KafkaError | None = None) -> None:
        self.tp, self._offset, self._error = tp, offset, error

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return self.tp[0]

    def partition(self) -> int:
        return self.tp[1]

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._offset)

    def headers(self) -> None:
        return None


class Report:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class Target:
    """The target cluster: what it stored, and how it answers (`answer(tp, offset)`:
    "store", "hold" (no answer yet) or "purge")."""

    def __init__(self) -> None:
        self.stored: dict[tuple[str, int], list[int]] = {}  # source partition -> source offsets, in order
        self.answer: Callable[[tuple[str, int], int], str] = lambda tp, o: "store"
        self.producers: list[FakeProducer] = []


class FakeProducer:
    def __init__(self, target: Target, capacity: int) -> None:
        self.target, self.capacity = target, capacity
        self.queue: list[tuple[tuple[str, int], int, Any]] = []  # (source partition, source offset, on_delivery)
        self.asked: list[tuple[int, bool]] = []  # (source offset, asked for a report)
        self.failed = False  # a write failed

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
        """confluent-kafka's signature: the worker passes everything positionally."""
        on_delivery = callback or on_delivery
        if len(self.queue) >= self.capacity:
            raise BufferError("queue full")
        origin = dict(headers)["mirror.origin"].decode()  # cluster/topic/partition/offset
        _, src_topic, _, offset = origin.split("/")
        self.queue.append(((src_topic, partition), int(offset), on_delivery))
        self.asked.append((int(offset), on_delivery is not None))

    def __len__(self) -> int:
        return len(self.queue)

    def poll(self, timeout: float = 0) -> int:
        """Answer, in order per partition, up to each partition's first held record."""
        held: set[tuple[str, int]] = set()
        left, served = [], 0
        for tp, offset, cb in self.queue:
            what = "hold" if tp in held else self.target.answer(tp, offset)
            if what == "hold":
                held.add(tp)
                left.append((tp, offset, cb))
                continue
            served += 1
            if what == "unknown":  # the producer's metadata lags a partition increase
                if cb is not None:
                    cb(KafkaError(KafkaError._UNKNOWN_PARTITION), Report(-1))
                continue
            if what == "purge":
                if cb is not None:
                    cb(KafkaError(KafkaError._PURGE_QUEUE), Report(-1))
                continue
            if what == "fail":  # the write failed (a transactional target's subclass aborts on it)
                self.failed = True
                if cb is not None:
                    cb(KafkaError(KafkaError._MSG_TIMED_OUT), Report(-1))
                continue
            at = self.write(tp, offset)
            if cb is not None:
                cb(None, Report(at))
        self.queue = left
        return served

    def write(self, tp: tuple[str, int], offset: int) -> int:
        """Store a record on the target; returns its target offset."""
        log = self.target.stored.setdefault(tp, [])
        log.append(offset)
        return len(log) - 1

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return len(self.queue)

    def purge(self, in_queue: bool = True, in_flight: bool = True) -> None:
        queue, self.queue = self.queue, []
        for _, _, cb in queue:
            if cb is not None:
                cb(KafkaError(KafkaError._PURGE_QUEUE), Report(-1))

    def list_topics(self, topic: str, timeout: float) -> None:
        return None


Step = list[Msg] | Callable[["FakeConsumer"], list[Msg]]


class FakeConsumer:
    """The source: one scripted step per loop turn (a batch of records, or an action); sets
    `stop` when the script is done. Checks every commit against the target."""

    def __init__(
        self, partitions: Iterable[tuple[str, int]], script: list[Step], stop: threading.Event, target: Target
    ) -> None:
        self.partitions, self.script, self.stop, self.target = list(partitions), list(script), stop, target
        self.records: dict[tuple[str, int], set[int]] = {}  # every record handed out
        self.position_of: dict[tuple[str, int], int] = {}
        self.assigned: list[tuple[str, int]] = []
        self.paused: set[tuple[str, int]] = set()
        self.commits: list[dict[tuple[str, int], int]] = []
        self.unsafe: list[str] = []
        self.callbacks: dict[str, Any] = {}
        self.closed = False
        self.idle = 0  # turns before the first subscription
        self.calls: list[str] = []  # assignment calls, in order

    # the group
    def subscribe(self, topics: list[str], *, on_assign: Any, on_revoke: Any, on_lost: Any) -> None:
        self.callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}

    def unsubscribe(self) -> None:
        pass

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        self.calls.append("incremental_assign")
        self.assigned += [(tp.topic, tp.partition) for tp in tps]

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        self.calls.append("incremental_unassign")
        gone = {(tp.topic, tp.partition) for tp in tps}
        self.assigned = [tp for tp in self.assigned if tp not in gone]
        for tp in gone:  # librdkafka forgets the position of a partition it stops fetching
            self.position_of.pop(tp, None)

    def assign(self, tps: list[TopicPartition]) -> None:  # eager assignors: the whole assignment
        self.calls.append("assign")
        self.assigned = [(tp.topic, tp.partition) for tp in tps]

    def unassign(self) -> None:
        self.calls.append("unassign")
        for tp in self.assigned:  # librdkafka forgets the position of a partition it stops fetching
            self.position_of.pop(tp, None)
        self.assigned = []

    def revoke(self, tps: list[tuple[str, int]]) -> None:
        self.callbacks["revoke"](self, [TopicPartition(t, p) for t, p in tps])

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.assigned]

    # reading
    def consume(self, num_messages: int, timeout: float) -> list[Msg]:
        if num_messages == 1:  # the loop's short wait when the batch came back empty
            return []
        if not self.callbacks:  # not subscribed yet (targets not ready): nothing to read
            self.idle += 1
            if self.idle > 1000:
                self.stop.set()
            return []
        if self.partitions:  # the first turn after subscribing: the group assigns
            self.callbacks["assign"](self, [TopicPartition(t, p) for t, p in self.partitions])
            self.partitions = []
        if not self.script:
            self.stop.set()
            return []
        step = self.script.pop(0)
        msgs = step(self) if callable(step) else step
        for m in msgs:
            if m.error() is None:
                assert m.tp in self.assigned and m.tp not in self.paused, (
                    "the script reads a partition the worker does not read"
                )
                self.records.setdefault(m.tp, set()).add(m.offset())
                self.position_of[m.tp] = max(self.position_of.get(m.tp, 0), m.offset() + 1)
        return msgs

    def markers(self, tp: tuple[str, int], position: int) -> list[Msg]:
        """Transaction markers up to `position`: no record, only the position moves."""
        self.position_of[tp] = position
        return []

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in tps}

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in tps}

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, self.position_of.get((tp.topic, tp.partition), -1001)) for tp in tps
        ]

    def seek(self, tp: TopicPartition) -> None:
        self.position_of[(tp.topic, tp.partition)] = tp.offset

    # offsets
    def committed(self, tps: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        last = {k: v for c in self.commits for k, v in c.items()}
        return [TopicPartition(tp.topic, tp.partition, last.get((tp.topic, tp.partition), -1001)) for tp in tps]

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        got = {(tp.topic, tp.partition): tp.offset for tp in offsets}
        for tp, offset in got.items():
            stored = set(self.target.stored.get(tp, ()))
            missing = sorted(o for o in self.records.get(tp, ()) if o < offset and o not in stored)
            if missing:
                self.unsafe.append(f"{tp} committed at {offset} while the target lacks {missing}")
        self.commits.append(got)

    def last_commit(self, tp: tuple[str, int]) -> int | None:
        return next((c[tp] for c in reversed(self.commits) if tp in c), None)

    def close(self) -> None:
        self.closed = True


class FakeAdmin:
    def __init__(self, topics: Mapping[str, int]) -> None:
        self._topics = dict(topics)

    def topics(self) -> dict[str, int]:
        return dict(self._topics)

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        return {t: f"id-{t}" for t in topics if t in self._topics}

    def cluster_id(self) -> str:
        return "fake-cluster"

    def watermarks(self, parts: Iterable[tuple[str, int]], committed_only: bool = True) -> dict[tuple[str, int], Any]:
        # Every record still there (nothing expired): the log starts at 0.
        from mirror.kafka.admin import Watermarks

        return {tp: Watermarks(0, 0) for tp in parts}

    def max_message_bytes(self, topics: Iterable[str]) -> dict[str, int]:
        return {}


class Clock:
    """Time moves a quarter second per look: waits (a drain, backpressure) end without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


def make(
    script: list[Step],
    *,
    target: Target | None = None,
    capacity: int = 100_000,
    producer_cls: type[FakeProducer] = FakeProducer,
    text: str = TEXT,
    listeners: Iterable[Any] = (),
) -> tuple[FlowWorker, FakeConsumer, Target]:
    """A worker of flow `p` (source topic `orders`, 2 partitions, both assigned) on fakes."""
    cfg = config.parse(text, env={})
    stop = threading.Event()
    target = target or Target()
    consumer = FakeConsumer([P0, P1], script, stop, target)

    def producer(name: str, cluster: Any, settings: Mapping[str, Any]) -> FakeProducer:
        p = producer_cls(target, capacity)
        target.producers.append(p)
        return p

    admins = {"nyc": {"orders": 2}, "sf": {"nyc.orders": 2}}
    worker = FlowWorker(
        cfg,
        cfg.flows[0],
        stop=stop,
        listeners=list(listeners),
        clock=Clock(),
        consumer_factory=lambda name, cluster, settings: consumer,
        producer_factory=producer,
        admin_factory=lambda name, cluster: FakeAdmin(admins[name]),
    )
    return worker, consumer, target


def run(script: list[Step], **kwargs: Any) -> tuple[FlowWorker, FakeConsumer, Target]:
    worker, consumer, target = make(script, **kwargs)
    worker.run()
    assert consumer.closed and not consumer.unsafe, consumer.unsafe
    return worker, consumer, target


def batch(tp: tuple[str, int], offsets: Iterable[int]) -> list[Msg]:
    return [Msg(tp, o) for o in offsets]


def opened(
    consumer: Any,
    *,
    producer: Callable[[], Any],
    admin: Any = None,
    clock: Callable[[], float] | None = None,
    listeners: Iterable[Any] = (),
    text: str = TEXT,
) -> FlowWorker:
    """A worker of flow `p` whose clients are `consumer`, producers made by `producer()` and
    `admin` (a `FakeAdmin` of no topics by default), opened: its units exist, nothing is read."""
    cfg = config.parse(text, env={})
    worker = FlowWorker(
        cfg,
        cfg.flows[0],
        stop=threading.Event(),
        listeners=list(listeners),
        clock=clock or Clock(),
        consumer_factory=lambda name, cluster, settings: consumer,
        producer_factory=lambda name, cluster, settings: producer(),
        admin_factory=lambda name, cluster: admin if admin is not None else FakeAdmin({}),
    )
    worker.open()
    return worker


def segment(part: PartitionLedger, offsets: list[int]) -> Segment:
    """A run of records of `part` produced together, now in flight."""
    seg = Segment(offsets[0])
    for o in offsets:
        seg.add(o, 10, 1000 + o)
    part.begin(seg)
    return seg
