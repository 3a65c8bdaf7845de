"""FlowWorker's commit-safety rules, run against small in-memory fakes of its ports.

The worker takes consumer, producer and admin factories; here they make fakes: a source
that hands out scripted batches, a target that stores records (or holds or purges them) and
answers delivery reports in order per partition. Every commit is checked against the target
when it is made: a committed offset is safe only if the target holds every source record
before it. The real clients are covered by tests/integration (test_mirror_datapath,
test_hardening, test_mirror_lifecycle).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest

from mirror import config
from mirror.engine.worker import FlowWorker
from mirror.errors import FatalProduceError
from mirror.kafka import KafkaError, KafkaException, TopicPartition

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

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1, callback: Any = None,
                on_delivery: Any = None, timestamp: int = 0, headers: Any = None) -> None:
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
            log = self.target.stored.setdefault(tp, [])
            log.append(offset)
            if cb is not None:
                cb(None, Report(len(log) - 1))
        self.queue = left
        return served

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

    def __init__(self, partitions: Iterable[tuple[str, int]], script: list[Step], stop: threading.Event, target: Target) -> None:
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
                assert m.tp in self.assigned and m.tp not in self.paused, "the script reads a partition the worker does not read"
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
        return [TopicPartition(tp.topic, tp.partition, self.position_of.get((tp.topic, tp.partition), -1001)) for tp in tps]

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

    def max_message_bytes(self, topics: Iterable[str]) -> dict[str, int]:
        return {}


class Clock:
    """Time moves a quarter second per look: waits (a drain, backpressure) end without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


def make(script: list[Step], *, target: Target | None = None, capacity: int = 100_000, producer_cls: type[FakeProducer] = FakeProducer, text: str = TEXT) -> tuple[FlowWorker, FakeConsumer, Target]:
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
        cfg, cfg.flows[0], stop=stop, clock=Clock(),
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


def test_everything_acknowledged_is_committed_and_reports_are_asked_only_at_segment_edges():
    eof = Msg(P0, -1, KafkaError(KafkaError._PARTITION_EOF))
    worker, consumer, target = run([batch(P0, range(3)) + [eof] + batch(P0, [3, 4]) + batch(P1, range(2))])
    # an error event closes the segment before it; a partition change closes one too
    assert target.producers[0].asked == [(0, True), (1, False), (2, True), (3, True), (4, True), (0, True), (1, True)]
    assert target.stored == {P0: [0, 1, 2, 3, 4], P1: [0, 1]}
    assert (consumer.last_commit(P0), consumer.last_commit(P1), worker.records_acked) == (5, 2, 7)


def test_never_commits_past_an_unacknowledged_record():
    """P0's records from 5 on never get an answer: while they are in flight and after the
    stop gives up on them (drain timeout, purge), P0 is committed up to 5 only."""
    target = Target()
    target.answer = lambda tp, o: "hold" if tp == P0 and o >= 5 else "store"
    worker, consumer, _ = run([batch(P0, range(5)), batch(P0, range(5, 10)) + batch(P1, range(5)), [], [], []], target=target)
    assert {c.get(P0) for c in consumer.commits} <= {5, None}
    assert (consumer.last_commit(P0), consumer.last_commit(P1)) == (5, 5)
    assert consumer.position_of[P0] == 10 and worker.state.value == "stopped"


def test_never_commits_past_a_dropped_record():
    """A full producer queue: the records read but not produced are dropped at the stop, and
    so is the open segment cut short among them. The consumer's position is past both; the
    commit stays at the last acknowledged record."""
    target = Target()
    target.answer = lambda tp, o: "hold" if o >= 5 else "store"
    worker, consumer, _ = run([batch(P0, range(3)), batch(P0, range(3, 15)), [], []], target=target, capacity=5)
    assert target.stored[P0] == [0, 1, 2, 3, 4] and consumer.position_of[P0] == 15
    assert consumer.last_commit(P0) == 3  # 3 and 4 landed, but their segment's closing report never came
    assert consumer.paused  # reading paused while the target did not keep up


def test_quiet_partitions_commit_past_transaction_markers_busy_ones_do_not():
    target = Target()
    target.answer = lambda tp, o: "hold" if tp == P1 and o >= 3 else "store"
    script: list[Step] = [
        batch(P0, range(5)) + batch(P1, range(3)),
        lambda c: c.markers(P0, 7),  # a commit marker at 5 and 6
        batch(P1, range(3, 5)),  # held by the target: P1 is busy
        lambda c: c.markers(P1, 7),
        [],
    ]
    worker, consumer, _ = run(script, target=target)
    assert 7 in {c.get(P0) for c in consumer.commits}
    assert {c.get(P1) for c in consumer.commits} <= {3, None}


