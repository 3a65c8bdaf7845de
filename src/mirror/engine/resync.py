"""`Resync`: start a flow's partitions over after their target topic was deleted or refused them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.acks import AckListener, SourcePartition
from mirror.domain.ledger import Ledger
from mirror.engine.admins import AdminPair
from mirror.engine.committer import Committer
from mirror.engine.delivery import DeliveryReports
from mirror.engine.fence import Fence
from mirror.engine.gate import ReadGate
from mirror.engine.partition import AssignedPartition, Rebalance
from mirror.engine.producers import ProducerPool
from mirror.errors import AuthorizationFailed, MirrorError
from mirror.kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition, committed_offsets

if TYPE_CHECKING:
    from mirror.engine.claims import Claims
    from mirror.engine.replay import TargetReplay

log = logging.getLogger(__name__)


class Resync:
    """Drops everything queued and re-reads partitions from what the target still holds.

    Records queued for a deleted topic would land first in the new one, ahead of the older
    records it lost: so drop everything queued (purged records are uncommitted and re-read),
    commit what the target did acknowledge for the other partitions, rewind every partition
    to its last acknowledged position, and the reset ones to the source's beginning, with
    new producers. Purged in-flight requests may still have landed: those are the only
    duplicates this costs. Invariant: after a resync no producer holds a record read
    before it, and every partition reads on from a position the target has everything before.
    """

    def __init__(
        self,
        flow: FlowConfig,
        source: ClusterConfig,
        target: ClusterConfig,
        consumer: Any,
        *,
        stop: threading.Event,
        clock: Callable[[], float],
        ledger: Ledger[AssignedPartition],
        listeners: Sequence[AckListener],
        admins: AdminPair,
        pool: ProducerPool,
        gate: ReadGate,
        fence: Fence,
        committer: Committer,
        reports: DeliveryReports,
        assignment: Rebalance,
        claims: Claims | None = None,
    ) -> None:
        self.flow, self._source, self._target, self._consumer, self._stop, self._clock = (
            flow,
            source,
            target,
            consumer,
            stop,
            clock,
        )
        self._ledger, self._listeners, self._admins, self._pool, self._gate = ledger, listeners, admins, pool, gate
        self._fence, self._committer, self._reports, self._assignment = fence, committer, reports, assignment
        self._claims = claims  # exactly_once: see `_run_exactly_once`
        self.count = 0  # resyncs so far
        self.replay: TargetReplay | None = None  # set once wired: skips what the target holds already

    def run(self, reset: Collection[SourcePartition], emptied: Collection[SourcePartition]) -> None:
        """The target topic of the `reset` partitions was deleted, or (`emptied`) deleted and
        created again by someone else; or (both empty) the target refused records of a
        partition it does have (its metadata lagged a partition increase)."""
        topics = sorted({self._ledger.parts[tp].route.target_topic for tp in reset})
        if topics:
            log.warning(
                "flow %s: target topic(s) %s disappeared (or were recreated); recreating them and "
                "re-mirroring this worker's %d partition(s) of them from the source's beginning",
                self.flow.name,
                ", ".join(topics),
                len(reset),
            )
        else:
            log.warning(
                "flow %s: the target refused records of a partition it does have; re-mirroring every "
                "partition from its last acknowledged record",
                self.flow.name,
            )
        self.count += 1
        if self._claims is not None:
            self._run_exactly_once(self._claims, reset, emptied)
            return
        self._committer.emit_acks()
        self._pool.purge(self._reports.serve)
        self._pool.renew()
        recreated = sorted({self._ledger.parts[tp].route.target_topic for tp in emptied})
        if recreated and self._fence.fenced:
            # Fenced by the poll above (the refresh's own admin calls outlasted the session):
            # whose partitions these are is unknown, so delete nothing.
            log.warning(
                "flow %s: fenced during the resync; this worker's partitions of the recreated %s are not "
                "emptied (whoever owns them re-mirrors them)",
                self.flow.name,
                ", ".join(sorted(recreated)),
            )
        elif recreated:
            self._empty(emptied, recreated)
        self._gate.drop_pending()
        keep = {tp: part for tp, part in self._ledger.parts.items() if tp not in reset}
        for part in self._ledger:
            part.drop_inflight()
        self._committer.commit(keep)
        for part in keep.values():
            self._pool.fit(part)
        restarted = self._rewind(reset, keep)
        for listener in self._listeners:
            listener.on_reset(self.flow.name, restarted)
        self._assignment.rewind_group(restarted)

    def _run_exactly_once(
        self, claims: Claims, reset: Collection[SourcePartition], emptied: Collection[SourcePartition]
    ) -> None:
        """exactly_once: nothing acknowledged counts before its transaction commits, so
        everything in flight is dropped uncounted (no offset-map rows, no progress for it)
        and every partition is claimed again by a new incarnation (`Claims.restart`): the
        `reset` ones from 0, the others from their committed progress."""
        claims.restart("resync: re-reading every partition from its committed progress", reset)
        for tp in reset:
            self._ledger.assign(tp, self._assignment.new_partition(self._ledger.parts[tp].route))
        recreated = sorted({self._ledger.parts[tp].route.target_topic for tp in emptied})
        if recreated and not self._fence.fenced:
            self._empty(emptied, recreated)
        restarted = sorted(reset)
        for listener in self._listeners:
            listener.on_reset(self.flow.name, restarted)
        self._assignment.rewind_group(restarted)
        claims.recover()

    def _empty(self, emptied: Collection[SourcePartition], recreated: Sequence[str]) -> None:
        """Created again by someone else before this worker saw it gone: records this
        producer still had queued may have reached the new topic ahead of the ones it lost.
        Empty this worker's partitions of it (delete up to the end) before mirroring them
        again from the beginning, so they hold each record once, in order."""
        ends = {(self._ledger.parts[tp].route.target_topic, tp[1]): OFFSET_END for tp in emptied}
        # Right after the topic's creation its partitions may have no leader yet: retry,
        # briefly (the loop, and so the group's poll interval, waits meanwhile).
        deadline = self._clock() + min(10.0, self._target.timeout)
        while True:
            try:
                self._admins.target.delete_records(ends)
                return
            except MirrorError as exc:
                if isinstance(exc, AuthorizationFailed) or self._clock() >= deadline or self._stop.is_set():
                    log.warning(
                        "flow %s: could not empty this worker's partitions of the recreated %s (records "
                        "landed there before this worker saw the new topic stay, ahead of their "
                        "re-mirrored copies): %s",
                        self.flow.name,
                        ", ".join(recreated),
                        exc,
                    )
                    return
                self._stop.wait(0.2)

    def _rewind(
        self, reset: Collection[SourcePartition], keep: dict[SourcePartition, AssignedPartition]
    ) -> list[SourcePartition]:
        """Seek every partition: the reset ones (new books) to the source's beginning, the
        others to their last acknowledged record, or to the group's committed offset where
        nothing was acknowledged. Returns the reset ones."""
        # One request for all the partitions with nothing acknowledged (one each blocked the
        # loop for a round trip per partition).
        idle = [TopicPartition(t, p) for (t, p), part in keep.items() if part.acked_next is None]
        committed = (
            {
                (tp.topic, tp.partition): tp.offset
                for tp in committed_offsets(self._consumer, idle, self._source.timeout)
            }
            if idle
            else {}
        )
        if self.replay is not None:
            # Past the copies the target holds already (purged requests may have landed):
            # a partition proven starts at its new `acked_next`.
            self.replay.skip(
                {
                    tp: part.acked_next
                    if part.acked_next is not None
                    else (committed[tp] if committed.get(tp, -1) >= 0 else OFFSET_BEGINNING)
                    for tp, part in keep.items()
                }
            )
        restarted: list[SourcePartition] = []
        for tp, part in list(self._ledger.parts.items()):
            if tp in reset:
                self._ledger.assign(tp, self._assignment.new_partition(part.route))
                self._consumer.seek(TopicPartition(tp[0], tp[1], OFFSET_BEGINNING))
                restarted.append(tp)
            elif part.acked_next is not None:
                self._consumer.seek(TopicPartition(tp[0], tp[1], part.acked_next))
                part.rewound()  # re-read from the last acknowledged record on, by a new producer
            else:
                offset = committed.get(tp, -1)
                self._consumer.seek(TopicPartition(tp[0], tp[1], offset if offset >= 0 else OFFSET_BEGINNING))
                part.rewound()
        return restarted
