"""Exactly-once and a resync (engine/resync.py): partitions started over with new producers.

The open transaction, the claims and the progress across a resync and the aborts after it;
checked as a read_committed consumer of the in-memory transactional target
(`eos_fakes.TxnTarget`) would see it.
"""

from __future__ import annotations

from typing import Any

import pytest

from mirror.kafka import KafkaError, KafkaException
from mirror.kafka.progress import Progress
from tests.unit.engine.eos_fakes import Entry, TxnTarget, make_eos
from tests.unit.engine.eos_steps import SLOW, AppPositionConsumer, Rows, exactly_once, fail_once, read
from tests.unit.engine.fakes import P0, P1, FakeConsumer, Msg


def test_resync_does_not_lose_the_open_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resync (a partition added to the target that the producer's metadata does not show
    yet, or a target topic recreated) renews the pool: the new incarnation fences the old
    transactional.id, which aborts the open transaction with its acknowledged records. The
    resync then commits `acked_next` (past those aborted records) as progress and seeks the
    consumer there: the records are lost on the target."""
    holder: dict[str, Any] = {}

    def resync(consumer: FakeConsumer) -> list[Msg]:
        holder["worker"].resync.run(set(), set())
        return []

    target = TxnTarget()
    rows = Rows(target)  # and no offset-map row for a record of the aborted transaction
    worker, consumer, target = make_eos(
        monkeypatch, [read(P0, 10), resync, read(P0, 20)], target=target, text=SLOW, listeners=(rows,)
    )
    holder["worker"] = worker
    worker.run()
    exactly_once(target, P0, 20)
    assert not rows.early, rows.early
    assert (rows.offsets[0], worker.records_acked) == (list(range(20)), 20)


def test_resync_keeps_its_partitions_claimed(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a resync the progress of partitions the worker still writes must name the
    writer (so a new owner fences it): the resync's commit releases them instead (`keep` is
    passed as the revoked set), and the renewed producer's id is never claimed."""
    holder: dict[str, Any] = {}

    def resync(consumer: FakeConsumer) -> list[Msg]:
        holder["worker"].resync.run(set(), set())
        return []

    def check(consumer: FakeConsumer) -> list[Msg]:
        w = holder["worker"]
        writer = w.pool.writer_id
        named = {tp: p.writer_id for tp, p in target.progress.items()}
        holder["named"] = (writer, named)
        return []

    worker, consumer, target = make_eos(monkeypatch, [read(P0, 10), resync, check, read(P0, 12)], text=SLOW)
    holder["worker"] = worker
    worker.run()
    writer, named = holder["named"]
    assert named == {("nyc.orders", 0): writer, ("nyc.orders", 1): writer}


def test_resync_rewinds_idle_partitions_to_the_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resync seeks a partition with nothing acknowledged since its claim to the SOURCE
    group's offset (`Resync._rewind`), not to the target's progress: where the source group
    is behind the progress (its commit comes after the target's and may fail; here an earlier
    source commits fail, the source coordinator being away), records the target already committed are
    copied again in a new transaction: duplicates for read_committed consumers."""
    target = TxnTarget()
    target.logs[P1] = [Entry(o, "mirror.p.old", "committed") for o in range(5)] + [Entry(None, "x", "marker")]
    target.progress[("nyc.orders", 1)] = Progress(5, None)  # released by the earlier run
    holder: dict[str, Any] = {}

    def resync(consumer: FakeConsumer) -> list[Msg]:
        holder["worker"].resync.run(set(), set())
        return []

    worker, consumer, target = make_eos(
        monkeypatch, [read(P0, 10), resync, read(P1, 5), read(P0, 12)], target=target, text=SLOW
    )

    def unavailable(**kwargs: Any) -> None:  # the source group's coordinator away meanwhile
        raise KafkaException(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE))

    consumer.commit = unavailable  # type: ignore[method-assign]
    holder["worker"] = worker
    worker.run()
    exactly_once(target, P1, 5)


def test_abort_after_a_recreated_target_topic_rewinds_to_its_beginning(monkeypatch: pytest.MonkeyPatch) -> None:
    """The target topic is deleted and created again: the resync re-mirrors P0 from the
    source's beginning but keeps P0's old progress (10, the deleted incarnation's) in
    `TransactionalCommitter.progress`. A transaction aborted before the next commit then
    seeks P0 to 10 (`reset`): the new topic never receives records 0..9."""
    target = TxnTarget()
    holder: dict[str, Any] = {}
    failed = fail_once(target, P0, 12, lambda: holder.get("recreated"))

    def recreate(consumer: FakeConsumer) -> list[Msg]:
        assert target.progress[("nyc.orders", 0)].next_offset == 10  # committed before the deletion
        target.logs[P0] = []  # the new, empty incarnation
        holder["recreated"] = True
        holder["worker"].resync.run({P0}, set())
        return []

    script = [read(P0, 10)] + [[]] * 8 + [recreate] + [read(P0, 15)] * 30
    worker, consumer, target = make_eos(monkeypatch, script, target=target)
    holder["worker"] = worker
    worker.run()
    assert failed
    exactly_once(target, P0, 15)


def test_abort_after_a_resync_reads_again_from_the_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resync with nothing in flight releases the partitions it keeps (their progress
    leaves `TransactionalCommitter.progress`); a transaction aborted afterwards then leaves
    them where the consumer is (`reset` seeks only partitions with a progress): the next
    commit's progress skips the aborted records."""
    target = TxnTarget()
    holder: dict[str, Any] = {}
    failed = fail_once(target, P0, 13, lambda: holder.get("resynced"))

    def resync(consumer: FakeConsumer) -> list[Msg]:
        assert target.progress[("nyc.orders", 0)].next_offset == 10  # nothing in flight now
        holder["resynced"] = True
        holder["worker"].resync.run(set(), set())
        return read(P0, 20)(consumer)  # before the next commit interval

    script = [read(P0, 10)] + [[]] * 8 + [resync] + [read(P0, 20)] * 30
    worker, consumer, target = make_eos(monkeypatch, script, target=target)
    holder["worker"] = worker
    worker.run()
    assert failed
    exactly_once(target, P0, 20)


def test_a_resync_drops_the_source_group_catch_up_of_a_restarted_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claimed at its progress (10) with the group behind (4), then its target topic is
    recreated before the group was brought up: the partition restarts at 0 and the group is
    rewound to 0; the old progress must not be committed to the group afterwards (the new
    target topic holds nothing of 0..9)."""
    target = TxnTarget()
    target.logs[P0] = [Entry(o, "mirror.p.dead", "committed") for o in range(10)] + [Entry(None, "x", "marker")]
    target.progress[("nyc.orders", 0)] = Progress(10, "mirror.p.dead")
    holder: dict[str, Any] = {}

    def resync(consumer: FakeConsumer) -> list[Msg]:
        holder["worker"].resync.run({P0}, set())
        return []

    worker, consumer, target = make_eos(
        monkeypatch, [resync, *[lambda c: []] * 6], target=target, consumer_cls=AppPositionConsumer
    )
    holder["worker"] = worker
    consumer.commits.append({P0: 4})
    worker.run()
    assert [c[P0] for c in consumer.commits if P0 in c] == [4, 0]