def test_a_tainted_partition_commits_only_what_was_acknowledged():
    """A purged segment taints its partition: even with nothing in flight any more, its
    commit stays at the last acknowledged record, not at the consumer's position."""
    target = Target()
    target.answer = lambda tp, o: "purge" if tp == P0 and 3 <= o < 6 else "store"
    worker, consumer, _ = run([batch(P0, range(3)), batch(P0, range(3, 6)), lambda c: c.markers(P0, 9), [], []], target=target)
    assert consumer.last_commit(P0) == 3 and worker.state.value == "stopped"


def test_revoke_waits_for_acknowledgements_commits_then_hands_over():
    target = Target()
    polls = {"n": 0}

    def answer(tp: tuple[str, int], o: int) -> str:
        # P0 from 3 on is answered only after a few polls: the revoke has to wait for it
        if tp == P0 and o >= 3:
            polls["n"] += 1
            return "store" if polls["n"] > 20 else "hold"
        return "store"

    target.answer = answer
    handed_over: list[int | None] = []

    def revoke(c: FakeConsumer) -> list[Msg]:
        c.revoke([P0])
        handed_over.append(c.last_commit(P0))
        return []

    worker, consumer, _ = run([batch(P0, range(3)), batch(P0, range(3, 8)), revoke, batch(P1, range(2)), []], target=target)
    assert handed_over == [8] and P0 not in consumer.assigned
    assert consumer.last_commit(P0) == 8 and consumer.last_commit(P1) == 2


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

    worker, consumer, target = make([batch(P0, range(4)), batch(P0, range(4, 7)) + batch(P1, range(3)), [], []], producer_cls=Refusing)
    with pytest.raises(FatalProduceError, match=r"orders\[0\]@4") as failed:
        worker.run()
    assert failed.value.size == 3  # b"k" + b"v4": the largest record of the refused segment
    assert not consumer.unsafe and consumer.closed and worker.state.value == "failed"
    assert consumer.last_commit(P0) == 4 and target.stored[P1] == [0, 1, 2]


def test_a_failure_while_opening_closes_the_consumer_already_made():
    class Broken(FakeProducer):
        def __init__(self, target: Target, capacity: int) -> None:
            raise FatalProduceError("orders", 0, 0, "no producer")

    worker, consumer, _ = make([], producer_cls=Broken)
    with pytest.raises(FatalProduceError):
        worker.run()
    assert consumer.closed and consumer.commits == []


def test_unknown_partition_at_delivery_on_a_topic_that_exists_rewinds_instead_of_stalling():
    """Review of issue 10, point 3: the first producer's reports for P0's records 3-4 say
    "unknown partition" though the target topic exists (its metadata lagged a partition
    increase); later records of P0 landed. The refresh finds nothing gone: before the fix P0
    stayed refused for good (committed at 3, a silent stall). Now every partition is
    re-read from what the target acknowledged, by new producers: duplicates, never a gap."""
    target = Target()
    target.answer = lambda tp, o: "unknown" if tp == P0 and o in (3, 4) and len(target.producers) == 1 else "store"
    # P1's records between P0's close P0's segments: 3-4 is a segment of its own, with reports.
    first = batch(P0, range(3)) + batch(P1, range(2)) + batch(P0, [3, 4]) + batch(P1, [2, 3]) + batch(P0, range(5, 10))
    script: list[Step] = [first, [], [], lambda c: batch(P0, range(c.position_of[P0], 10)), [], [], []]
    worker, consumer, _ = run(script, target=target)
    assert set(target.stored[P0]) == set(range(10)), target.stored[P0]
    assert consumer.last_commit(P0) == 10



def test_a_refused_record_does_not_acknowledge_the_run_before_it_while_the_flush_left_it_queued():
    """Review 14: P0's record 5 is refused by produce() itself; the open segment 0-4 before it
    has no closing report, so `_close_open_segment` flushes and acknowledges it from its first
    record's placement. 0-1 landed but 2-4 are still queued when the flush gives up (a slow
    target): acknowledging the segment then would commit 5 past records the target lacks."""
    from mirror.kafka import KafkaException

    class Refusing(FakeProducer):
        def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1, callback: Any = None,
                    on_delivery: Any = None, timestamp: int = 0, headers: Any = None) -> None:
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


