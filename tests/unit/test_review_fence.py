"""Review of issue 10 point 4 (zombie fencing): the fence after a freeze must never let the
worker read on past records it dropped unacknowledged, nor resume without the group saying
the partitions are still its own. Pure engine logic: a stand-in consumer that answers like
librdkafka (position = next offset to hand over; seek moves it), no cluster."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from mirror import config
from mirror.domain.ledger import Segment
from mirror.domain.route import route
from mirror.engine.assignment import UNREAD, Partition
from mirror.engine.worker import FlowWorker
from mirror.kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from tests.unit.test_worker_commits import Msg as WorkerMsg
from tests.unit.test_worker_commits import Report

TP = ("orders", 0)
TEXT = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: [".*"]}}
"""


def Msg(offset: int) -> WorkerMsg:
    """A consumed record of orders[0]."""
    return WorkerMsg(TP, offset)


def worker_and_partition() -> tuple[FlowWorker, Partition]:
    """A worker (no clients made) that holds orders[0]."""
    cfg = config.parse(TEXT, env={})
    w = FlowWorker(cfg, cfg.flows[0], stop=threading.Event())
    st = w._ledger.assign(TP, Partition(route(cfg.flows[0], *TP)))
    return w, st


def segment(st: Partition, offsets: list[int]) -> Segment:
    """A run of records produced together, in flight."""
    seg = Segment(offsets[0])
    for o in offsets:
        seg.add(o, 10, 1000 + o)
    st.begin(seg)
    return seg


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
        return [TopicPartition(tp.topic, tp.partition, -1001 if self._committed is None else self._committed) for tp in tps]

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

    def __len__(self) -> int:
        return 0


def frozen_worker(consumer: Consumer):
    """A worker that handed over source records 0-199: 0-99 acknowledged (not committed yet),
    100-199 in flight when the process was stopped past its session timeout."""
    now = [0.0]
    w, st = worker_and_partition()
    w.clock = lambda: now[0]
    w._consumer = consumer
    w._fence_after = 8.0
    w._producer_for = lambda topic: Producer()  # type: ignore[method-assign]
    w._producers = {1: Producer()}
    first = segment(st, list(range(100)))
    w._on_segment_start(st, first, None, Report(0))
    w._on_segment_end(st, first, None, Report(99))
    segment(st, list(range(100, 200)))  # in flight: never acknowledged, purged by the fence
    w._tick = now[0]
    now[0] += 30.0  # SIGSTOP ... SIGCONT
    assert w._check_frozen()
    return w




def test_fence_never_reads_on_past_dropped_records_of_a_partition_nothing_was_committed_for():
    """A new group (or a partition whose first commit is still to come): nothing committed.
    The fence drops 100-199 uncounted; reading must start again at or before 100, or 100-199
    (purged, maybe never written) are skipped and the next acknowledged record commits past them."""
    c = Consumer(position=200, committed=None)
    w = frozen_worker(c)
    w._confirm_owner()
    nxt = c.pos[TP]
    assert nxt == OFFSET_BEGINNING or 0 <= nxt <= 100, f"after the fence the worker reads on from {nxt}: source records 100-{nxt - 1} were dropped unacknowledged"


def test_fence_holds_while_the_committed_offsets_cannot_be_read():
    """The committed offsets cannot be read right after the freeze (coordinator away): the
    fence must not resume reading before the group confirmed the assignment, and never from
    past the dropped records."""
    c = Consumer(position=200, committed=0, member=False, readable=False)
    w = frozen_worker(c)
    w._confirm_owner()  # still unreadable, and the group moved on: a commit as this member fails
    assert w._fenced is not None, "reading resumed without the group confirming the partitions are still ours"
    c.readable = True
    w._confirm_owner()  # readable now, but still not a member: the fence holds
    assert w._fenced is not None
    c.member = True
    w._confirm_owner()
    assert w._fenced is None and c.commits == [{TP: 0}]
    nxt = c.pos[TP]
    assert nxt == OFFSET_BEGINNING or 0 <= nxt <= 100, f"reads on from {nxt}, past records dropped unacknowledged"


def test_fence_with_known_committed_offsets_rereads_from_them():
    """The fixed path, for contrast: committed offset 0, still a member -> confirmed, re-read from 0."""
    c = Consumer(position=200, committed=0)
    w = frozen_worker(c)
    w._confirm_owner()
    assert w._fenced is None and c.pos[TP] == 0 and c.commits == [{TP: 0}]


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
  - {name: p, source: nyc, target: sf, topics: {include: [".*"]}, consumer: {session.timeout.ms: 6000, heartbeat.interval.ms: 6000}}
