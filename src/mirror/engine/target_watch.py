"""`TargetWatch`: the flow's topics matched, their targets made ready, watched, subscribed."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from mirror.config import ClusterConfig, Config, FlowConfig
from mirror.domain.acks import AckListener, SourcePartition, targets_created
from mirror.domain.ledger import Ledger
from mirror.domain.topics import TopicChange, TopicMapping, mirrorable_topics, topic_change, unmirrorable_reason
from mirror.engine.admins import AdminPair
from mirror.engine.committer import Committer
from mirror.engine.failures import Failures
from mirror.engine.fence import Fence
from mirror.engine.partition import AssignedPartition, CommitTags, Rebalance
from mirror.engine.producers import ProducerPool
from mirror.engine.refresh import RefreshRequests as RefreshRequests  # named here too for older imports
from mirror.engine.resync import Resync
from mirror.engine.status import FlowState, FlowStatus
from mirror.engine.targets import LIMIT_HEADROOM, ensure_targets
from mirror.errors import ClusterUnavailable, MirrorError
from mirror.kafka import TopicPartition

log = logging.getLogger(__name__)

# Above this many partitions in a flow librdkafka's cooperative-sticky assignor is too slow
# (librdkafka#4629: tens of seconds per assignment at 10,000 partitions), and the member it
# blocks misses its heartbeats.
COOPERATIVE_MAX = 5000


def some(names: Sequence[str], shown: int = 10) -> str:
    """The first names of a long list, for one log line."""
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


class TargetWatch:
    """Matches the flow's source topics, keeps their targets ready, and subscribes to them.

    Every refresh: match the source topics, create or grow the targets (`ensure_targets`),
    learn their ids and size limits, notice a target topic deleted (or deleted and created
    again: a new id) under this worker and resync, then subscribe to the sources whose
    targets are ready. Invariants: a source topic is subscribed only once its target's id
    is known, so no record goes to a topic this worker could not tell from a later
    re-creation; while fenced, a recreated target is not emptied (its partitions may be
    another worker's by now).
    """

    def __init__(
        self,
        config: Config,
        flow: FlowConfig,
        target: ClusterConfig,
        *,
        stop: threading.Event,
        clock: Callable[[], float],
        ledger: Ledger[AssignedPartition],
        admins: AdminPair,
        tags: CommitTags,
        pool: ProducerPool,
        fence: Fence,
        committer: Committer,
        assignment: Rebalance,
        failures: Failures,
        status: FlowStatus,
        resync: Resync,
        requests: RefreshRequests,
        listeners: Sequence[AckListener] = (),
    ) -> None:
        self.config, self.flow, self._target, self._stop, self._clock = config, flow, target, stop, clock
        self._ledger, self._admins, self._tags, self._pool, self._fence = ledger, admins, tags, pool, fence
        self._committer, self._assignment, self._failures, self._status = committer, assignment, failures, status
        self._resync, self.requests = resync, requests
        self._listeners = listeners
        self._mappings: dict[str, TopicMapping] = {}
        self._subscribed: tuple[str, ...] = ()
        self.waiting: set[str] = set()  # matched source topics whose targets are not ready yet
        self._told_assignor = False
        self._told_too_long: set[str] = set()

    def refresh(self) -> bool:
        """Match source topics, prepare targets, (re)subscribe. False if a cluster did not answer."""
        # Frozen before this refresh: fence first. Its admin calls may block, and the loop
        # does not count that as a freeze; nor may it hide one that came before.
        self._fence.check()
        admins = self._admins
        try:
            listed = admins.source.topics()
            mappings, refused = mirrorable_topics(self.config, self.flow, listed)
            self._report_unmirrorable(refused)
            existing = self._check_targets(mappings)
            headroom = LIMIT_HEADROOM if self.flow.provenance_headers else 0
            result = ensure_targets(admins.source, admins.target, mappings, existing=existing, headroom=headroom)
            self._learn_ids(mappings)
            # A topic created a moment ago may not be describable yet: its source's limit is a
            # lower bound of its own (created with the source's, plus headroom). Only topics
            # with a known id are asked: the configs of one the broker is still creating are
            # not answered before the request times out (a minute with the loop held), and
            # nothing is written to it before its id is known.
            limits = admins.source.max_message_bytes(sorted({m.source for m in mappings}))
            self._pool.set_limits({m.target: limits[m.source] for m in mappings if m.source in limits})
            targets = admins.target.max_message_bytes(
                sorted({m.target for m in mappings if m.target in self._tags.ids})
            )
            self._pool.set_limits({**self._pool.limits, **targets})
        except ClusterUnavailable as exc:
            self._status.set(FlowState.RETRYING, str(exc))
            # An admin client that lived through a broker restart can keep failing long after
            # the broker is back; a new one answers at once.
            admins.renew()
            return False
        if result.created:
            created = [
                TopicPartition(m.source, p) for m in mappings if m.target in result.created for p in range(m.partitions)
            ]
            self._assignment.note_created(created, result.created)
            sources = {m.target: m.source for m in mappings}
            targets_created(
                self._listeners,
                self.flow.name,
                {t: (sources[t], self._tags.ids.get(t, "")) for t in result.created},
                self._source_cluster_id(),
            )
        self._mappings = {m.source: m for m in mappings}
        self._assignment.lifecycle.matched(len(mappings))
        total = sum(m.partitions for m in mappings)
        if not self._assignment.eager and total > COOPERATIVE_MAX and not self._told_assignor:
            self._told_assignor = True
            log.warning(
                "flow %s: %d partitions with the cooperative-sticky assignor, which takes tens of "
                "seconds per rebalance above ~%d in librdkafka (members time out of the group and "
                "rebalance again); set the flow's consumer partition.assignment.strategy: roundrobin "
                "(and session.timeout.ms: 45000: a broker busy with that many partitions answers "
                "heartbeats late)",
                self.flow.name,
                total,
                COOPERATIVE_MAX,
            )
        self._committer.note_ends(mappings)
        self._subscribe(mappings)
        return True

    def _report_unmirrorable(self, refused: Sequence[TopicMapping]) -> None:
        """One ERROR line per topic the flow selects but whose target name Kafka would refuse.

        Skipped, not fatal: refusing at start would make a daemon under a restart policy
        crash-loop (and stop every other topic of the flow) the moment such a topic is
        created on the source, while skipping keeps the rest mirrored and says why once.
        """
        for m in refused:
            if m.source not in self._told_too_long:
                self._told_too_long.add(m.source)
                log.error("%s", unmirrorable_reason(self.flow.name, m))

    def _check_targets(self, mappings: Sequence[TopicMapping]) -> dict[str, int]:
        """The target's topics; and, if a target topic this worker writes to was deleted (or
        deleted and created again), a resync first. Records queued for it must be dropped
        *before* it is created again, or they would land first in the new topic."""
        target = self._admins.target
        existing: dict[str, int] = target.topics()
        in_use = {part.route.target_topic for part in self._ledger.parts.values()}
        ids = target.topic_ids(sorted(({m.target for m in mappings} | in_use) & set(existing)))
        present = set(existing)
        if in_use - present:
            # Left out of the listing is not yet gone: a topic whose partitions wait for
            # leaders is listed with an error (for tens of seconds after creating thousands
            # of partitions). Gone is what the cluster, asked by name, does not know; the
            # rest keeps its partitions as they are.
            found = target.topic_ids(sorted(in_use - present))
            ids.update(found)
            present |= set(found)
        # Per partition: the id its topic had when this worker began writing it (a partition
        # assigned after another worker recreated the topic began on the new one).
        reset: set[SourcePartition] = set()
        emptied: set[SourcePartition] = set()
        for tp, part in self._ledger.parts.items():
            t = part.route.target_topic
            change = topic_change(part.target_id or self._tags.ids.get(t), ids.get(t), present=t in present)
            if change is not TopicChange.SAME:
                reset.add(tp)
            if change is TopicChange.RECREATED:
                emptied.add(tp)
        if emptied and self._fence.fenced:
            # Fenced after a freeze: these partitions may be another worker's by now, and
            # emptying them would delete what it mirrored and committed. Keep the old id:
            # once the group confirms them ours, the next refresh sees the new one again
            # (the fence's end asks for it); if not, their new owner empties them
            # (`Assignment._stale_commits`).
            recreated = {self._ledger.parts[tp].route.target_topic for tp in emptied}
            log.info(
                "flow %s: %s recreated while this worker is fenced; resynced once the group confirms its partitions",
                self.flow.name,
                ", ".join(sorted(recreated)),
            )
            ids = {t: i for t, i in ids.items() if t not in recreated}
            reset -= emptied
            emptied = set()
        gone = self.requests.take_gone()
        if reset:
            # The admin calls above are not a freeze (one before them was checked): the
            # resync's poll must not fence on their account.
            self._fence.awake()
            self._resync.run(reset, emptied)
        elif gone:
            # The target said "unknown partition" at delivery, yet the topic is still there
            # (the producer's metadata lagged a partition increase): the refused records'
            # partitions would stall for good, and later records may have landed past them.
            # Rewind every partition to what the target acknowledged, with new producers
            # (duplicates, never a gap).
            self._resync.run(set(), set())
        for t in in_use - present:
            self._tags.ids.pop(t, None)
        self._tags.ids.update(ids)
        return existing

    def _source_cluster_id(self) -> str:
        """The source cluster's id, recorded with the target topics just created: the topic
        deleter deletes nothing for a source that has another id since (rebuilt empty at the
        same address). "" when the source does not say; the copy goes on either way."""
        try:
            return self._admins.source.cluster_id()
        except MirrorError as exc:
            log.info("flow %s: source cluster id not recorded with its new target topics: %s", self.flow.name, exc)
            return ""

    def _learn_ids(self, mappings: Sequence[TopicMapping]) -> None:
        """Every target topic this worker may write to needs its id before the first record:
        a topic deleted and created again between two refreshes (by another worker of the
        flow, or by hand) is told apart only by its id."""
        unknown = {m.target for m in mappings} - set(self._tags.ids)
        if unknown:
            # New to this worker (never subscribed): asked once, not waited for. Their
            # sources join the subscription once their ids are known (`_subscribe`), and the
            # loop goes on while a cluster creating thousands of partitions takes its time
            # (minutes on one broker).
            fresh = {m.target for m in mappings if m.source not in self._subscribed} & unknown
            self._tags.ids.update(self._admins.target.topic_ids(sorted(fresh)))
            # Already mirrored and recreated since: wait for the new id, bounded.
            if unknown - fresh:
                self._tags.ids.update(self._wait_for_ids(sorted(unknown - fresh)))
        for part in self._ledger.parts.values():
            if part.target_id is None:
                part.target_id = self._tags.ids.get(part.route.target_topic)

    def _wait_for_ids(self, topics: Sequence[str]) -> dict[str, str]:
        """The ids of target topics that exist (ensure_targets made sure) but are not known yet.

        A broker may not describe a topic for a moment after it was created (by this worker
        or another). Without the id, a topic deleted and created again before this worker's
        next refresh looks unchanged, and this worker's producer stalls on the new topic
        without a word. So wait for the ids, bounded.
        """
        ids: dict[str, str] = {}
        deadline = self._clock() + min(10.0, self._target.timeout)
        while True:
            ids.update(self._admins.target.topic_ids([t for t in topics if t not in ids]))
            if len(ids) == len(topics) or self._clock() >= deadline or self._stop.wait(0.1):
                break
        if len(ids) < len(topics):
            log.warning(
                "flow %s: could not read the id of target topic(s) %s; a deletion and re-creation of "
                "them before the next refresh would go unnoticed",
                self.flow.name,
                some([t for t in topics if t not in ids]),
            )
        return ids

    def _subscribe(self, mappings: Sequence[TopicMapping]) -> None:
        """Subscribe to the matched sources whose targets are ready (their ids known)."""
        waiting = {m.source for m in mappings if m.target not in self._tags.ids and m.source not in self._subscribed}
        if waiting and waiting != self.waiting:
            log.info(
                "flow %s: %d source topic(s) wait for their target topics to be ready: %s",
                self.flow.name,
                len(waiting),
                some(sorted(waiting)),
            )
        self.waiting = waiting
        topics = tuple(sorted(set(self._mappings) - waiting))
        if topics != self._subscribed:
            added = set(topics) - set(self._subscribed)
            if added:
                log.info(
                    "flow %s: mirroring %s",
                    self.flow.name,
                    ", ".join(f"{t} -> {self._mappings[t].target}" for t in sorted(added)),
                )
            if topics:
                self._assignment.subscribe(list(topics))
            else:
                self._assignment.unsubscribe()
            self._subscribed = topics

    def recovered(self) -> bool:
        """Was the flow's failure the aftermath of a target topic deleted and created again?

        Another worker of the flow may recreate a deleted target topic before this one's
        refresh saw it gone; this producer's queued records then reach the new topic with
        sequence numbers it does not expect, a fatal producer error. A refresh now sees the
        new topic id and resyncs (new producers, re-read from what was acknowledged), which
        clears that failure; a record that really cannot be written fails again.
        """
        before = self._resync.count
        if not self.refresh() or self._resync.count == before:
            return False
        log.warning(
            "flow %s: %s came from a recreated target topic; resynced and carrying on",
            self.flow.name,
            self._failures.failure,
        )
        self._failures.clear()
        self._status.set(FlowState.RUNNING, "target topic recreated; resynced")
        return True
