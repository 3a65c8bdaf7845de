"""exactly_once on the worker's units, against in-memory fakes of a transactional target.

The fake target keeps every partition's log as a broker does: records take offsets when they
are written, visible (`stored`) only once their transaction commits, and every commit or abort
adds a marker that takes an offset too. The progress group is a dict on the fake target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from mirror.domain.acks import AckBatch
from mirror.errors import AuthorizationFailed
from mirror.kafka import KafkaError, KafkaException
from mirror.kafka.progress import Progress, parse_metadata
from tests.unit.engine.fakes import P0, P1, FakeProducer, Target, batch, make, run

TEXT = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: ["orders"]}, commit_interval: 1s, exactly_once: true}
"""


class TxnTarget(Target):
    def __init__(self) -> None:
        super().__init__()
        self.log: dict[tuple[str, int], list[str]] = {}  # per source partition: "r" record, "m" marker
        self.progress: dict[tuple[str, int], Progress] = {}
        self.fenced: list[str] = []
        self.commits = 0


class TxnProducer(FakeProducer):
    """A transactional producer on `TxnTarget`; `answer` "fail" fails a record, and then
    (as librdkafka) the transaction can only abort."""

    target: TxnTarget

    def __init__(self, target: TxnTarget, capacity: int) -> None:
        super().__init__(target, capacity)
        self.written: list[tuple[tuple[str, int], int]] = []  # this transaction's records
        self.offsets: list[Any] = []

    def init_transactions(self, timeout: float) -> None:
        pass

    def begin_transaction(self) -> None:
        self.written, self.offsets, self.failed = [], [], False

    def write(self, tp: tuple[str, int], offset: int) -> int:
        """Written, not visible: a record takes its offset now, and is stored at the commit."""
        log = self.target.log.setdefault(tp, [])
        log.append("r")
        self.written.append((tp, offset))
        return len(log) - 1

    def send_offsets_to_transaction(self, offsets: list[Any], metadata: Any, timeout: float) -> None:
        self.offsets += offsets

    def _end(self, *, commit: bool) -> None:
        self.flush()
        for tp in {tp for tp, _ in self.written}:
            self.target.log[tp].append("m")
        if commit:
            for tp, offset in self.written:
                self.target.stored.setdefault(tp, []).append(offset)
            for o in self.offsets:
                self.target.progress[(o.topic, o.partition)] = Progress(o.offset, *parse_metadata(o.metadata))
            self.target.commits += 1
        self.written, self.offsets = [], []

    def commit_transaction(self, timeout: float) -> None:
        if self.failed:
            raise KafkaException(KafkaError(KafkaError._STATE, "a record failed", txn_requires_abort=True))
        self._end(commit=True)

    def abort_transaction(self, timeout: float) -> None:
        self._end(commit=False)


class FakeGroup:
    target: TxnTarget

    def __init__(self, cluster_name: str, cluster: Any, group: str) -> None:
        self.group = group

    def metadata(self) -> str:
        return "group-metadata"

    def read(self, partitions: Sequence[tuple[str, int]], timeout: float, *, stable: bool = True) -> dict:
        return {tp: self.target.progress[tp] for tp in partitions if tp in self.target.progress}

    def close(self) -> None:
        pass


class Acks:
    """A listener (the offset map's place) that checks every acknowledgement it is handed is
    of records whose transaction committed."""

    def __init__(self, target: TxnTarget) -> None:
        self.target = target
        self.batches: list[AckBatch] = []
        self.early: list[str] = []

    def on_acked(self, batches: Sequence[AckBatch]) -> None:
        for b in batches:
            visible = set(self.target.stored.get((b.source_topic, b.partition), ()))
            if not set(range(b.first_offset, b.next_offset)) <= visible:
                self.early.append(f"{b.partition}: {b.first_offset}-{b.next_offset} before its commit")
        self.batches += batches

    def before_commit(self, flow: str, positions: Mapping[tuple[str, int], int]) -> None:
        pass

    def on_reset(self, flow: str, partitions: Sequence[tuple[str, int]]) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def target(monkeypatch: pytest.MonkeyPatch) -> TxnTarget:
    t = TxnTarget()
    FakeGroup.target = t
    monkeypatch.setattr("mirror.engine.transactions.ProgressGroup", FakeGroup)
    monkeypatch.setattr("mirror.engine.claims.fence", lambda name, cluster, writer, timeout: t.fenced.append(writer))
    return t


