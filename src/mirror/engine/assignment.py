"""The group's side of a flow worker: partitions assigned, revoked and lost.

The rebalance callbacks confluent-kafka calls on the worker's thread (inside `consume`). They
use the commit metadata (`CommitTags`, engine/partition.py) that lets whoever resumes a
partition tell whether its target topic is still the one the committed offset was mirrored
into. They import the units they call; the units see them only as `partition.Rebalance`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.acks import AckListener, SourcePartition
from mirror.domain.ledger import Ledger
from mirror.domain.route import Route, route
from mirror.engine.lifecycle import FlowLifecycle
from mirror.engine.partition import DRAIN_TIMEOUT, TID, AssignedPartition, CommitTags, read_committed
from mirror.engine.replay import TargetReplay, starts_of
from mirror.errors import MirrorError
from mirror.kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    KafkaException,
    TopicPartition,
    commit_offsets,
    committed_offsets,
)

if TYPE_CHECKING:
    from mirror.engine.admins import AdminPair
    from mirror.engine.claims import Claims
    from mirror.engine.committer import Committer
    from mirror.engine.delivery import DeliveryReports
    from mirror.engine.fence import Fence
    from mirror.engine.gaps import SourceGaps
    from mirror.engine.gate import ReadGate
    from mirror.engine.producers import ProducerPool
    from mirror.engine.recreated import RecreatedTopics
    from mirror.engine.start_points import StartPoints

# The shared partition types live in engine/partition.py; named here too for older imports.
__all__ = ["DRAIN_TIMEOUT", "TID", "UNREAD", "AssignedPartition", "Assignment", "CommitTags", "read_committed"]

log = logging.getLogger(__name__)

UNREAD = -2  # `Assignment.created`: the group's offsets could not be read when the target was created


class Assignment:
    """Rebalance callbacks: take partitions on, hand them over cleanly, let lost ones go.

    Invariants: a partition is in the ledger exactly while it is assigned; a revoked
    partition is committed only up to what the target acknowledged, after waiting
    (DRAIN_TIMEOUT) for its records in flight; a lost one is never committed (another
    worker owns it). A target topic this worker created starts empty, so its partitions
    are read from the source's beginning unless someone committed into it since (`created`).
    """

    def __init__(
        self,
        flow: FlowConfig,
        source: ClusterConfig,
        consumer: Any,
        *,
        ledger: Ledger[AssignedPartition],
        listeners: Sequence[AckListener],
        eager: bool,
        tags: CommitTags,
        admins: AdminPair,
        pool: ProducerPool,
        gate: ReadGate,
        fence: Fence,
        committer: Committer,
        reports: DeliveryReports,
        claims: Claims | None = None,
        start_points: StartPoints | None = None,
    ) -> None:
        self.flow, self._source, self._consumer = flow, source, consumer
        self._start_points = start_points  # start_from: where never-committed partitions start
        self._claims = claims  # exactly_once: fence, read the progress, claim (engine/claims.py)
        self._ledger, self._listeners, self._tags, self._admins = ledger, listeners, tags, admins
        self.eager = eager  # an eager assignor (roundrobin, range): whole assignments, not increments
        self._pool, self._gate, self._fence, self._committer, self._reports = pool, gate, fence, committer, reports
        # Source partitions whose target topic this worker created, with the group's committed
        # offset at that moment (None: nothing committed, UNREAD: unknown). See `_on_assign`.
        self.created: dict[SourcePartition, int | None] = {}
        self.lifecycle = FlowLifecycle(flow)  # the start and rebalance lines operators read
        self.gaps: SourceGaps | None = None  # set once wired: remembers the source topics' ids
        self.recreated: RecreatedTopics | None = None  # set once wired: topics re-created while stopped
        self.replay: TargetReplay | None = None  # set once wired: skips what the target holds already

    def note_created(self, partitions: list[TopicPartition], targets: Sequence[str]) -> None:
        """This worker created the target topics (`targets`) of these source partitions, so
        they are empty: note the group's committed offsets as they are now, for `on_assign`."""
        try:
            # Bounded: a new group's coordinator may take a while, and the loop waits here.
            self.created.update(self.committed(partitions, timeout=min(5.0, self._source.timeout)))
        except MirrorError as exc:
            # A brand-new group's coordinator may not answer yet. The topic is new and
            # empty either way: fill it from the source's beginning (a group whose old
            # target topic was deleted must not resume at offsets of the old one).
            log.warning(
                "flow %s: could not read the group's offsets when creating %s (%s); mirroring them from "
                "the source's beginning",
                self.flow.name,
                ", ".join(targets),
                exc,
            )
            self.created.update({(tp.topic, tp.partition): UNREAD for tp in partitions})

    def subscribe(self, topics: list[str]) -> None:
        self._consumer.subscribe(topics, on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost)

    def unsubscribe(self) -> None:
        self._consumer.unsubscribe()

    def new_partition(self, r: Route) -> AssignedPartition:
        return self._pool.fit(AssignedPartition(r))

    def committed(
        self, partitions: list[TopicPartition], timeout: float | None = None
    ) -> dict[SourcePartition, int | None]:
        return read_committed(self._consumer, self.flow, self._source, partitions, timeout)

    def rewind_group(self, partitions: Sequence[SourcePartition]) -> None:
        """Commit offset 0 (read from the beginning) for partitions re-mirrored into a new
        target topic: the group's old offsets describe the deleted one, and a crash before
        the next commit must not resume past records the new topic never received."""
        self.commit_at({tp: 0 for tp in partitions}, "rewind")

    def commit_at(self, offsets: Mapping[SourcePartition, int], what: str = "commit the starts of") -> None:
        """Commit these offsets now, outside the commit schedule (a failure waits for the next commit)."""
        if not offsets:
            return
        try:
            commit_offsets(self._consumer, [self._tags.offset(tp, off) for tp, off in sorted(offsets.items())])
            for tp, off in offsets.items():
                if tp in self._ledger.parts:
                    self._ledger.parts[tp].committed = off
        except KafkaException as exc:
            log.warning(
                "flow %s: could not %s the group's offsets of %d partitions (%s); they move at the next commit",
                self.flow.name,
                what,
                len(offsets),
                exc.args[0].str(),
            )

    def on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        recreated = self.gaps.remember_ids(sorted({tp.topic for tp in partitions})) if self.gaps else set()
        for tp in partitions:
            self._ledger.assign((tp.topic, tp.partition), self.new_partition(route(self.flow, tp.topic, tp.partition)))
        start, read = self._starts(partitions)
        if self.recreated is not None and self.gaps is not None:
            # Re-created while the flow was stopped: the group lost its offsets with the old topic.
            recreated |= self.recreated.check(
                self.gaps.source_ids, [(tp.topic, tp.partition) for tp in partitions], read, recreated
            )
        # A source topic created again under its old name: all of it is new, and the group's
        # offset (a late commit of the old topic's) or the offset-map rows say nothing of it.
        start.update({(tp.topic, tp.partition): OFFSET_BEGINNING for tp in partitions if tp.topic in recreated})
        if start:
            # Rows of an earlier incarnation of the target would mistranslate; and the group's
            # offsets are rewound first, so a crash before the first commit cannot resume past
            # records the new topic never received.
            for listener in self._listeners:
                listener.on_reset(self.flow.name, sorted(start))
        keys = [(tp.topic, tp.partition) for tp in partitions]
        # A re-created topic is mirrored from its beginning, whatever start_from says: it is the
        # continuation of a topic the flow mirrored, not a new one.
        fresh = [k for k in keys if k[0] not in recreated]
        picked = self._start_points.choose(fresh, start, read) if self._start_points is not None else {}
        # exactly_once: where the target's progress says (the source group's offsets only
        # where there is none yet); the group is still rewound where `start` says.
        # Never committed: from the beginning, said here (auto.offset.reset=error would make
        # it an error event first, see engine/gaps.py), unless start_from chose otherwise.
        at = {**{k: OFFSET_BEGINNING for k, v in (read or {}).items() if v is None}, **start, **picked}
        if self.replay is not None and self._claims is None:
            # Past the copies the target holds already (made before the group's last commit).
            at.update(self.replay.skip(starts_of(at, read, [k for k in fresh if k not in start and k not in picked])))
        if self._claims is not None:
            at = {**at, **self._claims.on_assign(keys, at, read)}
        chosen = [
            TopicPartition(tp.topic, tp.partition, at[(tp.topic, tp.partition)])
            if (tp.topic, tp.partition) in at
            else tp
            for tp in partitions
        ]
        if self.gaps is not None:
            self.gaps.started(chosen, read)
        # An eager assignor hands over the whole assignment each time (all was revoked first).
        if self.eager:
            consumer.assign(chosen)
        else:
            consumer.incremental_assign(chosen)
        # Nothing to rewind where the group never committed (a new group: every partition of
        # a cold start, one large commit inside the callback saved).
        self.rewind_group(sorted(k for k in start if k not in picked and (read is None or read.get(k) is not None)))
        self.commit_at(picked)  # once chosen, for good: a restart resumes there
        if self._gate.paused:
            consumer.pause(partitions)
        else:
            # librdkafka keeps a partition's paused flag across unassign and assign: one
            # paused here before (a freeze, backpressure) and handed back would never fetch.
            consumer.resume(partitions)
        self._fence.awake()  # the offset reads above may block: not a freeze
        self.lifecycle.assigned(len(partitions), len(self._ledger.parts))

    def _starts(
        self, partitions: list[TopicPartition]
    ) -> tuple[dict[SourcePartition, int], dict[SourcePartition, int | None] | None]:
        """Where newly assigned partitions must start other than at the group's offset, and
        the group's committed offsets as read (None if they could not be read).

        A target topic this worker created is empty: it must receive everything the source
        still holds, even if the group committed offsets for an earlier, deleted incarnation
        of it. But only if nobody committed since the creation: another worker may have
        filled it in the meantime (then the group's offsets are right, as always).
        """
        created = [tp for tp in partitions if (tp.topic, tp.partition) in self.created]
        start, current, read = self._stale_commits(partitions)
        if created:
            # The group's offsets as `_stale_commits` just read them (one read for the whole
            # assignment, which is seconds inside the callback at thousands of partitions).
            # If that read failed, the new topic is filled from the source's beginning, as
            # when the offsets could not be read at creation: duplicates if another worker
            # filled it meanwhile, never a gap at the start of the new topic.
            now = read or {}
            for key in [(tp.topic, tp.partition) for tp in created]:
                created_with = self.created.pop(key)
                if key in current:
                    continue  # committed into this very topic since: another worker filled it
                if read is None or created_with == UNREAD or (key in now and now[key] == created_with):
                    start[key] = OFFSET_BEGINNING
        return start, read

    def _stale_commits(
        self, partitions: list[TopicPartition]
    ) -> tuple[dict[SourcePartition, int], set[SourcePartition], dict[SourcePartition, int | None] | None]:
        """Partitions whose committed offset was mirrored into an earlier incarnation of their
        target topic (deleted and created again since, maybe while the mirror was stopped, or
        by another worker): they start again from the source's beginning. Also returned: the
        partitions whose committed offset was mirrored into the target topic as it is now,
        and the group's committed offsets as read here (None if they could not be read).

        This worker's part of the new topic is emptied first: nobody committed into it, so
        whatever it holds is a stale or unacknowledged copy that would come ahead of, or
        twice with, the records mirrored now.
        """
        try:
            got = committed_offsets(
                self._consumer,
                [TopicPartition(tp.topic, tp.partition) for tp in partitions],
                min(5.0, self._source.timeout),
            )
        except KafkaException as exc:
            log.warning(
                "flow %s: could not read the group's offsets of the assigned partitions (%s); trusting them",
                self.flow.name,
                exc.args[0].str(),
            )
            return {}, set(), None
        read = {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in got}
        tagged = [tp for tp in got if tp.offset >= 0 and (tp.metadata or "").startswith(TID)]
        try:  # the ids as they are now, not as this worker last saw them
            ids = self._admins.target.topic_ids(
                sorted({self._ledger.parts[(tp.topic, tp.partition)].route.target_topic for tp in got})
            )
        except MirrorError as exc:
            log.warning(
                "flow %s: could not read the target topics' ids (%s); trusting the group's offsets", self.flow.name, exc
            )
            return {}, set(), read
        # What this worker writes from now on goes to the topic as it is now: a later id
        # change is a re-creation under it (`TargetWatch`), an earlier one is not.
        for tp in got:
            part = self._ledger.parts[(tp.topic, tp.partition)]
            part.target_id = ids.get(part.route.target_topic)
        stale: dict[SourcePartition, int] = {}
        current: set[SourcePartition] = set()
        for tp in tagged:
            tagged_id = (tp.metadata or "")[len(TID) :]
            now = ids.get(self._ledger.parts[(tp.topic, tp.partition)].route.target_topic)
            if now is not None and tagged_id != now:
                stale[(tp.topic, tp.partition)] = OFFSET_BEGINNING
            elif now is not None:
                current.add((tp.topic, tp.partition))
        if stale and self._claims is not None:
            # exactly_once: where to resume is the progress on the target, not the source
            # group (whose commit comes after the target's and may be missing): a partition
            # with progress resumes there, and nothing below it may be deleted.
            progressed = self._claims.progressed(stale)
            for key in progressed or ():
                stale.pop(key)
                current.add(key)
            if progressed is None:
                log.warning(
                    "flow %s: %d partitions were committed into an earlier incarnation of their target "
                    "topic, and their progress is unknown: not emptied",
                    self.flow.name,
                    len(stale),
                )
                return stale, current, read
        if stale:
            log.warning(
                "flow %s: %d partitions were committed into an earlier incarnation of their target "
                "topic; re-mirroring them from the source's beginning",
                self.flow.name,
                len(stale),
            )
            ends = {(self._ledger.parts[k].route.target_topic, k[1]): OFFSET_END for k in stale}
            try:
                self._admins.target.delete_records(ends)
            except MirrorError as exc:
                log.warning("flow %s: could not empty the recreated target partitions: %s", self.flow.name, exc)
        return stale, current, read

    def on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Hand partitions over cleanly: wait for their acknowledgements, commit, forget."""
        keys = {(tp.topic, tp.partition) for tp in partitions}
        revoked = {k: self._ledger.parts[k] for k in keys if k in self._ledger.parts}
        self._gate.drop_pending(keys)
        self._committer.drop_open(revoked)
        self._drain(revoked)
        try:
            self._committer.release(revoked)
        except MirrorError as exc:
            log.warning("flow %s: commit on revoke failed: %s", self.flow.name, exc)
        left = sum(part.inflight_records() for part in revoked.values())
        if left and len(revoked) == len(self._ledger.parts):
            # The drain gave up (a slow target, or a topic the producer cannot see yet: it
            # holds those records for up to topic.metadata.propagation.max.ms). Left queued,
            # they would land after the new owner's copies of the same records. Nothing of
            # this worker's stays assigned (an eager revoke takes every partition), so the
            # whole queue can go.
            log.warning(
                "flow %s: %d records of the revoked partitions not acknowledged after %.0fs; dropped "
                "(their new owners mirror them from the committed offsets)",
                self.flow.name,
                left,
                DRAIN_TIMEOUT,
            )
            self._drop_queued()
        self._ledger.forget(keys)
        # Fenced after a freeze: the commit that asks the group must not name these any more.
        self._fence.forget(keys)
        if self.eager:
            consumer.unassign()
        else:
            consumer.incremental_unassign(partitions)
        self._fence.awake()  # the commit above may block: not a freeze
        self.lifecycle.revoked(len(partitions), len(self._ledger.parts))

    def on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        # Another worker owns these now; committing would overwrite its progress.
        self._committer.lost()
        keys = {(tp.topic, tp.partition) for tp in partitions}
        self._gate.drop_pending(keys)
        for k in keys:
            if k in self._ledger.parts:
                self._ledger.parts[k].drop_open()
        lost = [part for k, part in self._ledger.parts.items() if k in keys]
        if len(lost) == len(self._ledger.parts) and any(part.inflight for part in lost):
            # Nothing of this worker's stays assigned: drop what is queued rather than let it
            # land among the new owners' copies (see `on_revoke`).
            log.warning(
                "flow %s: %d records of the lost partitions not acknowledged; dropped",
                self.flow.name,
                sum(part.inflight_records() for part in lost),
            )
            self._drop_queued()
        self._ledger.forget(keys)
        if self.eager:
            consumer.unassign()
        else:
            consumer.incremental_unassign(partitions)
        log.warning("flow %s: lost %d partitions", self.flow.name, len(partitions))
        self.lifecycle.revoked(len(partitions), len(self._ledger.parts))
        self._fence.unfence()  # the group has spoken: what is left (if anything) is ours

    def _drain(self, partitions: Mapping[SourcePartition, AssignedPartition]) -> None:
        """Wait (at most DRAIN_TIMEOUT) for the acknowledgements of these partitions' records."""
        parts = list(partitions.values())
        clock = self._fence.clock
        deadline = clock() + DRAIN_TIMEOUT
        while any(part.inflight for part in parts) and clock() < deadline and not self._pool.dead:
            self._reports.serve(0.1)

    def _drop_queued(self) -> None:
        """Purge every producer and take new ones: what they held is never sent (requests
        already in flight may still land)."""
        if self._pool.dead:
            return  # a failed producer sends nothing more anyway
        self._pool.purge(self._reports.serve)
        self._pool.renew()