def test_an_eager_assignor_gets_whole_assignments_and_whole_revocations():
    """roundrobin/range (allowed for large flows: librdkafka's cooperative-sticky takes tens of
    seconds at 10,000 partitions) speak the eager protocol: assign/unassign, never the
    incremental calls, which librdkafka refuses under that protocol."""
    eager = TEXT.replace("commit_interval: 1s}", "commit_interval: 1s, consumer: {partition.assignment.strategy: roundrobin}}")

    def rebalance(c: FakeConsumer) -> list[Msg]:
        c.revoke([P0, P1])  # everything is revoked first, then everything assigned again
        c.callbacks["assign"](c, [TopicPartition(*P0), TopicPartition(*P1)])
        return []

    worker, consumer, target = run([batch(P0, range(3)), rebalance, batch(P1, range(2))], text=eager)
    assert consumer.calls == ["assign", "unassign", "assign"], consumer.calls
    assert consumer.last_commit(P0) == 3 and consumer.last_commit(P1) == 2
    assert sorted(target.stored[P0]) == [0, 1, 2] and sorted(target.stored[P1]) == [0, 1]


def test_the_default_assignor_gets_increments():
    worker, consumer, target = run([batch(P0, range(3)), lambda c: (c.revoke([P1]), [])[1], batch(P0, [3])])
    assert consumer.calls == ["incremental_assign", "incremental_unassign"], consumer.calls
    assert consumer.last_commit(P0) == 4


def test_an_eager_rebalance_while_reading_is_paused_by_backpressure_does_not_leave_reading_paused():
    """Review 19: an eager revoke takes every partition, so it drops every pending record
    (read, not yet produced: the producer's queue was full) while reading was paused for
    them. The whole assignment that follows is paused too (`_paused`), and nothing was
    left pending whose production would resume reading: the flow read nothing ever again."""
    eager = TEXT.replace("commit_interval: 1s}", "commit_interval: 1s, consumer: {partition.assignment.strategy: roundrobin}}")
    target = Target()
    slow = {"on": True}
    target.answer = lambda tp, o: "hold" if slow["on"] else "store"
    paused_after: list[set[tuple[str, int]]] = []

    def rebalance(c: FakeConsumer) -> list[Msg]:
        slow["on"] = False  # the target catches up during the revoke's drain
        c.revoke([P0, P1])
        c.callbacks["assign"](c, [TopicPartition(*P0), TopicPartition(*P1)])
        return []

    def look(c: FakeConsumer) -> list[Msg]:
        paused_after.append(set(c.paused))
        return []

    def reread(c: FakeConsumer) -> list[Msg]:  # from the commit the revoke made
        return [] if c.paused else batch(P0, range(5, 10))

    worker, consumer, target = run([batch(P0, range(10)), rebalance, [], [], look, reread, [], []], target=target, capacity=5, text=eager)
    assert paused_after == [set()], paused_after
    assert target.stored[P0] == list(range(10)) and consumer.last_commit(P0) == 10, (target.stored, consumer.commits)


def test_the_commit_that_confirms_a_fenced_worker_never_names_partitions_revoked_meanwhile():
    """Review 19: frozen past the session timeout but not expelled, a worker is fenced and
    asks the group with a commit of every partition it had. An eager rebalance (another
    worker joins) revokes all of them and hands one back; the other's new owner commits its
    progress. The asking commit, made as a member of the new generation, is accepted for
    every partition named (a group does not check ownership): it moved the other owner's
    offset back, and a next handover re-mirrors what was already mirrored."""
    eager = TEXT.replace("commit_interval: 1s}", "commit_interval: 1s, consumer: {partition.assignment.strategy: roundrobin}}")
    made: list[FlowWorker] = []

    refused = {"on": False}

    def freeze(c: FakeConsumer) -> list[Msg]:
        made[0].clock.now += 60  # type: ignore[attr-defined]  # SIGSTOP ... SIGCONT, still a member
        refused["on"] = True  # the group is rebalancing: commits wait for the new generation
        return []

    def rebalance(c: FakeConsumer) -> list[Msg]:
        refused["on"] = False
        c.revoke([P0, P1])
        c.callbacks["assign"](c, [TopicPartition(*P1)])  # P0 went to the worker that joined
        c.commits.append({P0: 8})  # which mirrored and committed it
        return []

    worker, consumer, target = make([batch(P0, range(3)) + batch(P1, range(2)), [], [], [], [], freeze, [], [], [], [], rebalance] + [[]] * 12, text=eager)
    made.append(worker)
    commit = consumer.commit

    def commit_unless_rebalancing(*, offsets: list[TopicPartition], asynchronous: bool) -> None:
        if refused["on"]:
            raise KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS, "Broker: Group rebalance in progress"))
        commit(offsets=offsets, asynchronous=asynchronous)

    consumer.commit = commit_unless_rebalancing  # type: ignore[method-assign]
    worker.run()
    assert not consumer.unsafe, consumer.unsafe
    assert consumer.last_commit(P0) == 8, consumer.commits


