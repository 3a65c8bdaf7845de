"""Loss and duplicate paths of the native engine's exactly_once (review of issue 24).

Each test drives a real `FlowWorker` with exactly_once on against an in-memory
transactional target (`eos_fakes.TxnTarget`) and checks what a read_committed consumer of
the target would read: every source record once, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from mirror.domain.acks import AckBatch, AckListener
from mirror.kafka import KafkaError, KafkaException, TopicPartition
from mirror.kafka.progress import Progress
from tests.unit.engine.eos_fakes import EOS_TEXT, FENCED, Entry, StartingConsumer, TxnTarget, make_eos
from tests.unit.engine.fakes import P0, P1, FakeAdmin, FakeConsumer, Msg, batch

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


def test_baseline_copy_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sanity of the fakes: no fault, every record once and the progress at the end."""
    worker, consumer, target = make_eos(monkeypatch, [read(P0, 10), read(P1, 5), read(P0, 20), read(P1, 8)])
    worker.run()
    exactly_once(target, P0, 20)
    exactly_once(target, P1, 8)
    assert target.progress[("nyc.orders", 0)].next_offset == 20


def test_resync_does_not_lose_the_open_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resync (a partition added to the target that the producer's metadata does not show
    yet, or a target topic recreated) renews the pool: the new incarnation fences the old
    transactional.id, which aborts the open transaction with its acknowledged records. The
    resync then commits `acked_next` (past those aborted records) as progress and seeks the
    consumer there: the records are lost on the target."""
    holder: dict[str, Any] = {}

    def resync(consumer: FakeConsumer) -> list[Msg]:
        holder["worker"].watch._resync.run(set(), set())
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
        holder["worker"].watch._resync.run(set(), set())
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
        holder["worker"].watch._resync.run(set(), set())
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


def test_cooperative_revoke_with_an_open_transaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """P1 revoked while the transaction holds records of both: P1 handed over (released at
    its end), P0 kept and copied on; each once."""

    def revoke(consumer: FakeConsumer) -> list[Msg]:
        consumer.revoke([P1])
        return []

    worker, consumer, target = make_eos(monkeypatch, [read(P0, 10), read(P1, 5), revoke, read(P0, 15)], text=SLOW)
    worker.run()
    exactly_once(target, P0, 15)
    exactly_once(target, P1, 5)
    assert target.progress[("nyc.orders", 1)].next_offset == 5
    assert target.progress[("nyc.orders", 1)].writer_id is None  # released: nobody to fence


def test_failed_record_aborts_and_copies_again_from_the_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record failing (not refused) dooms the transaction: aborted at the tick, every
    partition read again from the committed progress; each record once."""
    target = TxnTarget()
    failed = fail_once(target, P0, 13)
    script = [read(P0, 10), read(P1, 5)] + [read(P0, 20), read(P1, 8)] * 30
    worker, consumer, target = make_eos(monkeypatch, script, target=target)
    worker.run()
    assert failed
    exactly_once(target, P0, 20)
    exactly_once(target, P1, 8)


