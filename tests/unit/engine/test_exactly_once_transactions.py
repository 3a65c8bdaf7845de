"""Exactly-once transactions of the native engine: aborts, fencing and commits of unknown outcome.

Each test drives a real `FlowWorker` with exactly_once on against an in-memory
transactional target (`eos_fakes.TxnTarget`) and checks what a read_committed consumer of
the target would read: every source record once, in order.
"""

from __future__ import annotations

from typing import Any

import pytest

from mirror.kafka import KafkaError, KafkaException, TopicPartition
from tests.unit.engine.eos_fakes import EOS_TEXT, FENCED, TxnTarget, make_eos
from tests.unit.engine.eos_steps import SLOW, Rows, exactly_once, fail_once, read
from tests.unit.engine.fakes import P0, P1, FakeConsumer, Msg, batch


def test_baseline_copy_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sanity of the fakes: no fault, every record once and the progress at the end."""
    worker, consumer, target = make_eos(monkeypatch, [read(P0, 10), read(P1, 5), read(P0, 20), read(P1, 8)])
    worker.run()
    exactly_once(target, P0, 20)
    exactly_once(target, P1, 8)
    assert target.progress[("nyc.orders", 0)].next_offset == 20


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
