"""Exactly-once (`exactly_once: true`): the copy and its progress committed in one target transaction.

The at-least-once worker's units stay as they are (the forwarder's hot path is the same);
with exactly_once the worker wires these instead of their plain counterparts:

* `TransactionalPool`: one transactional producer per worker incarnation, with a
  transactional.id used by nobody before (`mirror.<flow>.<uuid>`); a new incarnation (after a
  fence or a failed abort) gets a new id and the old one is fenced, never initialised again.
* `TransactionalCommitter`: a transaction per commit interval (and on revoke and stop). At
  the tick every record produced is flushed and acknowledged, the progress of every partition
  (the next source offset to copy, the writer id as metadata) is sent to the flow's progress
  group on the target inside the transaction, and the transaction is committed. Only then do
  the acknowledgements count: the offset map's rows and the counters, then the source
  group's commit (for lag and checkpoints; where to resume is the target's progress).
* `Claims` (engine/claims.py): what a worker does before it writes a partition it was given.

Invariants: a record counts (offset map, counters, source commit) only once the transaction
that wrote it committed; the progress sent with a transaction covers exactly the records it
wrote (a record written but not counted, a failed report or a refused record aborts it); a
transaction that aborts or is fenced drops every partition's in-flight state uncounted and
reads on from the progress last committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.acks import SourcePartition
from mirror.domain.acls import transactional_id_prefix
from mirror.engine.committer import Committer
from mirror.engine.partition import DRAIN_TIMEOUT, AssignedPartition
from mirror.engine.producers import ClientFactory, ProducerPool
from mirror.engine.unsettled import Unsettled
from mirror.errors import MirrorError
from mirror.kafka import KafkaException, TopicPartition, commit_offsets
from mirror.kafka.progress import (
    Progress,
    ProgressGroup,
    TransactionFailed,
    fence,
    new_writer_id,
    progress_offsets,
    refused_grant,
    transact,
)
from mirror.kafka.settings import transactional_settings

log = logging.getLogger(__name__)


class TxnState:
    """What the target said about the open transaction since it began.

    `doomed`: it must not commit (a record failed, or one was written that no progress
    covers); `fenced`: the producer can never commit again (another writer took its id).
    """

    def __init__(self) -> None:
        self.doomed: str | None = None
        self.fenced = False
        # Partitions sought back to their progress since the last batch: the worker drops
        # their records from the next batch and seeks them again (`TransactionalCommitter.seek`).
        self.reseek: dict[SourcePartition, int] = {}

    def doom(self, reason: str, *, fenced: bool = False) -> None:
        if self.doomed is None:
            self.doomed = reason
        self.fenced = self.fenced or fenced

    def clear(self) -> None:
        self.doomed = None
        self.fenced = False


class TransactionalPool(ProducerPool):
    """The single transactional producer of a worker incarnation, in the pool's clothes.

    Every topic gets the same producer (one transaction spans them all); `renew` starts a
    new incarnation and fences the old id, so nothing the old producer held can commit.
    """

    def __init__(
        self,
        flow: FlowConfig,
        target: ClusterConfig,
        settings: Mapping[str, Any],
        make_producer: ClientFactory,
        txn: TxnState,
    ) -> None:
        self.writer_id: str | None = None
        self.txn = txn
        # Called after `renew` (a revoke's drop, a freeze): whatever the old producer's
        # transaction wrote never counts, so the books go back to the committed progress and
        # nothing is written until the partitions are claimed again.
        self.on_renew: Any = None
        super().__init__(flow, target, settings, make_producer)

    def for_topic(self, target_topic: str | None) -> Any:
        producer = self._producers.get(0)
        if producer is None:
            producer = self._producers[0] = self._open()
        return producer

    def _open(self) -> Any:
        writer_id = new_writer_id(self.flow.name)
        producer = self._make(self.flow.target, self._target, transactional_settings(writer_id, self.settings))
        try:
            transact("init transactions", producer.init_transactions, self._target.timeout)
            producer.begin_transaction()
        except (TransactionFailed, KafkaException) as exc:
            if isinstance(exc, TransactionFailed):
                refusal = refused_grant(
                    self.flow.target,
                    "start a transactional producer",
                    exc,
                    writer_id=f"{transactional_id_prefix(self.flow.name)}*",
                    group=self.flow.progress_group,
                    topics=(),
                )
                if refusal is not None:
                    raise refusal from None
            raise MirrorError(
                f"flow {self.flow.name}: cannot start a transactional producer on {self.flow.target}: {exc}",
                hint="exactly_once needs Kafka 2.5 or later on the target, and Write on its transactional ids",
            ) from exc
        self.writer_id = writer_id
        log.info("flow %s: transactional producer %s started", self.flow.name, writer_id)
        return producer

    def fit(self, part: AssignedPartition) -> AssignedPartition:
        """As the pool's, but never starts a producer (held: none until the next claim)."""
        if self.ready():
            return super().fit(part)
        part.producer = None
        return part

    def renew(self) -> None:
        """Outside a claim (the queue dropped, a freeze): the old incarnation is fenced, so its
        open transaction is aborted, and no new one starts here. Only a claim starts one
        (`incarnate`): a producer whose id no progress names could not be fenced by the next
        owner of its partitions."""
        old = self.writer_id
        self._producers.clear()
        self.dead = False
        self.txn.clear()
        if old is not None:
            try:
                fence(self.flow.target, self._target, old, self._target.timeout)
            except MirrorError as exc:
                # Whoever takes its partitions fences it (the progress names it), and the
                # target aborts its transaction after transaction.timeout.ms anyway.
                log.warning("flow %s: could not fence the retired producer %s: %s", self.flow.name, old, exc)
        self.writer_id = None
        if self.on_renew is not None:
            self.on_renew()

    def incarnate(self) -> None:
        """A new incarnation (new id), for a claim (`Claims._claim`), which records the id as
        the writer of every partition it takes before anything is written."""
        self._producers.clear()
        self.dead = False
        self.txn.clear()
        self.writer_id = None
        self.for_topic(None)

    def retire(self) -> None:
        """Drop the producer without a new one (fenced: wait until the group confirms)."""
        for producer in self._producers.values():
            try:
                # Not blocking: a call of this producer may be stuck (`transact`).
                producer.purge(in_queue=True, in_flight=True, blocking=False)
            except KafkaException:
                pass  # fatal already: it sends nothing more anyway
        self._producers.clear()
        self.writer_id = None
        self.dead = False

    def ready(self) -> bool:
        return 0 in self._producers