@pytest.mark.parametrize("ticks", [0, 8], ids=["lost-before-its-tick", "ticks-while-still-in-the-group"])
def test_zombie_fenced_by_the_new_owner_commits_nothing(monkeypatch: pytest.MonkeyPatch, ticks: int) -> None:
    """W1 holds a transaction open (records of both partitions) and freezes past its session
    timeout; W2 is given both partitions, fences W1 (its transaction aborted), copies and
    hands over. W1 wakes, produces what it had prefetched, learns from the group that it lost
    the partitions: nothing of W1's after the fence is visible, nothing lost."""
    target = TxnTarget()
    holder: dict[str, Any] = {}

    def freeze(consumer: FakeConsumer) -> list[Msg]:
        w2, _, _ = make_eos(monkeypatch, [read(P0, 20), read(P1, 8)], target=target)
        w2.run()
        holder["w2"] = w2
        return []

    def kicked(consumer: FakeConsumer) -> list[Msg]:
        def refuse(**kwargs: Any) -> None:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))

        consumer.commit = refuse  # type: ignore[method-assign]  # no longer a member
        consumer.callbacks["lost"](consumer, [TopicPartition(t, p) for t, p in (P0, P1)])
        return []

    script = [read(P0, 10), read(P1, 5), freeze, batch(P0, range(10, 15))] + [[]] * ticks + [kicked]
    w1, _, _ = make_eos(monkeypatch, script, target=target, text=EOS_TEXT if ticks else SLOW)
    holder["w1"] = w1
    w1.run()
    assert w1.pool.writer_id is None or w1.pool.writer_id not in {e.tid for e in target.logs[P0] if e.src is not None}
    exactly_once(target, P0, 20)
    exactly_once(target, P1, 8)


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
        holder["worker"].watch._resync.run({P0}, set())
        return []

    script = [read(P0, 10)] + [[]] * 8 + [recreate] + [read(P0, 15)] * 30
    worker, consumer, target = make_eos(monkeypatch, script, target=target)
    holder["worker"] = worker
    worker.run()
    assert failed
    exactly_once(target, P0, 15)


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
        holder["worker"].watch._resync.run(set(), set())
        return read(P0, 20)(consumer)  # before the next commit interval

    script = [read(P0, 10)] + [[]] * 8 + [resync] + [read(P0, 20)] * 30
    worker, consumer, target = make_eos(monkeypatch, script, target=target)
    holder["worker"] = worker
    worker.run()
    assert failed
    exactly_once(target, P0, 20)


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


def test_a_fenced_flush_failing_with_any_error_claims_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zombie's flush raises its fatal error while delivery callbacks run with it pending:
    confluent-kafka then surfaced it as an AttributeError from a callback (seen in
    test_a_frozen_worker_cannot_commit_after_its_partitions_moved). The flow must not crash:
    the transaction is dropped and the partitions claimed again."""
    holder: dict[str, Any] = {}

    def fenced_flush(consumer: FakeConsumer) -> list[Msg]:
        producer = holder["worker"].pool.for_topic(None)
        target.fence(producer.tid)  # another owner took the id

        def flush(timeout: float = 0) -> int:
            raise AttributeError("'AssignedPartition' object has no attribute 'settled'")

        producer.flush = flush
        return read(P0, 15)(consumer)

    worker, consumer, target = make_eos(
        monkeypatch, [read(P0, 10)] + [[]] * 8 + [fenced_flush] + [[]] * 8 + [read(P0, 20)] * 30
    )
    holder["worker"] = worker
    worker.run()
    exactly_once(target, P0, 20)


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


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "aborted"])
def test_a_transaction_of_unknown_outcome_counts_once_the_claim_reads_it_committed(
    monkeypatch: pytest.MonkeyPatch, committed: bool
) -> None:
    """The commit of the transaction holding P0's 10..14 fails fenced (or never returns) after
    the target committed it, or before: the worker holds and claims again, and the claim's
    stable read settles the outcome. Committed, its records' rows and counts are handed on then,
    once (dropped, translation of a group there errs to an older row: duplicates after a
    failover); aborted, they never are, and the records are copied again."""
    holder: dict[str, Any] = {}
    target = TxnTarget()
    rows = Rows(target)

    def lost_answer(consumer: FakeConsumer) -> list[Msg]:
        producer = holder["worker"].pool.for_topic(None)
        commit = producer.commit_transaction

        def commit_then_fail(timeout: float = 0) -> None:
            producer.commit_transaction = commit
            if committed:
                commit(timeout)
            raise KafkaException(FENCED)

        producer.commit_transaction = commit_then_fail
        return read(P0, 15)(consumer)

    script = [read(P0, 10)] + [[]] * 8 + [lost_answer] + [[]] * 8 + [read(P0, 20)] * 30
    worker, consumer, target = make_eos(monkeypatch, script, target=target, listeners=(rows,))
    holder["worker"] = worker
    worker.run()
    exactly_once(target, P0, 20)
    assert not rows.early, rows.early
    assert (rows.offsets[0], worker.records_acked) == (list(range(20)), 20)
