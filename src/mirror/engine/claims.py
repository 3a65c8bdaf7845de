"""`Claims`: with exactly_once, what a worker does before it writes a partition it was given.

Fence, then read, then seek: the last committed progress names the partition's previous writer
(its transactional.id, or nothing if it released the partition on revoke). That writer is
fenced first, which aborts whatever it still had open and makes its next commit fail; only
then is the progress read, stable now, and the consumer started there. The claim itself is a
transaction recording this writer's id in the progress of every partition it takes, before it
writes a record there, so that whoever takes them next knows whom to fence, even if this
worker dies inside its very first transaction.

Where no progress exists yet (the first exactly-once run of a partition) the copy starts at
the source group's committed offset (a flow switched over from at-least-once keeps the
duplicates that mode left), else from the beginning (the consumer's reset is earliest).

A held worker (fenced, or its producer failed) writes nothing until the group confirms that
the partitions it holds are still its own (`TransactionalCommitter.confirm`, or a new
assignment); then it claims all of them again with a producer of a new incarnation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.acks import SourcePartition
from mirror.domain.ledger import Ledger
from mirror.engine.assignment import AssignedPartition
from mirror.engine.gate import ReadGate
from mirror.engine.transactions import TransactionalCommitter, TransactionalPool
from mirror.errors import ClusterUnavailable, MirrorError
from mirror.kafka import OFFSET_BEGINNING
from mirror.kafka.progress import Progress, ProgressPending, fence
from mirror.kafka.settings import TRANSACTION_TIMEOUT_MS

log = logging.getLogger(__name__)

# How long a claim waits for another writer's open transaction it could not fence (one that
# died inside its first claim, before any progress named it): the target aborts it after
# its transaction timeout.
PENDING_WAIT = TRANSACTION_TIMEOUT_MS / 1000 + 15


class Claims:
    """Fence-read-claim for newly assigned partitions, and recovery of a held worker."""

    def __init__(
        self,
        flow: FlowConfig,
        target: ClusterConfig,
        consumer: Any,
        *,
        ledger: Ledger[AssignedPartition],
        committer: TransactionalCommitter,
        pool: TransactionalPool,
        gate: ReadGate,
        clock: Any = time.monotonic,
    ) -> None:
        self.flow, self._target, self._consumer = flow, target, consumer
        self._ledger, self._committer, self._pool, self._gate, self._clock = ledger, committer, pool, gate, clock
        self.fenced_ids: list[str] = []  # for the log and the tests

    def on_assign(
        self,
        partitions: Sequence[SourcePartition],
        starts: Mapping[SourcePartition, int],
        committed: Mapping[SourcePartition, int | None] | None,
    ) -> dict[SourcePartition, int]:
        """Claim newly assigned partitions (in the assign callback, before they are read);
        returns where each starts. A held worker claims everything it holds now."""
        committer = self._committer
        held = committer.held is not None
        todo = list(self._ledger.parts) if held else list(partitions)
        try:
            start = self._claim(todo, starts, committed)
        except MirrorError as exc:
            committer.hold(f"claim failed: {exc}", confirm=False)
            return {}
        if held:
            new = set(partitions)
            for tp, offset in start.items():
                if tp not in new:
                    self._seek(tp, offset)
            self._release()
        return {tp: start[tp] for tp in partitions if tp in start}

    def recover(self) -> None:
        """Held (each commit interval): once the group confirms, claim everything held again."""
        committer = self._committer
        if committer.held is None or not self._ledger.parts:
            return
        if committer.confirming and not committer.confirm():
            return
        try:
            start = self._claim(list(self._ledger.parts), {}, None)
        except MirrorError as exc:
            committer.hold(f"claim failed: {exc}", confirm=False)
            return
        for tp, offset in start.items():
            self._seek(tp, offset)
        self._release()

    def _release(self) -> None:
        log.info("flow %s: partitions claimed again; writing resumed", self.flow.name)
        self._gate.open()

    def _claim(
        self,
        tps: Sequence[SourcePartition],
        starts: Mapping[SourcePartition, int],
        committed: Mapping[SourcePartition, int | None] | None,
    ) -> dict[SourcePartition, int]:
        committer, pool = self._committer, self._pool
        if not pool.ready():
            pool.renew()
            for part in self._ledger:
                pool.fit(part)
        parts = self._ledger.parts
        targets = {(parts[tp].route.target_topic, tp[1]): tp for tp in tps if tp in parts}
        if not targets:
            return {}
        timeout = self._target.timeout
        last = self._read(list(targets), timeout, stable=False)
        writers = sorted({p.writer_id for p in last.values() if p.writer_id and p.writer_id != pool.writer_id})
        for writer in writers:
            fence(self.flow.target, self._target, writer, timeout)
        self.fenced_ids += writers
        progress = self._read(list(targets), timeout, stable=True)
        start: dict[SourcePartition, int] = {}
        for target, tp in targets.items():
            got = progress.get(target)
            if got is not None:
                start[tp] = got.next_offset
            elif starts.get(tp) == OFFSET_BEGINNING or committed is None or committed.get(tp) is None:
                start[tp] = 0  # from the beginning: the consumer's reset is earliest
            else:
                start[tp] = committed[tp]  # type: ignore[assignment]  # checked just above
        committer.held = None
        if not committer.transact(claims=start):
            raise MirrorError("the claim's transaction did not commit")
        log.info(
            "flow %s: claimed %d partitions as %s (fenced %s)",
            self.flow.name,
            len(start),
            pool.writer_id,
            ", ".join(writers) or "nobody",
        )
        return start

    def _read(self, targets: list[tuple[str, int]], timeout: float, *, stable: bool) -> dict[tuple[str, int], Progress]:
        """The progress (`stable`: once no open transaction holds any of it, waiting at most
        PENDING_WAIT); a coordinator not ready yet (a new group, a broker restarting) is
        retried for the target's timeout."""
        start = self._clock()
        while True:
            try:
                return self._committer.group.read(targets, min(timeout, 5.0), stable=stable)
            except ProgressPending as exc:
                if self._clock() - start >= PENDING_WAIT:
                    raise MirrorError(f"progress still pending after {PENDING_WAIT:.0f}s: {exc}") from exc
                log.info("flow %s: waiting for an unfenced writer's transaction to end (%s)", self.flow.name, exc)
            except ClusterUnavailable:
                if self._clock() - start >= timeout:
                    raise
                time.sleep(0.2)

    def _seek(self, tp: SourcePartition, offset: int) -> None:
        self._committer.seek(tp, offset)
