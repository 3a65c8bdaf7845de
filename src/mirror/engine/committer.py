"""`Committer`: acknowledged records to the listeners, safe source positions to the group."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from mirror.config import FlowConfig
from mirror.domain.acks import AckBatch, AckListener, SourcePartition
from mirror.domain.ledger import Ledger
from mirror.domain.topics import TopicMapping
from mirror.engine.admins import AdminPair
from mirror.engine.failures import Failures
from mirror.engine.gate import ReadGate
from mirror.engine.partition import AssignedPartition, CommitTags
from mirror.engine.producers import ProducerPool
from mirror.engine.status import FlowState, FlowStatus
from mirror.errors import MirrorError
from mirror.kafka import KafkaException, TopicPartition, commit_offsets

log = logging.getLogger(__name__)


class Committer:
    """Hands acknowledged batches to the listeners and commits the group's source offsets.

    Invariants: a source offset is committed only after the target acknowledged every
    record before it in that partition, and after every listener (the offset map) said it
    is ready (`AckListener.before_commit`); commits move forward only (the ledger's
    `positions`). With `until_caught_up` it also says when every matched partition is
    committed up to the end offsets seen at start, across all the flow's workers.
    """

    def __init__(
        self,
        flow: FlowConfig,
        consumer: Any,
        *,
        until_caught_up: bool,
        ledger: Ledger[AssignedPartition],
        listeners: Sequence[AckListener],
        tags: CommitTags,
        gate: ReadGate,
        pool: ProducerPool,
        failures: Failures,
        status: FlowStatus,
        admins: AdminPair,
    ) -> None:
        self.flow, self._consumer, self._until_caught_up = flow, consumer, until_caught_up
        self._ledger, self._listeners, self._tags, self._gate = ledger, listeners, tags, gate
        self._pool, self._failures, self._status, self._admins = pool, failures, status, admins
        self.records_acked = 0
        self._caught_up_at: dict[SourcePartition, int] | None = None  # the end offsets to reach

    def emit_acks(self) -> None:
        """Hand the acknowledged batches to the listeners (the offset map's rows)."""
        self.hand_over(self._ledger.take_batches())

    def hand_over(self, batches: list[AckBatch]) -> None:
        """Count `batches` and hand them to the listeners."""
        if batches:
            self.records_acked += sum(b.count for b in batches)
            for listener in self._listeners:
                listener.on_acked(batches)
            if self._status.state is FlowState.RETRYING and not self._gate.paused:
                self._status.set(FlowState.RUNNING, "target acknowledging again")

    def positions(self, partitions: Mapping[SourcePartition, AssignedPartition]) -> dict[SourcePartition, int]:
        """Source positions safe to commit: everything before them is on the target."""
        quiet = Ledger.quiet(partitions)
        consumed: dict[SourcePartition, int] = {}
        if quiet and not self._gate.pending and self._failures.failure is None and not self._pool.dead:
            # Nothing of these partitions is in flight, so everything the consumer has
            # returned is acknowledged; its position also skips transaction markers and
            # aborted records, which have no record to acknowledge.
            for tp in self._consumer.position([TopicPartition(t, p) for t, p in quiet]):
                if tp.offset >= 0:
                    consumed[(tp.topic, tp.partition)] = tp.offset
        return Ledger.positions(partitions, consumed)

    def release(self, revoked: Mapping[SourcePartition, AssignedPartition]) -> None:
        """A revoke: commit what is safe of the `revoked` partitions before they are handed over."""
        self.commit(revoked)

    def commit(self, partitions: Mapping[SourcePartition, AssignedPartition] | None = None) -> None:
        """Commit what is safe of these partitions (all assigned ones by default)."""
        self.emit_acks()
        parts = self._ledger.parts if partitions is None else partitions
        positions = self.positions(parts)
        if not positions:
            return
        try:
            for listener in self._listeners:
                listener.before_commit(self.flow.name, positions)
        except MirrorError as exc:
            # The offset map must hold the deltas before the commit. Keep mirroring; lag
            # grows until the store answers again.
            self._status.set(FlowState.RETRYING, f"commit held back: {exc}")
            return
        try:
            commit_offsets(self._consumer, [self._tags.offset(tp, o) for tp, o in positions.items()])
        except KafkaException as exc:
            log.warning(
                "flow %s: commit of %d partitions failed, retrying next interval: %s",
                self.flow.name,
                len(positions),
                exc.args[0].str(),
            )
            return
        Ledger.committed(parts, positions)

    def drop_open(self, parts: Mapping[SourcePartition, AssignedPartition]) -> None:
        """Revoked or stopping: an open segment's rest will never be produced (its records
        stay uncommitted and are re-read by the next owner)."""
        for part in parts.values():
            part.drop_open()

    def lost(self) -> None:
        """Partitions were lost to another worker (nothing to do: they are simply not committed)."""

    def note_ends(self, mappings: Sequence[TopicMapping]) -> None:
        """With `until_caught_up`: the end offsets to reach, read once (the first refresh)."""
        if self._caught_up_at is None and self._until_caught_up:
            parts = [(m.source, p) for m in mappings for p in range(m.partitions)]
            marks = self._admins.source.watermarks(parts)
            # A partition with nothing readable (empty, or all expired) is caught up by definition.
            self._caught_up_at = {tp: w.high for tp, w in marks.items() if w.high > w.low}

    def caught_up(self) -> bool:
        """Every matched partition committed up to the end offsets seen after start.

        Read from the group's committed offsets on the source, so it holds across all the
        workers sharing the flow, not only this one.
        """
        if self._caught_up_at is None or self._gate.pending or self._ledger.inflight_records():
            return False
        # A partition of this worker's that it committed short of its end is not caught up:
        # the group's offset is that commit (only the owner commits). No need to ask the
        # group for all its offsets (a large round trip per commit interval at thousands of
        # partitions) while this worker itself is still behind.
        parts = self._ledger.parts
        for tp, end in self._caught_up_at.items():
            part = parts.get(tp)
            if part is not None and part.committed is not None and part.committed < end:
                return False
        try:
            committed = self._admins.source.group_offsets(self.flow.group_id, list(self._caught_up_at))
        except MirrorError:
            return False
        return all(committed.get(tp, -1) >= end for tp, end in self._caught_up_at.items())