def test_records_an_eager_revoke_gave_up_on_never_land_after_the_new_owner_started():
    """Review 19: a revoke waits DRAIN_TIMEOUT for its partitions' acknowledgements, then
    commits what was acknowledged and hands them over; what was still queued stayed in the
    producer and reached the target later, after (or among) the new owner's copies of the
    same records: duplicates out of order in one partition. Likely since the producer holds
    records for a just-created topic it cannot see yet for up to 300 s (not 30 s), and
    workers joining one by one make eager rebalances while they wait. An eager revoke takes
    every partition, so it can drop the whole producer's queue."""
    eager = TEXT.replace("commit_interval: 1s}", "commit_interval: 1s, consumer: {partition.assignment.strategy: roundrobin}}")
    target = Target()
    unseen = {"on": False}
    target.answer = lambda tp, o: "hold" if unseen["on"] and tp == P0 else "store"

    def stall(c: FakeConsumer) -> list[Msg]:
        unseen["on"] = True  # P0's records from 3 on wait (the producer cannot place them yet)
        return batch(P0, range(3, 10))

    def rebalance(c: FakeConsumer) -> list[Msg]:
        c.revoke([P0, P1])  # gives up on P0's 3-9 after DRAIN_TIMEOUT
        c.callbacks["assign"](c, [TopicPartition(*P1)])
        # P0's new owner mirrors it from the committed offset on
        c.target.stored[P0] += list(range(c.last_commit(P0) or 0, 10))
        unseen["on"] = False  # the topic is visible now: whatever is still queued lands
        return []

    worker, consumer, target = run([batch(P0, range(3)) + batch(P1, range(2)), [], [], [], stall, rebalance] + [[]] * 6, target=target, text=eager)
    assert consumer.last_commit(P0) == 3, consumer.commits
    assert target.stored[P0] == list(range(10)), f"late copies after the new owner's: {target.stored[P0]}"


def test_records_still_queued_when_every_partition_is_lost_never_land_after_the_new_owner_started():
    """The same for a lost assignment (the member missed its heartbeats or its poll interval:
    librdkafka's cooperative-sticky assignor at 10,000 partitions did that): the group gave
    the partitions away already, so whatever is still queued would land among the new
    owner's copies."""
    eager = TEXT.replace("commit_interval: 1s}", "commit_interval: 1s, consumer: {partition.assignment.strategy: roundrobin}}")
    target = Target()
    unseen = {"on": False}
    target.answer = lambda tp, o: "hold" if unseen["on"] and tp == P0 else "store"

    def stall(c: FakeConsumer) -> list[Msg]:
        unseen["on"] = True
        return batch(P0, range(3, 10))

    def lost(c: FakeConsumer) -> list[Msg]:
        c.callbacks["lost"](c, [TopicPartition(*P0), TopicPartition(*P1)])
        c.callbacks["assign"](c, [TopicPartition(*P1)])
        c.target.stored[P0] += list(range(c.last_commit(P0) or 0, 10))  # by its new owner
        unseen["on"] = False
        return []

    worker, consumer, target = run([batch(P0, range(3)) + batch(P1, range(2)), [], [], [], stall, lost] + [[]] * 6, target=target, text=eager)
    assert target.stored[P0] == list(range(10)), f"late copies after the new owner's: {target.stored[P0]}"


def test_the_assignor_is_recognised_as_librdkafka_reads_it():
    """Review 19: the config accepts an assignor name with spaces around it (quoted YAML) and
    librdkafka trims them, so "cooperative-sticky " is the cooperative protocol: the worker
    took it for an eager one, and librdkafka refuses assign() under that protocol."""
    spaced = TEXT.replace("commit_interval: 1s}", 'commit_interval: 1s, consumer: {partition.assignment.strategy: " cooperative-sticky "}}')
    worker, consumer, target = run([batch(P0, range(3))], text=spaced)
    assert consumer.calls == ["incremental_assign"], consumer.calls
