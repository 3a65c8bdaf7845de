"""Assignment: partitions taken on, handed over and lost, under eager and cooperative assignors,
and where a partition starts when its target topic was created or recreated."""

from __future__ import annotations

from typing import Any

from mirror.domain.route import route
from mirror.engine.assignment import UNREAD
from mirror.engine.worker import FlowWorker
from mirror.kafka import OFFSET_BEGINNING, TopicPartition
from tests.unit.engine.fakes import P0, P1, TEXT, FakeAdmin, FakeConsumer, FakeProducer, Msg, Target, batch, opened, run

TP = P0


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

    worker, consumer, _ = run(
        [batch(P0, range(3)), batch(P0, range(3, 8)), revoke, batch(P1, range(2)), []], target=target
    )
    assert handed_over == [8] and P0 not in consumer.assigned
    assert consumer.last_commit(P0) == 8 and consumer.last_commit(P1) == 2


def test_an_eager_assignor_gets_whole_assignments_and_whole_revocations():
    """roundrobin/range (allowed for large flows: librdkafka's cooperative-sticky takes tens of
    seconds at 10,000 partitions) speak the eager protocol: assign/unassign, never the
    incremental calls, which librdkafka refuses under that protocol."""
    eager = TEXT.replace(
        "commit_interval: 1s}", "commit_interval: 1s, consumer: {partition.assignment.strategy: roundrobin}}"
    )

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
    """an eager revoke takes every partition, so it drops every pending record
    (read, not yet produced: the producer's queue was full) while reading was paused for
    them. The whole assignment that follows is paused too (`_paused`), and nothing was
    left pending whose production would resume reading: the flow read nothing ever again."""
    eager = TEXT.replace(
        "commit_interval: 1s}", "commit_interval: 1s, consumer: {partition.assignment.strategy: roundrobin}}"
    )
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

    worker, consumer, target = run(
        [batch(P0, range(10)), rebalance, [], [], look, reread, [], []], target=target, capacity=5, text=eager
    )
    assert paused_after == [set()], paused_after
    assert target.stored[P0] == list(range(10)) and consumer.last_commit(P0) == 10, (target.stored, consumer.commits)


def test_records_an_eager_revoke_gave_up_on_never_land_after_the_new_owner_started():
    """a revoke waits DRAIN_TIMEOUT for its partitions' acknowledgements, then
    commits what was acknowledged and hands them over; what was still queued stayed in the
    producer and reached the target later, after (or among) the new owner's copies of the
    same records: duplicates out of order in one partition. Likely since the producer holds
    records for a just-created topic it cannot see yet for up to 300 s (not 30 s), and
    workers joining one by one make eager rebalances while they wait. An eager revoke takes
    every partition, so it can drop the whole producer's queue."""
    eager = TEXT.replace(
        "commit_interval: 1s}", "commit_interval: 1s, consumer: {partition.assignment.strategy: roundrobin}}"
    )
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

    worker, consumer, target = run(
        [batch(P0, range(3)) + batch(P1, range(2)), [], [], [], stall, rebalance] + [[]] * 6, target=target, text=eager
    )
    assert consumer.last_commit(P0) == 3, consumer.commits
    assert target.stored[P0] == list(range(10)), f"late copies after the new owner's: {target.stored[P0]}"


def test_records_still_queued_when_every_partition_is_lost_never_land_after_the_new_owner_started():
    """The same for a lost assignment (the member missed its heartbeats or its poll interval:
    librdkafka's cooperative-sticky assignor at 10,000 partitions did that): the group gave
    the partitions away already, so whatever is still queued would land among the new
    owner's copies."""
    eager = TEXT.replace(
        "commit_interval: 1s}", "commit_interval: 1s, consumer: {partition.assignment.strategy: roundrobin}}"
    )
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

    worker, consumer, target = run(
        [batch(P0, range(3)) + batch(P1, range(2)), [], [], [], stall, lost] + [[]] * 6, target=target, text=eager
    )
    assert target.stored[P0] == list(range(10)), f"late copies after the new owner's: {target.stored[P0]}"


def test_the_assignor_is_recognised_as_librdkafka_reads_it():
    """the config accepts an assignor name with spaces around it (quoted YAML) and
    librdkafka trims them, so "cooperative-sticky " is the cooperative protocol: the worker
    took it for an eager one, and librdkafka refuses assign() under that protocol."""
    spaced = TEXT.replace(
        "commit_interval: 1s}",
        'commit_interval: 1s, consumer: {partition.assignment.strategy: " cooperative-sticky "}}',
    )
    worker, consumer, target = run([batch(P0, range(3))], text=spaced)
    assert consumer.calls == ["incremental_assign"], consumer.calls


class Group:
    """The source group as the consumer sees it in the assign callback: another worker committed 500
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


class Ids(FakeAdmin):
    """The target: its topic has id id-1 now."""

    def __init__(self) -> None:
        super().__init__({})

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
    w, g, resets = assigning(Group, tag="id-1")
    w.assignment.created[TP] = UNREAD
    w.assignment.on_assign(g, [TopicPartition(*TP)])
    assert (g.assigned, resets.reset, g.commits) == ([(*TP, -1001)], [], []), "re-mirrored from the beginning"


def assigning(group_cls: type, tag: str = "id-0") -> tuple[FlowWorker, Any, Resets]:
    """An opened worker with no partitions yet, about to be assigned TP by a group whose
    commit is tagged `tag`."""
    g, resets = group_cls(tag=tag), Resets()
    w = opened(g, producer=lambda: FakeProducer(Target(), 100), admin=Ids(), listeners=[resets])
    return w, g, resets


def test_a_partition_committed_into_an_earlier_incarnation_still_starts_over_at_the_creator():
    """The contrast: the group's offset was committed into the deleted topic (old id): the
    new, empty topic must receive everything the source holds."""
    w, g, resets = assigning(Group)
    w.assignment.created[TP] = UNREAD
    w.assignment.on_assign(g, [TopicPartition(*TP)])
    assert (g.assigned, resets.reset, g.commits) == ([(*TP, OFFSET_BEGINNING)], [TP], [(*TP, 0)])


class TaggedGroup(Group):
    def commit(self, offsets=None, asynchronous=True):
        self.commits += [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in offsets]


def test_commits_into_a_recreated_target_are_tagged_with_its_new_id_before_the_next_refresh():
    """the target topic was deleted and created again (id-0 -> id-1) and this
    worker's refresh has not looked since (its commit tags still say id-0). A partition
    assigned now (under an eager assignor: every partition, at every rebalance) sees the
    new id when it reads the group's offsets and starts over into the new topic, but its commits (the
    rewind to 0 first) were tagged id-0: the next owner (this worker again, at the next
    eager rebalance) takes them for commits into the deleted topic, empties the partition
    once more and mirrors it again from the source's beginning (which may have dropped
    records since: those are then on neither side)."""
    w, g, resets = assigning(TaggedGroup)
    target = route(w.flow, *TP).target_topic
    w.tags.ids[target] = "id-0"  # as this worker last saw it
    w.assignment.on_assign(g, [TopicPartition(*TP)])
    assert resets.reset == [TP] and g.assigned == [(*TP, OFFSET_BEGINNING)]
    assert g.commits == [(*TP, 0, "target-topic-id=id-1")], g.commits
    assert w.tags.offset(TP, 7).metadata == "target-topic-id=id-1"
