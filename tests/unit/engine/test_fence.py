"""Fence: after a freeze past the session timeout the worker writes nothing, counts no
acknowledgement from before it and reads on past nothing it dropped, until the group says
the partitions are still its own. A stand-in consumer answers like librdkafka (position =
next offset to hand over; seek moves it), no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from mirror.domain.route import route
from mirror.engine.partition import AssignedPartition
from mirror.engine.worker import FlowWorker
from mirror.kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from mirror.kafka.offsets import OFFSETS_CHUNK
from tests.unit.engine.fakes import P0, P1, TEXT, FakeConsumer, Report, batch, make, opened, segment
from tests.unit.engine.fakes import Msg as WorkerMsg

TP = ("orders", 0)


def Msg(offset: int) -> WorkerMsg:
    """A consumed record of orders[0]."""
    return WorkerMsg(TP, offset)


def worker_and_partition(
    consumer: Any, *, producer: Any = None, clock: Any = None
) -> tuple[FlowWorker, AssignedPartition]:
    """An opened worker on `consumer` that holds orders[0]."""
    w = opened(consumer, producer=producer or Producer, clock=clock)
    part = w.ledger.assign(TP, w.assignment.new_partition(route(w.flow, *TP)))
    return w, part


class Consumer:
    """What the worker's consumer answers: committed offsets, a position per partition."""

    def __init__(self, position: int, committed: int | None, *, member: bool = True, readable: bool = True) -> None:
        self.pos = {TP: position}
        self._committed = committed
        self.member = member  # still a member of the group's current generation
        self.readable = readable  # the group's committed offsets can be read
        self.commits: list[dict] = []
        self.metadata: list[dict] = []

    def committed(self, tps, timeout=None):
        if not self.readable:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return [
            TopicPartition(tp.topic, tp.partition, -1001 if self._committed is None else self._committed) for tp in tps
        ]

    def seek(self, tp):
        self.pos[(tp.topic, tp.partition)] = tp.offset

    def position(self, tps):
        return [TopicPartition(tp.topic, tp.partition, self.pos[(tp.topic, tp.partition)]) for tp in tps]

    def assignment(self):
        return [TopicPartition(t, p) for t, p in self.pos]

    def pause(self, tps):
        pass

    def resume(self, tps):
        pass

    def commit(self, offsets=None, asynchronous=True):
        if not self.member:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})
        self.metadata.append({(tp.topic, tp.partition): tp.metadata for tp in offsets})


class Producer:
    def purge(self, **_):
        pass

    def poll(self, timeout=0):
        return 0

    def __len__(self) -> int:
        return 0


def frozen_worker(consumer: Consumer) -> FlowWorker:
    """A worker that handed over source records 0-199: 0-99 acknowledged (not committed yet),
    100-199 in flight when the process was stopped past its session timeout."""
    now = [0.0]
    w, part = worker_and_partition(consumer, clock=lambda: now[0])
    w.fence.fence_after = 8.0
    first = segment(part, list(range(100)))
    w.reports.on_segment_start(part, first, None, Report(0))
    w.reports.on_segment_end(part, first, None, Report(99))
    segment(part, list(range(100, 200)))  # in flight: never acknowledged, purged by the fence
    w.fence.awake()
    now[0] += 30.0  # SIGSTOP ... SIGCONT
    assert w.fence.check()
    return w


def test_fence_never_reads_on_past_dropped_records_of_a_partition_nothing_was_committed_for():
    """A new group (or a partition whose first commit is still to come): nothing committed.
    The fence drops 100-199 uncounted; reading must start again at or before 100, or 100-199
    (purged, maybe never written) are skipped and the next acknowledged record commits past them."""
    c = Consumer(position=200, committed=None)
    w = frozen_worker(c)
    w.fence.confirm()
    nxt = c.pos[TP]
    assert nxt == OFFSET_BEGINNING or 0 <= nxt <= 100, (
        f"after the fence the worker reads on from {nxt}: source records 100-{nxt - 1} were dropped unacknowledged"
    )


def test_fence_holds_while_the_committed_offsets_cannot_be_read():
    """The committed offsets cannot be read right after the freeze (coordinator away): the
    fence must not resume reading before the group confirmed the assignment, and never from
    past the dropped records."""
    c = Consumer(position=200, committed=0, member=False, readable=False)
    w = frozen_worker(c)
    w.fence.confirm()  # still unreadable, and the group moved on: a commit as this member fails
    assert w.fence.fenced, "reading resumed without the group confirming the partitions are still ours"
    c.readable = True
    w.fence.confirm()  # readable now, but still not a member: the fence holds
    assert w.fence.fenced
    c.member = True
    w.fence.confirm()
    assert not w.fence.fenced and c.commits == [{TP: 0}]
    nxt = c.pos[TP]
    assert nxt == OFFSET_BEGINNING or 0 <= nxt <= 100, f"reads on from {nxt}, past records dropped unacknowledged"


