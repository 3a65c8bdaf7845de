"""Exactly-once claims (engine/claims.py): where a worker resumes a partition it was given.

The progress on the target against the source group's offsets, recreated source and target
topics, and a group whose offsets cannot be read; checked as a read_committed consumer of
the in-memory transactional target (`eos_fakes.TxnTarget`) would see it.
"""

from __future__ import annotations

import pytest

from mirror.kafka import KafkaError, KafkaException, TopicPartition
from mirror.kafka.progress import Progress
from tests.unit.engine.eos_fakes import Entry, StartingConsumer, TxnTarget, make_eos
from tests.unit.engine.eos_steps import AppPositionConsumer, exactly_once, read
from tests.unit.engine.expired_source import LOW, ExpiredHeadAdmin, ExpiredHeadConsumer, Heard, read_from_low
from tests.unit.engine.fakes import P0, P1, FakeAdmin


def test_stale_source_commit_does_not_empty_a_partition_the_progress_resumes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The target topic was recreated; its new incarnation holds 0..49 of P0, committed with
    progress 50 by a worker SIGKILLed before its source commit, so the source group's offset
    still names the deleted incarnation's topic id. The next owner's `_stale_commits` empties
    the target partition (delete_records to its end) and would restart from the source's
    beginning, but the claim resumes at the progress (50): 0..49 are gone from the target."""
    target = TxnTarget()
    target.logs[P0] = [Entry(o, "mirror.p.dead", "committed") for o in range(50)] + [Entry(None, "x", "marker")]
    target.progress[("nyc.orders", 0)] = Progress(50, "mirror.p.dead")

    class StaleGroup(StartingConsumer):
        def committed(self, tps: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
            got = super().committed(tps, timeout)
            return [
                TopicPartition(tp.topic, tp.partition, 10, "target-topic-id=id-deleted")
                if (tp.topic, tp.partition) == P0 and tp.offset < 0
                else tp
                for tp in got
            ]

    class EmptyingAdmin(FakeAdmin):
        def delete_records(self, ends: dict[tuple[str, int], int]) -> None:
            for _topic, partition in ends:  # the target topic's partition n mirrors source partition n
                for e in target.logs.get(("orders", partition), []):
                    e.state = "deleted"

    worker, consumer, target = make_eos(
        monkeypatch, [read(P0, 60)], target=target, consumer_cls=StaleGroup, admin_cls=EmptyingAdmin
    )
    worker.run()
    exactly_once(target, P0, 60)


def test_unreadable_source_offsets_fail_the_first_claim_not_start_at_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """First exactly-once run of a flow whose at-least-once run copied 0..4 (source group at
    5): the group's offsets cannot be read while the partitions are claimed (its coordinator
    away). Starting at 0 and recording that as progress would copy the whole retention again;
    the claim must fail and be retried until the group's offset is known."""
    target = TxnTarget()
    for tp in (P0, P1):
        target.logs[tp] = [Entry(o, "at-least-once", "committed") for o in range(5)]

    class AwayGroup(StartingConsumer):
        failing = 3

        def committed(self, tps: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
            if self.failing > 0:
                self.failing -= 1
                raise KafkaException(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE))
            got = super().committed(tps, timeout)
            return [TopicPartition(tp.topic, tp.partition, 5) if tp.offset < 0 else tp for tp in got]

    script = [[]] * 6 + [read(P0, 10), read(P1, 8)] + [[]] * 4
    worker, consumer, target = make_eos(monkeypatch, script, target=target, consumer_cls=AwayGroup)
    worker.run()
    exactly_once(target, P0, 10)
    exactly_once(target, P1, 8)


def test_recreated_source_topic_is_copied_from_its_beginning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SOURCE topic was deleted and created again: the progress on the target (50, written
    while copying the old incarnation, whose id it names) must not be resumed, or the new
    topic's records below 50 are never copied."""
    target = TxnTarget()
    target.logs[P0] = [Entry(o, "mirror.p.old", "committed") for o in range(50)] + [Entry(None, "x", "marker")]
    target.progress[("nyc.orders", 0)] = Progress(50, "mirror.p.old", "id-deleted-orders")
    worker, consumer, target = make_eos(monkeypatch, [read(P0, 10)], target=target)
    worker.run()
    assert target.visible(P0)[50:] == list(range(10))
    assert target.progress[("nyc.orders", 0)].next_offset == 10
    assert target.progress[("nyc.orders", 0)].source_id == "id-orders"  # the topic it copied


def test_a_claim_at_the_end_brings_the_source_group_up_to_the_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker SIGKILLed after a partition's last transaction committed on the target but
    before its source-group commit: the progress is at the end (10), the group behind (4).
    The next owner resumes at the progress and reads nothing more of that partition, so the
    consumer never reports a position there: the group must still reach the progress, or lag
    stays above 0 and `--until-caught-up` never ends."""
    target = TxnTarget()
    target.logs[P0] = [Entry(o, "mirror.p.dead", "committed") for o in range(10)] + [Entry(None, "x", "marker")]
    target.progress[("nyc.orders", 0)] = Progress(10, "mirror.p.dead")
    idle = [lambda c: []] * 6
    worker, consumer, target = make_eos(
        monkeypatch, [*idle, read(P1, 5), *idle], target=target, consumer_cls=AppPositionConsumer
    )
    consumer.commits.append({P0: 4})
    worker.run()
    exactly_once(target, P0, 10)
    exactly_once(target, P1, 5)
    assert (consumer.last_commit(P0), consumer.last_commit(P1)) == (10, 5)
    assert not consumer.unsafe, consumer.unsafe


def test_a_claim_never_moves_the_source_group_back_to_the_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """A source group ahead of the progress (at-least-once ran after an exactly-once run)
    keeps its offset: the copy resumes at the progress, the group is not rewound."""
    target = TxnTarget()
    target.logs[P0] = [Entry(o, "mirror.p.dead", "committed") for o in range(10)] + [Entry(None, "x", "marker")]
    target.progress[("nyc.orders", 0)] = Progress(10, "mirror.p.dead")
    worker, consumer, target = make_eos(
        monkeypatch, [lambda c: []] * 6, target=target, consumer_cls=AppPositionConsumer
    )
    consumer.commits.append({P0: 12})
    worker.run()
    assert [c[P0] for c in consumer.commits if P0 in c] == [12]


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
        [[], read_from_low(P0, LOW + 10), read_from_low(P1, LOW + 10)],
        consumer_cls=ExpiredHeadConsumer,
        admin_cls=ExpiredHeadAdmin,
        listeners=(heard,),
    )
    worker.run()
    assert heard.gaps == [], [g.describe() for g in heard.gaps]
