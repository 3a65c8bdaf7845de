"""An in-memory transactional target for exactly-once worker tests.

`TxnTarget` models what the worker relies on of a Kafka target with transactions: per
transactional.id epochs (`init_transactions` / `fence` bump it and abort the open
transaction), records that become visible to a read_committed reader only when their
transaction commits, commit markers that take a target offset, and the progress group's
committed offsets written by `send_offsets_to_transaction` inside the transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from mirror import config
from mirror.engine.worker import FlowWorker
from mirror.kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from mirror.kafka.progress import Progress, ProgressPending, parse_metadata
from tests.unit.engine.fakes import P0, P1, Clock, FakeAdmin, FakeConsumer, FakeProducer, Report, Step, Target

EOS_TEXT = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: ["orders"]}, commit_interval: 1s, exactly_once: true}
"""

FENCED = KafkaError(KafkaError._FENCED, "fenced", fatal=True)


@dataclass
class Entry:
    """One target log entry: a record (its source offset) or a commit/abort marker."""

    src: int | None
    tid: str
    state: str  # "pending", "committed", "aborted", "marker"


@dataclass
class Txn:
    tid: str
    epoch: int
    entries: list[tuple[tuple[str, int], int]] = field(default_factory=list)  # (source partition, log index)
    offsets: dict[tuple[str, int], Progress] = field(default_factory=dict)


class TxnTarget(Target):
    """The target cluster with transactions (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.logs: dict[tuple[str, int], list[Entry]] = {}  # keyed by SOURCE partition, as `stored`
        self.epochs: dict[str, int] = {}
        self.open: dict[str, Txn] = {}
        self.progress: dict[tuple[str, int], Progress] = {}  # (target topic, partition)
        self.fenced: list[str] = []

    def visible(self, tp: tuple[str, int]) -> list[int]:
        """What a read_committed consumer of the target partition reads (source offsets)."""
        return [e.src for e in self.logs.get(tp, []) if e.state == "committed" and e.src is not None]

    def bump(self, tid: str) -> int:
        self.epochs[tid] = self.epochs.get(tid, 0) + 1
        self.end(tid, commit=False)
        return self.epochs[tid]

    def fence(self, tid: str) -> None:
        self.fenced.append(tid)
        self.bump(tid)

    def end(self, tid: str, *, commit: bool) -> None:
        txn = self.open.pop(tid, None)
        if txn is None:
            return
        touched = set()
        for tp, idx in txn.entries:
            self.logs[tp][idx].state = "committed" if commit else "aborted"
            touched.add(tp)
        for tp in touched:
            self.logs[tp].append(Entry(None, tid, "marker"))
        if commit:
            self.progress.update(txn.offsets)


class TxnProducer(FakeProducer):
    """A transactional producer of `tid` on a `TxnTarget`."""

    def __init__(self, target: TxnTarget, capacity: int, tid: str) -> None:
        super().__init__(target, capacity)
        self.t: TxnTarget = target
        self.tid = tid
        self.epoch = 0
        self.in_txn = False
        self.abortable = False

    def _live(self) -> bool:
        return self.t.epochs.get(self.tid) == self.epoch

    def _check(self) -> None:
        if not self._live():
            raise KafkaException(FENCED)

    def init_transactions(self, timeout: float = 0) -> None:
        self.epoch = self.t.bump(self.tid)

    def begin_transaction(self) -> None:
        self._check()
        self.in_txn = True
        self.t.open.setdefault(self.tid, Txn(self.tid, self.epoch))

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], metadata: Any, timeout: float = 0) -> None:
        self._check()
        txn = self.t.open.setdefault(self.tid, Txn(self.tid, self.epoch))
        for tp in offsets:
            txn.offsets[(tp.topic, tp.partition)] = Progress(tp.offset, *parse_metadata(tp.metadata))

    def commit_transaction(self, timeout: float = 0) -> None:
        self.flush()
        self._check()
        if self.abortable:
            raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, "failed", txn_requires_abort=True))
        self.t.end(self.tid, commit=True)
        self.in_txn = False

    def abort_transaction(self, timeout: float = 0) -> None:
        self._check()
        self.t.end(self.tid, commit=False)
        self.in_txn = self.abortable = False

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        super().purge(in_queue, in_flight)

    def poll(self, timeout: float = 0) -> int:
        """Answer in order per partition; records join the open transaction (fenced: refused)."""
        held: set[tuple[str, int]] = set()
        left, served = [], 0
        for tp, offset, cb in self.queue:
            what = "hold" if tp in held else self.target.answer(tp, offset)
            if what == "hold":
                held.add(tp)
                left.append((tp, offset, cb))
                continue
            served += 1
            if what == "fail":  # a transient failure the transaction cannot survive
                self.abortable = True  # as librdkafka: its commit fails, the transaction must abort
                if cb is not None:
                    cb(KafkaError(KafkaError._MSG_TIMED_OUT), Report(-1))
                continue
            if not self._live():
                if cb is not None:
                    cb(FENCED, Report(-1))
                continue
            log = self.t.logs.setdefault(tp, [])
            log.append(Entry(offset, self.tid, "pending"))
            self.t.open.setdefault(self.tid, Txn(self.tid, self.epoch)).entries.append((tp, len(log) - 1))
            self.target.stored.setdefault(tp, []).append(offset)
            if cb is not None:
                cb(None, Report(len(log) - 1))
        self.queue = left
        return served


class StartingConsumer(FakeConsumer):
    """A `FakeConsumer` that starts a partition where the assignment says (librdkafka does)."""

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        super().incremental_assign(tps)
        self._start(tps)

    def assign(self, tps: list[TopicPartition]) -> None:
        super().assign(tps)
        self._start(tps)

    def _start(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            if tp.offset >= 0 or tp.offset == OFFSET_BEGINNING:
                self.position_of[(tp.topic, tp.partition)] = max(tp.offset, 0)


class FakeProgressGroup:
    """`mirror.kafka.progress.ProgressGroup` on a `TxnTarget`: stable reads wait for open
    transactions that sent offsets of the partitions asked."""

    target: TxnTarget  # set by `patch`

    def __init__(self, cluster_name: str, cluster: Any, group: str) -> None:
        self.cluster_name, self.group = cluster_name, group

    def metadata(self) -> Any:
        return ("group-metadata", self.group)

    def read(self, partitions: Any, timeout: float, *, stable: bool = True) -> dict[tuple[str, int], Progress]:
        wanted = set(partitions)
        if stable and any(wanted & set(txn.offsets) for txn in self.target.open.values()):
            raise ProgressPending("pending")
        return {tp: p for tp, p in self.target.progress.items() if tp in wanted}

    def close(self) -> None:
        pass


def patch(monkeypatch: pytest.MonkeyPatch, target: TxnTarget) -> None:
    """Point the engine's progress group and fencing at `target`."""
    group = type("Group", (FakeProgressGroup,), {"target": target})
    monkeypatch.setattr("mirror.engine.transactions.ProgressGroup", group)

    def fence(cluster_name: str, cluster: Any, tid: str, timeout: float) -> None:
        target.fence(tid)

    monkeypatch.setattr("mirror.engine.transactions.fence", fence)
    monkeypatch.setattr("mirror.engine.claims.fence", fence)