"""
    with pytest.raises(ConfigError, match=r"flows\[0\]\.consumer\.(session\.timeout\.ms|heartbeat\.interval\.ms)"):
        config.parse(text, env={})



def test_a_segment_whose_first_report_has_no_offset_never_translates_past_its_records():
    """Issue 10 point 10: a DUPLICATE_SEQUENCE_NUMBER "success" (offset -1) on a segment's
    first report, an exact offset on its last (the segment spanned two batches, the first
    one retried). Source 5 is a transaction marker: 3, 4, 6, 7 landed at 53-56. A group that
    read up to 5 must resume at or before 55 (record 6's copy)."""
    from mirror.domain.offsetmap import OffsetSync, translate

    w, st = worker_and_partition()
    first = segment(st, [0, 1, 2])
    w._on_segment_start(st, first, None, Report(50))
    w._on_segment_end(st, first, None, Report(52))
    seg = segment(st, [3, 4, 6, 7])
    w._on_segment_start(st, seg, None, Report(-1))
    w._on_segment_end(st, seg, None, Report(56))
    rows = [OffsetSync("orders", 0, s, t) for s, t in st.batch.syncs]
    copies = {0: 50, 1: 51, 2: 52, 3: 53, 4: 54, 6: 55, 7: 56}
    for pos in range(0, 9):
        first_unread = min((t for s, t in copies.items() if s >= pos), default=57)
        got = translate(rows, pos, 57).target_offset
        assert got <= first_unread, f"position {pos} translates to {got}, past the copy of a record the group has not read ({first_unread}); rows {st.batch.syncs}"


def test_the_confirming_commit_keeps_the_target_topic_tag():
    """The commit that confirms ownership after a freeze rewrites the group's offsets. Without
    the target topic's id in its metadata, a target topic recreated while the mirror is
    stopped goes unnoticed for an idle partition (`_stale_commits` trusts untagged offsets),
    and records mirrored into the deleted topic are never mirrored again."""
    c = Consumer(position=200, committed=0)
    w = frozen_worker(c)
    w._target_ids = {"nyc.orders": "id-1"}
    w._confirm_owner()
    assert c.metadata == [{TP: "target-topic-id=id-1"}]


def test_fence_holds_for_an_expelled_worker_whose_partitions_have_nothing_committed():
    """Nothing committed yet for the frozen worker's partitions (a new flow, the first commit
    interval): `_fenced` is empty, so `_confirm_owner` resumes at once, and the zombie reads and
    acknowledges (offset-map rows) for partitions the group has given to another worker until
    its next heartbeat tells it otherwise."""
    c = Consumer(position=200, committed=None, member=False)
    w = frozen_worker(c)
    w._confirm_owner()
    assert w._fenced is not None, "resumed without the group confirming the partitions are still ours"
    c.member = True  # the group kept them with this worker: a tagged 0 confirms, read from the beginning
    w._confirm_owner()
    assert w._fenced is None and c.commits == [{TP: 0}] and c.pos[TP] == OFFSET_BEGINNING


class FreezingProducer:
    """The producer a frozen worker was writing with: its queue is full when the process is
    stopped (SIGSTOP lands in the backpressure wait), and time jumps past the session timeout."""

    def __init__(self, now: list[float]) -> None:
        self.now = now
        self.values: list[bytes] = []
        self.frozen = False

    def produce(self, topic, value=None, key=None, partition=-1, callback=None, on_delivery=None, timestamp=0, headers=None) -> None:
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

    def produce(self, topic, value=None, key=None, partition=-1, callback=None, on_delivery=None, timestamp=0, headers=None) -> None:
        self.values.append(value)

    def poll(self, timeout=0):
        return 0


def test_a_fence_inside_the_backpressure_wait_stops_the_batch_read_before_the_freeze():
    """The consumer handed over 100-109 (committed: 100); the worker is stopped while waiting
    for queue room for 100. The fence fires inside `_forward` (its poll): it seeks back to 100
    and writes nothing until the group confirms. The rest of the batch read before the freeze
    must not be produced, neither by the old producer (a zombie write) nor by the new ones
    (101-109 acknowledged while 100 is not: their commit would pass 100)."""
    now = [0.0]
    c = Consumer(position=110, committed=100)
    w, st = worker_and_partition()
    w.clock = lambda: now[0]
    w._consumer = c
    w._fence_after = 8.0
    old = FreezingProducer(now)
    fresh = Recording()
    st.producer = w._producer = old
    w._producers = {1: old}
    w._producer_for = lambda topic: fresh  # type: ignore[method-assign]
    w._tick = now[0]
    w._forward([Msg(o) for o in range(100, 110)])
    assert w._fenced is not None and c.pos[TP] == 100
    assert (old.values, fresh.values) == ([], []), f"produced after the fence: old producer {old.values}, new {fresh.values}"


def test_a_fence_inside_a_revoke_drain_commits_nothing_whose_rows_it_dropped():
    """`_on_revoke` holds the partitions' state from before its drain; a fence fired by the
    drain's poll drops their unemitted acknowledgements (offset-map rows for 0-99) and the
    revoke then commits from that state: 100, past rows never stored (invariant 1)."""
    c = Consumer(position=200, committed=0)
    w, st = worker_and_partition()
    now = [0.0]
    w.clock = lambda: now[0]
    w._consumer = c
    w._fence_after = 8.0
    w._producer_for = lambda topic: Producer()  # type: ignore[method-assign]
    w._producers = {1: Producer()}
    acked = segment(st, [0, 1, 2, 5, 6])  # 3-4: a transaction marker and an abort: a delta change
    w._on_segment_start(st, acked, None, Report(0))
    w._on_segment_end(st, acked, None, Report(4))
    segment(st, list(range(7, 200)))  # in flight
    old = w._ledger.parts[TP]  # what `_on_revoke` holds while it drains
    w._tick = now[0]
    now[0] += 30.0
    assert w._check_frozen()
    positions = w._positions({TP: old})
    assert positions.get(TP, 0) <= 0, f"would commit {positions[TP]} though the rows of 0-6 (delta change at 5) were dropped"


class Group:
    """The source group as the consumer sees it in `_on_assign`: another worker committed 500
    into the current target topic (tagged with its id)."""

    def __init__(self, tag: str = "id-1") -> None:
        self.tag = tag
        self.assigned: list = []
        self.commits: list = []

    def committed(self, tps, timeout=None):
        return [TopicPartition(tp.topic, tp.partition, 500, f"target-topic-id={self.tag}") for tp in tps]

    def incremental_assign(self, tps):
        self.assigned += [(tp.topic, tp.partition, tp.offset) for tp in tps]

    def commit(self, offsets=None, asynchronous=True):
        self.commits += [(tp.topic, tp.partition, tp.offset) for tp in offsets]

    def pause(self, tps):
        pass

    def resume(self, tps):
        pass


class Ids:
    def topic_ids(self, topics):
        return dict.fromkeys(topics, "id-1")

    def delete_records(self, ends):
        pass


class Resets:
    def __init__(self) -> None:
        self.reset: list = []

    def on_reset(self, flow, partitions):
        self.reset += list(partitions)


def test_a_partition_another_worker_filled_is_not_remirrored_when_it_moves_to_the_creator():
    """Worker A created the target topic (the new group's offsets could not be read then:
    `UNREAD`); partition 0 went to worker B, which mirrored and committed 500 into that same
    topic. Much later (a freeze, a restart of B) partition 0 moves to A: it must resume at 500,
    not start again from the source's beginning with its offset-map rows deleted and the
    group rewound to 0 (every record mirrored twice; seen on the real clusters in
    test_frozen_worker_is_fenced: rows of both moved partitions gone, 3,000+ duplicates)."""
    w, _st = worker_and_partition()
    w._ledger.parts.clear()
    w._ledger.by_target.clear()
    g, resets = Group(), Resets()
    w._consumer = g
    w.listeners = [resets]
    w._target_admin = Ids()
    w._producer_for = lambda topic: Producer()  # type: ignore[method-assign]
    w._created_at = {TP: UNREAD}
    w._on_assign(g, [TopicPartition(*TP)])
    assert (g.assigned, resets.reset, g.commits) == ([(*TP, -1001)], [], []), "re-mirrored from the beginning"



def assigning(group_cls: type) -> tuple[Any, Any, Any]:
    """A worker with no partitions yet, about to be assigned TP by a group tagged id-0."""
    w, _st = worker_and_partition()
    w._ledger.parts.clear()
    w._ledger.by_target.clear()
    g, resets = group_cls(tag="id-0"), Resets()
    w._consumer = g
    w.listeners = [resets]
    w._target_admin = Ids()
    w._producer_for = lambda topic: Producer()  # type: ignore[method-assign]
    return w, g, resets


def test_a_partition_committed_into_an_earlier_incarnation_still_starts_over_at_the_creator():
    """The contrast: the group's offset was committed into the deleted topic (old id): the
    new, empty topic must receive everything the source holds."""
    w, g, resets = assigning(Group)
    w._created_at = {TP: UNREAD}
    w._on_assign(g, [TopicPartition(*TP)])
    assert (g.assigned, resets.reset, g.commits) == ([(*TP, OFFSET_BEGINNING)], [TP], [(*TP, 0)])


class TaggedGroup(Group):
    def commit(self, offsets=None, asynchronous=True):
        self.commits += [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in offsets]


def test_commits_into_a_recreated_target_are_tagged_with_its_new_id_before_the_next_refresh():
    """Review 19: the target topic was deleted and created again (id-0 -> id-1) and this
    worker's refresh has not looked since (its `_target_ids` still says id-0). A partition
    assigned now (under an eager assignor: every partition, at every rebalance) sees the
    new id in `_stale_commits` and starts over into the new topic, but its commits (the
    rewind to 0 first) were tagged id-0: the next owner (this worker again, at the next
    eager rebalance) takes them for commits into the deleted topic, empties the partition
    once more and mirrors it again from the source's beginning (which may have dropped
    records since: those are then on neither side)."""
    w, g, resets = assigning(TaggedGroup)
    target = route(w.flow, *TP).target_topic
    w._target_ids = {target: "id-0"}  # as this worker last saw it
    w._on_assign(g, [TopicPartition(*TP)])
    assert resets.reset == [TP] and g.assigned == [(*TP, OFFSET_BEGINNING)]
    assert g.commits == [(*TP, 0, "target-topic-id=id-1")], g.commits
    assert w._offset(TP, 7).metadata == "target-topic-id=id-1"