def _progress(target: TxnTarget) -> dict[int, int]:
    return {p: got.next_offset for (topic, p), got in target.progress.items() if topic == "nyc.orders"}


def test_copies_count_only_once_their_transaction_committed(target):
    acks = Acks(target)
    worker, consumer, _ = run(
        [batch(P0, range(10)), batch(P1, range(5)), batch(P0, range(10, 20))],
        target=target,
        producer_cls=TxnProducer,
        text=TEXT,
        listeners=[acks],
    )
    assert not acks.early, acks.early
    assert target.stored[P0] == list(range(20)) and target.stored[P1] == list(range(5))
    assert worker.records_acked == 25 == sum(b.count for b in acks.batches)
    # released on stop: the next owner has nobody to fence
    assert _progress(target) == {0: 20, 1: 5}
    assert all(p.writer_id is None for p in target.progress.values())
    assert consumer.last_commit(P0) == 20 and consumer.last_commit(P1) == 5


def test_a_failed_record_aborts_the_transaction_and_reads_again_from_the_progress(target):
    failed = {(P0, 13)}
    target.answer = lambda tp, o: "fail" if (tp, o) in failed and not failed.discard((tp, o)) else "store"
    acks = Acks(target)
    worker, consumer, _ = run(
        [
            batch(P0, range(10)),
            lambda c: [],  # a tick: 0-9 committed
            lambda c: [],
            lambda c: [],
            lambda c: [],
            batch(P0, range(10, 16)),  # 13 fails: the transaction holding 10-15 aborts
            lambda c: [],
            lambda c: [],
            lambda c: [],
            lambda c: [],
            lambda c: batch(P0, range(c.position_of[P0], 16)),  # read again from the progress
        ],
        target=target,
        producer_cls=TxnProducer,
        text=TEXT,
        listeners=[acks],
    )
    assert not acks.early, acks.early
    assert target.stored[P0] == list(range(16)), "each record once, in order"
    assert worker.records_acked == 16 == sum(b.count for b in acks.batches)
    assert _progress(target)[0] == 16


def test_every_commit_marker_moves_the_offset_map(target):
    acks = Acks(target)
    script: list[Any] = []
    for r in range(3):
        script += [batch(P0, range(r * 5, r * 5 + 5))] + [lambda c: []] * 4
    run(script, target=target, producer_cls=TxnProducer, text=TEXT, listeners=[acks])
    syncs = [s for b in acks.batches if b.partition == 0 for s in b.syncs]
    # transactions of 5 records, each followed by its marker: target - source grows by one each time
    assert syncs == [(0, 0), (5, 6), (10, 12)], syncs
    assert all(target.log[P0][tgt] == "r" for _, tgt in syncs)  # rows point at records, never at markers


class RefusingProducer(TxnProducer):
    """A target where the principal lacks Read on the target topic: the broker refuses every
    TxnOffsetCommit, and librdkafka says the transaction can only abort."""

    def send_offsets_to_transaction(self, offsets: list[Any], metadata: Any, timeout: float) -> None:
        text = "Failed to commit offsets to transaction: nyc.orders((null))[0](Broker: Topic authorization failed)"
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, text, txn_requires_abort=True))

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        super().purge(in_queue, in_flight)  # retired without waiting (`TransactionalPool.retire`)


class ClosableGroup(FakeGroup):
    def __init__(self, cluster_name: str, cluster: Any, group: str) -> None:
        super().__init__(cluster_name, cluster, group)
        self.closed = False

    def read(self, partitions: Sequence[tuple[str, int]], timeout: float, *, stable: bool = True) -> dict:
        if self.closed:
            raise RuntimeError("Consumer closed")  # what confluent-kafka raises
        return super().read(partitions, timeout, stable=stable)

    def close(self) -> None:
        self.closed = True


def test_a_refused_progress_commit_stops_the_flow_naming_the_grant(target, monkeypatch):
    """No retry mends a missing grant: the claim's transaction is refused, the flow stops with
    one error naming what to grant, and its stop (held, the progress group closed) claims
    nothing again."""
    monkeypatch.setattr("mirror.engine.transactions.ProgressGroup", ClosableGroup)
    script: list[Any] = [lambda c: []] * 5  # held from the start: nothing is read
    worker, consumer, _ = make(script, target=target, producer_cls=RefusingProducer, text=TEXT)
    with pytest.raises(AuthorizationFailed, match=r"missing Read on topic 'nyc.orders'"):
        worker.run()
    assert consumer.closed
    assert not target.stored and not target.progress, "nothing committed"
    assert consumer.last_commit(P0) is None
