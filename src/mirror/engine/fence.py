"""`Fence`: after a freeze, write nothing until the group confirms whose partitions these are."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.acks import SourcePartition
from mirror.domain.ledger import Ledger
from mirror.engine.gate import ReadGate
from mirror.engine.partition import AssignedPartition, CommitTags, read_committed
from mirror.engine.producers import ProducerPool
from mirror.errors import MirrorError
from mirror.kafka import OFFSET_BEGINNING, KafkaException, TopicPartition, commit_offsets

log = logging.getLogger(__name__)


class Fence:
    """Notices a freeze of the worker's thread, and fences the worker until the group speaks.

    A worker stopped (SIGSTOP, a paused VM, a stalled host) past the session timeout wakes
    up a zombie: another worker owns its partitions now and has started from the committed
    offsets. Its librdkafka threads wake with it and may still send what was queued, but
    nothing they report may count: acknowledgements from now on would write offset-map rows
    (and commits) for copies that land after the new owner's.

    Invariants: `running_at` is the last moment the thread was seen running (every blocking
    call that is not a freeze calls `awake` after it); while fenced, reading is shut and no
    acknowledgement from before the freeze counts; the fence ends only when a commit as a
    member of the current generation succeeds for every partition still held (`confirm`),
    or the group takes the partitions away (`unfence` from the lost callback).
    """

    def __init__(
        self,
        flow: FlowConfig,
        source: ClusterConfig,
        consumer: Any,
        *,
        fence_after: float,
        clock: Callable[[], float],
        ledger: Ledger[AssignedPartition],
        pool: ProducerPool,
        gate: ReadGate,
        tags: CommitTags,
        on_unfenced: Callable[[], None],
    ) -> None:
        self.flow, self._source, self._consumer = flow, source, consumer
        # Frozen for longer than this, the group may have given this worker's partitions to another.
        self.fence_after = fence_after
        self.clock = clock
        self._ledger, self._pool, self._gate, self._tags, self._on_unfenced = ledger, pool, gate, tags, on_unfenced
        self.running_at = clock()
        # Fenced: what to commit to ask the group (partition -> its committed offset); None: not fenced.
        self.asking: dict[SourcePartition, int] | None = None
        self._unread = False  # fenced, and the committed offsets still to be read

    @property
    def fenced(self) -> bool:
        return self.asking is not None

    def awake(self) -> None:
        """The thread ran just now: what blocked it (an admin call, a commit) was not a freeze."""
        self.running_at = self.clock()

    def check(self) -> bool:
        """Was this thread frozen long enough to lose its partitions? Then fence it.

        Before serving one report: drop everything in flight uncounted, purge, take new
        producers, and re-read every partition from the group's committed offsets
        (duplicates, never loss); the rebalance that follows takes away what is no longer ours.
        """
        now = self.clock()
        gap, self.running_at = now - self.running_at, now
        if gap <= self.fence_after or not self._ledger.by_target:
            return False
        log.warning(
            "flow %s: this worker did not run for %.1fs (longer than the session timeout allows): its "
            "partitions may have another owner now; dropping everything in flight and re-reading from "
            "the committed offsets",
            self.flow.name,
            gap,
        )
        for part in self._ledger:
            part.drop_inflight()
            part.batch = None
            # Its unemitted acknowledgements (offset-map rows) are gone: a caller still
            # holding this state (a revoke draining) must not commit from it.
            part.acked_next = None
            part.tainted = True
        self._pool.discard()
        self._gate.forget_pending()
        self._ledger.by_target = {}
        for tp, old in list(self._ledger.parts.items()):
            fresh = self._pool.fit(AssignedPartition(old.route))
            fresh.tainted = True  # where to read from is unknown until `_seek_committed`
            self._ledger.assign(tp, fresh)
        # Write nothing until the group says whose partitions these are (`confirm`).
        self.asking = {}
        self._unread = True
        self._gate.shut("frozen past the session timeout; reading paused until the group confirms the assignment")
        self._seek_committed()
        self.awake()
        return True

    def _seek_committed(self) -> bool:
        """Seek every partition back to the group's committed offset (the beginning where
        nothing is committed: where a restart would start) and note what to commit to ask the
        group. False while the committed offsets cannot be read: the fence holds."""
        try:
            committed = read_committed(
                self._consumer,
                self.flow,
                self._source,
                [TopicPartition(t, p) for t, p in self._ledger.parts],
                timeout=min(5.0, self._source.timeout),
            )
        except MirrorError as exc:
            log.info("flow %s: still fenced: the group's committed offsets cannot be read (%s)", self.flow.name, exc)
            return False
        finally:
            self.awake()  # the read may block: not a freeze
        asking: dict[SourcePartition, int] = {}
        for tp, part in self._ledger.parts.items():
            start = committed.get(tp)
            try:
                self._consumer.seek(TopicPartition(tp[0], tp[1], OFFSET_BEGINNING if start is None else start))
            except KafkaException:
                continue  # no longer assigned: the rebalance takes it away (it stays tainted)
            part.tainted = False
            # Nothing committed: the group is asked with a (tagged) 0, which is where a
            # restart would start too; a commit that names no partition would ask nothing.
            asking[tp] = 0 if start is None else start
        self.asking = asking
        self._unread = False
        return True

    def confirm(self) -> None:
        """Fenced: commit the committed offsets again. Only a member of the current generation
        may commit, so success means the partitions are still ours: resume. A refusal means
        the group moved on: stay paused until the rebalance takes them away (`unfence` from
        the lost callback) and gives this worker its new share."""
        if self.asking is None:
            return
        if self._unread and not self._seek_committed():
            return
        if self.asking:
            try:
                commit_offsets(self._consumer, [self._tags.offset(tp, o) for tp, o in self.asking.items()])
            except KafkaException as exc:
                log.info("flow %s: still fenced (%s); waiting for the rebalance", self.flow.name, exc.args[0].str())
                return
        self.unfence()

    def forget(self, keys: Collection[SourcePartition]) -> None:
        """Revoked while fenced: the commit that asks the group must not name these any more.
        Made as a member of the next generation it would be accepted, and move their new
        owner's offset back."""
        if self.asking is not None:
            for k in keys:
                self.asking.pop(k, None)

    def unfence(self) -> None:
        if self.asking is not None:
            self.asking = None
            self._unread = False
            log.info("flow %s: assignment confirmed after the freeze; reading resumed", self.flow.name)
            # A target topic recreated while fenced was left for now (`TargetWatch`): look
            # again before anything is written to it.
            self._on_unfenced()
            self._gate.open()