def make_eos(
    monkeypatch: pytest.MonkeyPatch,
    script: list[Step],
    *,
    target: TxnTarget | None = None,
    partitions: tuple[tuple[str, int], ...] = (P0, P1),
    text: str = EOS_TEXT,
    consumer_cls: type[FakeConsumer] = StartingConsumer,
    admin_cls: type[FakeAdmin] = FakeAdmin,
    listeners: tuple[Any, ...] = (),
) -> tuple[FlowWorker, FakeConsumer, TxnTarget]:
    """An exactly-once worker of flow `p` on fakes (source `orders`, 2 partitions)."""
    cfg = config.parse(text, env={})
    stop = threading.Event()
    target = target or TxnTarget()
    patch(monkeypatch, target)
    consumer = consumer_cls(list(partitions), script, stop, target)

    def producer(name: str, cluster: Any, settings: Mapping[str, Any]) -> TxnProducer:
        p = TxnProducer(target, 100_000, str(settings["transactional.id"]))
        target.producers.append(p)
        return p

    admins = {"nyc": {"orders": 2}, "sf": {"nyc.orders": 2}}
    worker = FlowWorker(
        cfg,
        cfg.flows[0],
        stop=stop,
        clock=Clock(),
        consumer_factory=lambda name, cluster, settings: consumer,
        producer_factory=producer,
        admin_factory=lambda name, cluster: admin_cls(admins[name]),
        listeners=listeners,
    )
    return worker, consumer, target


__all__ = ["P0", "P1", "TxnTarget", "TxnProducer", "make_eos", "patch", "EOS_TEXT"]
