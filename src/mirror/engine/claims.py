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
duplicates that mode left), else from the beginning (the consumer's reset is earliest). A
group whose offsets cannot be read fails the claim (retried at each commit): starting
at 0 would copy the whole retention again. A partition resumed at a progress its source group
is behind (its last writer killed between the two commits) has the group brought up to the
progress by the committer's next commit (`TransactionalCommitter.behind`): with nothing left
to read, the consumer would never report a position there.

A resync (`restart`) drops everything in flight uncounted and claims every partition again
with a new incarnation: the ones re-mirrored into a recreated target topic at 0, the others
at their committed progress (never where the consumer or the source group is).

A held worker (fenced, or its producer failed) writes nothing until the group confirms that
the partitions it holds are still its own (`TransactionalCommitter.confirm`, or a new
assignment); then it claims all of them again with a producer of a new incarnation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.acks import SourcePartition
from mirror.domain.ledger import Ledger
from mirror.engine.gate import ReadGate
from mirror.engine.partition import AssignedPartition, read_committed
from mirror.engine.transactions import TransactionalCommitter, TransactionalPool
from mirror.errors import AuthenticationFailed, AuthorizationFailed, ClusterUnavailable, MirrorError
from mirror.kafka import OFFSET_BEGINNING, TopicPartition
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
        source: ClusterConfig,
        source_ids: Callable[[list[str]], dict[str, str]],
        log_starts: Callable[[list[SourcePartition]], dict[SourcePartition, int]] | None = None,
        ledger: Ledger[AssignedPartition],
        committer: TransactionalCommitter,
        pool: TransactionalPool,
        gate: ReadGate,
        clock: Any = time.monotonic,
    ) -> None:
        self.flow, self._target, self._consumer = flow, target, consumer
        self._ledger, self._committer, self._pool, self._gate, self._clock = ledger, committer, pool, gate, clock
        self._source, self._source_ids = source, source_ids
        # The source log's first offsets: "from the beginning" claimed as a concrete offset
        # (the claim records it as progress) must be the log start, never 0, which is out of
        # range below records expired before the flow existed (a false gap, see engine/gaps.py).
        self._log_starts = log_starts
        self.fenced_ids: list[str] = []  # for the log and the tests
        # Until a claim of theirs commits: partitions restarted by a resync (claimed at 0,
        # whatever progress the deleted target topic had), and where `on_assign` said newly
        # assigned ones start when they have no progress (a claim may fail and be retried).
        self._restart: set[SourcePartition] = set()
        self._starts: dict[SourcePartition, int] = {}

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
        for tp in partitions:
            self._restart.discard(tp)
            self._starts.pop(tp, None)
        self._starts.update(starts)
        try:
            start = self._claim(todo, committed)
        except MirrorError as exc:
            self._failed(exc)
            return {}
        if held:
            new = set(partitions)
            for tp, offset in start.items():
                if tp not in new:
                    self._seek(tp, offset)
            self._release()
        return {tp: start[tp] for tp in partitions if tp in start}

    def recover(self) -> None:
        """Held (at each commit): once the group confirms, claim everything held again."""
        committer = self._committer
        if committer.held is None or not self._ledger.parts:
            return
        if committer.confirming and not committer.confirm():
            return
        try:
            start = self._claim(list(self._ledger.parts), None)
        except MirrorError as exc:
            self._failed(exc)
            return
        for tp, offset in start.items():
            self._seek(tp, offset)
        self._release()

    def progressed(self, tps: Collection[SourcePartition]) -> set[SourcePartition] | None:
        """Which of `tps` have a committed progress (None: unknown, the target did not answer).
        A partition with progress resumes there, so nothing below it may be deleted."""
        parts = self._ledger.parts
        targets = {(parts[tp].route.target_topic, tp[1]): tp for tp in tps if tp in parts}
        try:
            got = self._committer.group.read(list(targets), min(5.0, self._target.timeout), stable=False)
        except MirrorError as exc:
            log.warning("flow %s: could not read the progress (%s)", self.flow.name, exc)
            return None
        return {targets[t] for t in got if t in targets}

    def restart(self, reason: str, restarted: Collection[SourcePartition]) -> None:
        """A resync: drop everything in flight uncounted (the open transaction never commits:
        the claim fences its writer), and write nothing until every partition is claimed again
        (`recover`), the `restarted` ones at 0."""
        committer = self._committer
        if self._pool.ready() and committer.reports is not None:
            self._pool.purge(committer.reports.serve)
        for tp in restarted:
            committer.progress[tp] = 0
            committer.behind.pop(tp, None)  # the deleted target topic's progress
        self._restart |= set(restarted)
        committer.hold(reason, confirm=False)

    def _failed(self, exc: MirrorError) -> None:
        """A claim failed: retried at each commit, unless a grant is missing or the
        login refused, which no retry mends (the flow stops with it)."""
        if isinstance(exc, (AuthorizationFailed, AuthenticationFailed)):
            self._committer.refuse(exc)
        self._committer.hold(f"claim failed: {exc}", confirm=False)

    def _release(self) -> None:
        log.info("flow %s: partitions claimed again; writing resumed", self.flow.name)
        self._gate.open()

    def _claim(
        self,
        tps: Sequence[SourcePartition],
        committed: Mapping[SourcePartition, int | None] | None,
    ) -> dict[SourcePartition, int]:
        committer, pool = self._committer, self._pool
        if not pool.ready():
            pool.incarnate()
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
        committer.settle_unsettled(progress, targets)
        ids = self._source_ids(sorted({tp[0] for tp in targets.values()}))
        committer.source_ids.update({tp: ids[tp[0]] for tp in targets.values() if tp[0] in ids})
        progress = self._same_source(targets, progress)
        start = self._starts_of(targets, progress, committed)
        committer.held = None
        if not committer.transact(claims=start):
            raise MirrorError("the claim's transaction did not commit")
        self._restart -= set(start)
        for tp in start:
            self._starts.pop(tp, None)
            committer.behind.pop(tp, None)  # an earlier claim's: this one says
        committer.behind.update(self._behind(targets, progress, start, committed))
        log.info(
            "flow %s: claimed %d partitions as %s (fenced %s)",
            self.flow.name,
            len(start),
            pool.writer_id,
            ", ".join(writers) or "nobody",
        )
        return start

    def _behind(
        self,
        targets: Mapping[tuple[str, int], SourcePartition],
        progress: Mapping[tuple[str, int], Progress],
        start: Mapping[SourcePartition, int],
        committed: Mapping[SourcePartition, int | None] | None,
    ) -> dict[SourcePartition, int]:
        """Partitions resumed at their progress whose source group is behind it, with the
        progress (the committer brings the group up to it: a partition with nothing left to
        read would leave it behind for good). Never moves a group back; unreadable now, the
        group moves with the next record read."""
        resumed = {
            tp: start[tp]
            for target, tp in targets.items()
            if target in progress and start.get(tp) == progress[target].next_offset
        }
        if not resumed:
            return {}
        group = {tp: committed[tp] for tp in resumed if committed is not None and tp in committed}
        unknown = [TopicPartition(t, p) for t, p in resumed if (t, p) not in group]
        if unknown:
            try:
                group.update(
                    read_committed(self._consumer, self.flow, self._source, unknown, min(5.0, self._source.timeout))
                )
            except MirrorError as exc:
                log.info(
                    "flow %s: the source group's offsets unreadable (%s); they move with the next record",
                    self.flow.name,
                    exc,
                )
        behind = {}
        for tp, pos in resumed.items():
            at = group.get(tp, pos)  # unreadable: as if caught up
            if at is None or at < pos:
                behind[tp] = pos
        return behind

    def _same_source(
        self, targets: Mapping[tuple[str, int], SourcePartition], progress: Mapping[tuple[str, int], Progress]
    ) -> dict[tuple[str, int], Progress]:
        """The progress that counts in the source topic as it is now: progress naming another
        source topic id was made copying a deleted incarnation, and is taken as none."""
        ids, out = self._committer.source_ids, {}
        for target, got in progress.items():
            tp = targets.get(target)
            now = ids.get(tp) if tp is not None else None
            if got.source_id is not None and now is not None and got.source_id != now:
                log.warning(
                    "flow %s: %s[%d] was deleted and created again since its progress (%d) was committed; "
                    "copying it as new",
                    self.flow.name,
                    target[0],
                    target[1],
                    got.next_offset,
                )
                continue
            out[target] = got
        return out

    def _starts_of(
        self,
        targets: Mapping[tuple[str, int], SourcePartition],
        progress: Mapping[tuple[str, int], Progress],
        committed: Mapping[SourcePartition, int | None] | None,
    ) -> dict[SourcePartition, int]:
        """Where each claimed partition starts: the log start if a resync restarted it, else its
        progress; without progress, the source group's offset (read now if `committed` lacks
        it: a MirrorError if unreadable), or the log start where the group has none or
        `on_assign` said so."""
        start: dict[SourcePartition, int] = {}
        unknown: list[SourcePartition] = []
        for target, tp in targets.items():
            got = progress.get(target)
            if tp in self._restart:
                start[tp] = OFFSET_BEGINNING
            elif got is not None:
                start[tp] = got.next_offset
            elif tp in self._starts:
                # From the beginning (the consumer's reset is earliest), or start_from's choice.
                start[tp] = self._starts[tp] if self._starts[tp] >= 0 else OFFSET_BEGINNING
            elif committed is None or tp not in committed:
                unknown.append(tp)
            else:
                offset = committed[tp]
                start[tp] = OFFSET_BEGINNING if offset is None else offset
        if unknown:
            timeout = min(5.0, self._source.timeout)
            read = read_committed(
                self._consumer, self.flow, self._source, [TopicPartition(t, p) for t, p in unknown], timeout
            )
            for tp in unknown:
                offset = read.get(tp)
                start[tp] = OFFSET_BEGINNING if offset is None else offset
        return self._concrete(start)

    def _concrete(self, start: dict[SourcePartition, int]) -> dict[SourcePartition, int]:
        """`start` with "from the beginning" made the log's first offset (the claim records a
        concrete progress). Unreadable: the claim fails (retried), never a guessed 0."""
        beginning = sorted(tp for tp, offset in start.items() if offset < 0)
        if not beginning:
            return start
        if self._log_starts is None:
            return {tp: max(0, offset) for tp, offset in start.items()}
        try:
            lows = self._log_starts(beginning)
        except MirrorError as exc:
            raise MirrorError(f"the source log starts unreadable: {exc}") from exc
        missing = [tp for tp in beginning if tp not in lows]
        if missing:
            raise MirrorError(f"the source log start of {missing[0][0]}[{missing[0][1]}] unreadable")
        return {**start, **{tp: lows[tp] for tp in beginning}}

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