class TransactionalCommitter(Committer):
    """Commits the open transaction with the progress of every partition, then counts.

    Also keeps `progress`, the last committed progress of each held partition, which is where
    every partition is read again from after an abort.
    """

    def __init__(self, flow: FlowConfig, consumer: Any, *, target: ClusterConfig, txn: TxnState, **units: Any) -> None:
        super().__init__(flow, consumer, **units)
        self._target = target
        self.txn = txn
        self.group = ProgressGroup(flow.target, target, flow.progress_group)
        self.progress: dict[SourcePartition, int] = {}
        # The id of each claimed partition's source topic, written with its progress (a
        # recreated source topic's new id tells its old progress apart: `Claims`).
        self.source_ids: dict[SourcePartition, str] = {}
        self.held: str | None = None  # why nothing is written until the partitions are claimed again
        self.unsettled: Unsettled | None = None  # a commit of unknown outcome, until a claim settles it
        # Claimed partitions whose source group is behind their progress, and where it must
        # get to (`Claims`; see `positions`).
        self.behind: dict[SourcePartition, int] = {}
        self.confirming = False  # held, and the group must confirm the partitions first
        self.reports: Any = None  # DeliveryReports, wired after (it needs the committer's pool)
        self.claims: Any = None  # Claims, wired after (it needs the committer)
        self.closing = False
        self.transactions = 0  # committed, for the log and the tests
        # Told the moment a transaction's records became readable (the worker's `CommitSchedule`);
        # not of a claim's.
        self.on_committed: Callable[[], None] | None = None
        self.pool.on_renew = self._renewed

    @property
    def pool(self) -> TransactionalPool:
        return self._pool  # type: ignore[return-value]

    # ------------------------------------------------------------------ the tick

    def commit(self, partitions: Mapping[SourcePartition, AssignedPartition] | None = None) -> None:
        """The tick and the stop: one transaction with every held partition's progress (a
        transaction spans them all, so `partitions` narrows nothing). Releases nothing,
        unless closing: see `release`."""
        self.transact()

    def release(self, revoked: Mapping[SourcePartition, AssignedPartition]) -> None:
        """A revoke: commit, and hand the `revoked` partitions over (progress without a writer id)."""
        self.transact(revoked)

    def transact(
        self,
        release: Mapping[SourcePartition, AssignedPartition] | None = None,
        claims: Mapping[SourcePartition, int] | None = None,
    ) -> bool:
        """Commit the transaction: every held partition's progress, `release` handed over
        (revoked; all of them when closing), `claims` recorded as this writer's. True when
        committed (or nothing needed committing)."""
        if self.held is not None:
            # Not while closing: a stopping worker claims nothing (its progress group may be
            # closed already, and its next owner fences whoever the progress names).
            if self.claims is not None and not claims and not self.closing:
                self.claims.recover()
            return False
        if not self.pool.ready():
            return False
        self.settle()
        if self.txn.fenced:
            self.hold(self.txn.doomed or "fenced")
            return False
        if self.txn.doomed is not None or self._refused():
            self.abort(self.txn.doomed or "a record was refused")
            return False
        parts = self._ledger.parts
        going = set(parts if self.closing else (release or {}))
        moved = self._moved(parts)
        kept = {tp: pos for tp, pos in moved.items() if tp not in going}
        kept.update(claims or {})
        released = {tp: moved.get(tp, self.progress[tp]) for tp in going if tp in parts and tp in self.progress}
        if not kept and not released and not self._produced(parts):
            self._commit_source(release)
            return True
        offsets = progress_offsets(self._targets(kept), self.pool.writer_id, self._sources(kept)) + progress_offsets(
            self._targets(released), None, self._sources(released)
        )
        producer = self.pool.for_topic(None)
        timeout = self._target.timeout
        try:
            transact(
                "send the progress",
                lambda t: producer.send_offsets_to_transaction(offsets, self.group.metadata(), t),
                timeout,
            )
        except TransactionFailed as exc:
            self._failed(exc)
            return False
        try:
            transact("commit the transaction", producer.commit_transaction, timeout)
        except TransactionFailed as exc:
            sent, batches = self._sent(kept, released), self._ledger.take_batches()
            self._failed(exc)
            if self.held is not None and batches:
                # Not aborted: the target may have committed it all the same (`Unsettled`).
                self.unsettled = Unsettled(sent, batches)
            return False
        self.transactions += 1
        if self.on_committed is not None and claims is None:
            # A claim's transaction carries no copies: its time (a new producer, fencing, the
            # progress reads) says nothing of how long a commit takes to make records readable.
            self.on_committed()
        self.progress.update(kept)
        for tp in released:
            self.progress.pop(tp, None)  # handed over: its next owner reads it from the target
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            self._failed(TransactionFailed(f"begin a transaction: {exc.args[0].str()}", fenced=True))
        self._commit_source(release)
        return True

    def _sent(
        self, kept: Mapping[SourcePartition, int], released: Mapping[SourcePartition, int]
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """The progress a transaction sends where it moves it: (next offset, writer id) per target partition."""
        out: dict[tuple[str, int], tuple[int, str | None]] = {}
        for positions, writer in ((kept, self.pool.writer_id), (released, None)):
            moved = {tp: pos for tp, pos in positions.items() if pos != self.progress.get(tp)}
            out.update({t: (pos, writer) for t, pos in self._targets(moved).items()})
        return out

    def settle_unsettled(self, progress: Mapping[tuple[str, int], Progress], read: Collection[tuple[str, int]]) -> None:
        """A claim's stable read of the `read` partitions' progress, after its fence: the
        unsettled commit's acknowledgements handed on if it committed, dropped if not."""
        unsettled = self.unsettled
        verdict = unsettled.committed(progress, read) if unsettled is not None else None
        if unsettled is None or verdict is None:
            return
        self.unsettled = None
        count = sum(b.count for b in unsettled.batches)
        if verdict:
            log.info(
                "flow %s: the transaction of unknown outcome committed: counting its %d records", self.flow.name, count
            )
            self.hand_over(unsettled.batches)
        else:
            log.info("flow %s: the transaction of unknown outcome did not commit (%d records)", self.flow.name, count)

    def positions(self, partitions: Mapping[SourcePartition, AssignedPartition]) -> dict[SourcePartition, int]:
        """As at-least-once, and the progress of partitions whose source group is `behind` it.

        A worker killed between a transaction's commit and the source group's leaves the
        group behind the progress; its successor resumes at the progress, and where nothing
        is left to read the consumer never reports a position: without this the group would
        stay behind for good (lag above 0, `--until-caught-up` never done). The progress is
        what the target committed, so everything before it is there."""
        out = super().positions(partitions)
        for tp, pos in list(self.behind.items()):
            part = partitions.get(tp)
            if tp not in self._ledger.parts or (
                part is not None and part.committed is not None and part.committed >= pos
            ):
                del self.behind[tp]  # handed over, or caught up
            elif part is not None and tp not in out:
                out[tp] = pos
        return out

    def _commit_source(self, partitions: Mapping[SourcePartition, AssignedPartition] | None) -> None:
        """After the target's commit: the offset map's rows and the counters, then the source group."""
        super().commit(partitions)

    def settle(self) -> None:
        """Wait for every report of what the transaction wrote; close open segments (a run cut
        by a full queue): their records are in the transaction, so the progress must cover them."""
        producer = self.pool.for_topic(None)
        # A target that cannot take the queue within its timeout is away: the transaction
        # is aborted and copied again from the progress (waiting longer saves nothing).
        wait = min(DRAIN_TIMEOUT, self._target.timeout)
        try:
            producer.flush(wait)
        except Exception as exc:  # noqa: BLE001  # any class: see below
            # A fenced producer raises from flush, and confluent-kafka runs the delivery
            # callbacks with that error still pending: it surfaces as a SystemError, or as
            # whatever the next lookup in a callback fails with (an AttributeError was seen).
            # Its transaction can never commit: the worker claims again with a new producer.
            self.txn.doom(f"the producer failed: {exc}", fenced=True)
        self.reports.serve(0)
        for part in self._ledger:
            seg = part.open
            if seg is not None and not part.flushed(seg):
                self.txn.doom(f"{part.route.target_topic}[{part.route.partition}]: a cut run's placement is unknown")
        if self._ledger.inflight_records():
            self.txn.doom(f"records not acknowledged within {wait:g}s")

    def drop_open(self, parts: Mapping[SourcePartition, AssignedPartition]) -> None:
        """Revoked or stopping: an open segment's records are in the transaction; keep them."""
        if any(part.open is not None for part in parts.values()) and self.pool.ready():
            self.settle()

    def _refused(self) -> bool:
        return any(part.failed_at is not None for part in self._ledger)

    def _moved(self, parts: Mapping[SourcePartition, AssignedPartition]) -> dict[SourcePartition, int]:
        """Each partition's next source offset to copy, where it moved since the last progress."""
        quiet = [tp for tp, part in parts.items() if part.quiet]
        consumed: dict[SourcePartition, int] = {}
        if quiet and not self._gate.pending:
            for tp in self._consumer.position([TopicPartition(t, p) for t, p in quiet]):
                if tp.offset >= 0:
                    consumed[(tp.topic, tp.partition)] = tp.offset
        out = {}
        for tp, part in parts.items():
            pos = consumed.get(tp, part.acked_next)
            if pos is not None and pos != self.progress.get(tp):
                out[tp] = pos
        return out

    def _produced(self, parts: Mapping[SourcePartition, AssignedPartition]) -> bool:
        return any(part.batch is not None for part in parts.values())

    def _sources(self, positions: Mapping[SourcePartition, int]) -> dict[tuple[str, int], str]:
        parts, ids = self._ledger.parts, self.source_ids
        return {(parts[tp].route.target_topic, tp[1]): ids[tp] for tp in positions if tp in parts and tp in ids}

    def _targets(self, positions: Mapping[SourcePartition, int]) -> dict[tuple[str, int], int]:
        parts = self._ledger.parts
        return {(parts[tp].route.target_topic, tp[1]): pos for tp, pos in positions.items() if tp in parts}

    # ------------------------------------------------------------------ failures

    def _failed(self, exc: TransactionFailed) -> None:
        refusal = refused_grant(
            self.flow.target,
            "commit a transaction",
            exc,
            writer_id=self.pool.writer_id or f"{transactional_id_prefix(self.flow.name)}*",
            group=self.flow.progress_group,
            topics=[part.route.target_topic for part in self._ledger],
        )
        if refusal is not None:
            self.refuse(refusal)
        if exc.fenced:
            self.hold(f"fenced: {exc}")
        else:
            self.abort(str(exc))

    def abort(self, reason: str) -> None:
        """Abort the transaction; every partition reads on from its committed progress."""
        log.warning("flow %s: transaction aborted (%s); re-reading from the committed progress", self.flow.name, reason)
        producer = self.pool.for_topic(None)
        try:
            transact("abort the transaction", producer.abort_transaction, self._target.timeout)
            self.reset()
            self.txn.clear()
            producer.begin_transaction()
        except (TransactionFailed, KafkaException) as exc:
            self.hold(f"could not abort: {exc}")

    def refuse(self, refusal: MirrorError) -> None:
        """A grant is missing: no retry can help, the flow stops with it (the transaction is
        aborted or the producer retired all the same, so nothing of it counts)."""
        self._failures.first(refusal)

    def hold(self, reason: str, *, confirm: bool = True) -> None:
        """Fenced, or the producer cannot go on: drop everything uncounted, write nothing until
        the partitions are claimed again (`Claims.recover`), after the group confirms they are
        still ours (`confirm`; not needed when a claim only failed to reach the target)."""
        log.warning("flow %s: %s; dropping everything in flight until claimed again", self.flow.name, reason)
        self.held = reason
        self.confirming = confirm
        self._gate.shut(f"exactly-once: {reason}")
        # Back to the progress (reading is shut): the consumer's position must not run
        # ahead of what the target holds while nothing is written.
        self.reset()
        self.pool.retire()
        self.txn.clear()

    def _renewed(self) -> None:
        """The producer was renewed outside a claim (`TransactionalPool.renew`): drop
        everything uncounted and claim the partitions again, once the group confirms them."""
        if self._ledger.parts:
            self.hold("the producer was renewed", confirm=True)
        else:
            self.reset()

    def reset(self, *, seek: bool = True) -> None:
        """Drop every partition's state uncounted; seek back to the committed progress."""
        self._gate.forget_pending()
        ledger = self._ledger
        old = dict(ledger.parts)
        ledger.by_target = {}
        for tp, part in old.items():
            part.drop_inflight()
            part.batch = None
            fresh = self._pool.fit(AssignedPartition(part.route))
            fresh.target_id, fresh.committed = part.target_id, part.committed
            ledger.assign(tp, fresh)
            if seek and tp in self.progress:
                self.seek(tp, self.progress[tp])
        if seek and self._gate.paused:
            self._gate.resume()  # only if nothing else holds reading (a fence, the offset store)

    def seek(self, tp: SourcePartition, offset: int) -> None:
        """Read `tp` again from `offset`, and again after the batch being consumed now.

        Called inside a rebalance callback, the batch `consume` returns may hold records of
        `tp` collected before this seek (and others fetched after it): none may be forwarded,
        or progress would move past records not yet copied. `after_consume` drops them and
        seeks once more, when no batch is in the making."""
        self.txn.reseek[tp] = offset
        try:
            self._consumer.seek(TopicPartition(tp[0], tp[1], offset))
        except KafkaException as exc:
            log.info("flow %s: seek %s[%d]: %s", self.flow.name, tp[0], tp[1], exc.args[0].str())

    def after_consume(self, msgs: list[Any]) -> list[Any]:
        """The batch without records of partitions sought back while it was made (see `seek`)."""
        again, self.txn.reseek = self.txn.reseek, {}
        for tp, offset in again.items():
            if tp in self._ledger.parts:
                try:
                    self._consumer.seek(TopicPartition(tp[0], tp[1], offset))
                except KafkaException as exc:
                    log.info("flow %s: seek %s[%d]: %s", self.flow.name, tp[0], tp[1], exc.args[0].str())
        return [m for m in msgs if (m.topic(), m.partition()) not in again]

    def lost(self) -> None:
        """Partitions were lost (another worker may own them): what this transaction wrote
        for them must not commit, so abort it all."""
        if self.pool.ready() and self.held is None:
            self.abort("partitions lost")

    def confirm(self) -> bool:
        """Held: commit the held partitions' progress to the source group as a member. Only a
        member of the current generation may, so success means they are still ours."""
        parts = self._ledger.parts
        positions = {tp: self.progress.get(tp, part.committed) for tp, part in parts.items()}
        known = {tp: pos for tp, pos in positions.items() if pos is not None}
        if not known:
            # Never claimed, never committed: nobody can have fenced this writer for them.
            self.confirming = False
            return True
        try:
            commit_offsets(self._consumer, [self._tags.offset(tp, o) for tp, o in known.items()])
        except KafkaException as exc:
            log.info("flow %s: still held (%s); waiting for the rebalance", self.flow.name, exc.args[0].str())
            return False
        self.confirming = False
        return True

    def close(self) -> None:
        self.group.close()