def test_fence_with_known_committed_offsets_rereads_from_them():
    """The fixed path, for contrast: committed offset 0, still a member -> confirmed, re-read from 0."""
    c = Consumer(position=200, committed=0)
    w = frozen_worker(c)
    w.fence.confirm()
    assert not w.fence.fenced and c.pos[TP] == 0 and c.commits == [{TP: 0}]


def test_a_heartbeat_no_shorter_than_the_session_is_refused_at_load():
    """The fence fires after (session.timeout.ms - heartbeat.interval.ms) without running. With
    a heartbeat as long as the session (librdkafka accepts it) that is 0 s: every loop drops
    everything in flight uncounted and re-reads from the committed offsets, so the flow never
    commits again and re-mirrors what landed at every commit interval."""
    from mirror import config
    from mirror.errors import ConfigError

    text = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: [".*"]},
     consumer: {session.timeout.ms: 6000, heartbeat.interval.ms: 6000}}
"""
    with pytest.raises(ConfigError, match=r"flows\[0\]\.consumer\.(session\.timeout\.ms|heartbeat\.interval\.ms)"):
        config.parse(text, env={})


def test_the_confirming_commit_keeps_the_target_topic_tag():
    """The commit that confirms ownership after a freeze rewrites the group's offsets. Without
    the target topic's id in its metadata, a target topic recreated while the mirror is
    stopped goes unnoticed for an idle partition (the assign callback trusts untagged offsets),
    and records mirrored into the deleted topic are never mirrored again."""
    c = Consumer(position=200, committed=0)
    w = frozen_worker(c)
    w.tags.ids["nyc.orders"] = "id-1"
    w.fence.confirm()
    assert c.metadata == [{TP: "target-topic-id=id-1"}]


def test_fence_holds_for_an_expelled_worker_whose_partitions_have_nothing_committed():
    """Nothing committed yet for the frozen worker's partitions (a new flow, the first commit
    interval): nothing to ask the group with, so the fence would end at once, and the zombie reads and
    acknowledges (offset-map rows) for partitions the group has given to another worker until
    its next heartbeat tells it otherwise."""
    c = Consumer(position=200, committed=None, member=False)
    w = frozen_worker(c)
    w.fence.confirm()
    assert w.fence.fenced, "resumed without the group confirming the partitions are still ours"
    c.member = True  # the group kept them with this worker: a tagged 0 confirms, read from the beginning
    w.fence.confirm()
    assert not w.fence.fenced and c.commits == [{TP: 0}] and c.pos[TP] == OFFSET_BEGINNING


class FreezingProducer:
    """The producer a frozen worker was writing with: its queue is full when the process is
    stopped (SIGSTOP lands in the backpressure wait), and time jumps past the session timeout."""

    def __init__(self, now: list[float]) -> None:
        self.now = now
        self.values: list[bytes] = []
        self.frozen = False

    def produce(
        self, topic, value=None, key=None, partition=-1, callback=None, on_delivery=None, timestamp=0, headers=None
    ) -> None:
        if not self.frozen:
            self.frozen = True
            self.now[0] += 30.0  # SIGSTOP ... SIGCONT while waiting for queue room
            raise BufferError("queue full")
        self.values.append(value)

    def poll(self, timeout=0):
        return 0

    def purge(self, **_):
        pass

    def __len__(self) -> int:
        return 1


class Recording(Producer):
    def __init__(self) -> None:
        self.values: list[bytes] = []

    def produce(
        self, topic, value=None, key=None, partition=-1, callback=None, on_delivery=None, timestamp=0, headers=None
    ) -> None:
        self.values.append(value)

    def poll(self, timeout=0):
        return 0


def test_a_fence_inside_the_backpressure_wait_stops_the_batch_read_before_the_freeze():
    """The consumer handed over 100-109 (committed: 100); the worker is stopped while waiting
    for queue room for 100. The fence fires inside `Forwarder.forward` (its poll): it seeks back to 100
    and writes nothing until the group confirms. The rest of the batch read before the freeze
    must not be produced, neither by the old producer (a zombie write) nor by the new ones
    (101-109 acknowledged while 100 is not: their commit would pass 100)."""
    now = [0.0]
    c = Consumer(position=110, committed=100)
    old = FreezingProducer(now)
    fresh = Recording()
    made = iter([old])
    w, part = worker_and_partition(c, producer=lambda: next(made, fresh), clock=lambda: now[0])
    w.fence.fence_after = 8.0
    w.fence.awake()
    w.forwarder.forward([Msg(o) for o in range(100, 110)])
    assert w.fence.fenced and c.pos[TP] == 100
    assert (old.values, fresh.values) == ([], []), (
        f"produced after the fence: old producer {old.values}, new {fresh.values}"
    )


def test_a_fence_inside_a_revoke_drain_commits_nothing_whose_rows_it_dropped():
    """`_on_revoke` holds the partitions' state from before its drain; a fence fired by the
    drain's poll drops their unemitted acknowledgements (offset-map rows for 0-99) and the
    revoke then commits from that state: 100, past rows never stored (invariant 1)."""
    c = Consumer(position=200, committed=0)
    now = [0.0]
    w, part = worker_and_partition(c, clock=lambda: now[0])
    w.fence.fence_after = 8.0
    acked = segment(part, [0, 1, 2, 5, 6])  # 3-4: a transaction marker and an abort: a delta change
    w.reports.on_segment_start(part, acked, None, Report(0))
    w.reports.on_segment_end(part, acked, None, Report(4))
    segment(part, list(range(7, 200)))  # in flight
    old = w.ledger.parts[TP]  # what a revoke holds while it drains
    w.fence.awake()
    now[0] += 30.0
    assert w.fence.check()
    positions = w.committer.positions({TP: old})
    assert positions.get(TP, 0) <= 0, (
        f"would commit {positions[TP]} though the rows of 0-6 (delta change at 5) were dropped"
    )


class ChunkedGroup:
    """The group as a fenced worker's asking commit meets it: the chunks numbered in
    `refuse` are refused (UNKNOWN_MEMBER_ID: not a member of the current generation), the
    others accepted."""

    def __init__(self, refuse: set[int]) -> None:
        self.refuse, self.chunk = refuse, 0
        self.accepted: dict[tuple[str, int], int] = {}

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.chunk += 1
        if self.chunk in self.refuse:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
        self.accepted.update({(tp.topic, tp.partition): tp.offset for tp in offsets})

    # what the fence reads and does before it asks: the group's committed offset is 3 everywhere
    def committed(self, tps: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 3) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        pass

    def assignment(self) -> list[TopicPartition]:
        return []

    def pause(self, tps: list[TopicPartition]) -> None:
        pass

    def resume(self, tps: list[TopicPartition]) -> None:
        pass

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 3) for tp in tps]


@pytest.mark.parametrize("refuse", [{1}, {2}])
def test_a_fenced_worker_resumes_only_once_every_chunk_of_its_asking_commit_is_accepted(refuse: set[int]):
    """The commit that asks the group whether the partitions are still
    this worker's, in two chunks. Either refused: still fenced (reading stays paused), and
    it asks again; resumed only once all of it is accepted."""
    now = [0.0]
    group = ChunkedGroup(refuse)
    w = opened(group, producer=Producer, clock=lambda: now[0])
    keys = [("orders", p) for p in range(OFFSETS_CHUNK + 1)]
    for k in keys:
        part = w.ledger.assign(k, w.assignment.new_partition(route(w.flow, *k)))
    segment(part, [0])  # in flight at the freeze
    w.fence.fence_after = 8.0
    w.fence.awake()
    now[0] += 30.0
    assert w.fence.check()
    w.fence.confirm()
    assert w.fence.fenced, "resumed though the group refused part of the asking commit"
    group.refuse = set()
    w.fence.confirm()
    assert not w.fence.fenced and group.accepted == dict.fromkeys(keys, 3)


def test_the_commit_that_confirms_a_fenced_worker_never_names_partitions_revoked_meanwhile():
    """frozen past the session timeout but not expelled, a worker is fenced and
    asks the group with a commit of every partition it had. An eager rebalance (another
    worker joins) revokes all of them and hands one back; the other's new owner commits its
    progress. The asking commit, made as a member of the new generation, is accepted for
    every partition named (a group does not check ownership): it moved the other owner's
    offset back, and a next handover re-mirrors what was already mirrored."""
    eager = TEXT.replace(
        "commit_interval: 1s}", "commit_interval: 1s, consumer: {partition.assignment.strategy: roundrobin}}"
    )
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

    worker, consumer, target = make(
        [batch(P0, range(3)) + batch(P1, range(2)), [], [], [], [], freeze, [], [], [], [], rebalance] + [[]] * 12,
        text=eager,
    )
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
