"""The group's side of a flow worker: partitions assigned, revoked and lost.

A mixin of `FlowWorker` (mirror.engine.worker): the rebalance callbacks confluent-kafka calls
on the worker's thread (inside `consume`), and the commit metadata that lets whoever resumes a
partition tell whether its target topic is still the one the committed offset was mirrored
into. What it needs from the worker is declared below; the worker provides it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.acks import AckListener, SourcePartition
from mirror.domain.ledger import Ledger, PartitionLedger
from mirror.domain.route import route
from mirror.errors import MirrorError
from mirror.kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition, commit_offsets, committed_offsets, raise_for

log = logging.getLogger(__name__)

TID = "target-topic-id="  # commit metadata: see `Assignment._offset`
UNREAD = -2  # `_created_at`: the group's offsets could not be read when the target was created
DRAIN_TIMEOUT = 30.0  # how long a stop (or a revoke) waits for outstanding acknowledgements


@dataclass(slots=True)
class Partition(PartitionLedger):
    """The ledger of one assigned source partition, with what the worker needs to write it."""

    producer: Any = None  # the producer whose batches fit this target topic's limit
    room: int = 1 << 62  # key + value bytes below which a record surely fits the target's limit
    limit: int | None = None  # the target topic's max.message.bytes
    # The target topic's id when this worker began writing this partition: a different id
    # later means the topic was deleted and created again under it.
    target_id: str | None = None


class Assignment:
    """Rebalance callbacks and commit tagging (mixed into `FlowWorker`)."""

    # What the worker provides.
    flow: FlowConfig
    listeners: list[AckListener]
    clock: Callable[[], float]
    _ledger: Ledger[Partition]
    _consumer: Any
    _source: ClusterConfig
    _target_admin: Any
    _target_ids: dict[str, str]
    _created_at: dict[SourcePartition, int | None]
    _paused: bool
    _tick: float
    _fenced: dict[SourcePartition, int] | None
    _eager: bool  # an eager assignor (roundrobin, range): whole assignments, not increments

    # What the callbacks need from the worker: FlowWorker (engine/worker.py) implements each
    # of these; they are declared here so the mixin type-checks on its own, not unfinished.
    def _producer_for(self, target_topic: str | None) -> Any:
        raise NotImplementedError

    def _size_check(self, st: Partition) -> None:
        raise NotImplementedError

    def _drop_pending(self, keys: set[SourcePartition] | None = None) -> None:
        raise NotImplementedError

    def _drain(self, partitions: Iterable[Partition]) -> None:
        raise NotImplementedError

    def _commit(self, partitions: Mapping[SourcePartition, Partition] | None = None) -> None:
        raise NotImplementedError

    def _drop_queued(self) -> None:
        raise NotImplementedError

    def _unfence(self) -> None:
        raise NotImplementedError

    def _offset(self, tp: SourcePartition, offset: int) -> TopicPartition:
        """A source offset to commit, tagged with the id of the target topic it was mirrored
        into: whoever resumes from it can tell whether that target topic is still the same
        one (`_on_assign`), even across restarts and workers."""
        st = self._ledger.parts.get(tp)
        # The id of the topic this partition writes to: `_stale_commits` may have seen a
        # re-creation the worker's refresh (`_target_ids`) has not yet.
        tid = (st.target_id or self._target_ids.get(st.route.target_topic)) if st is not None else None
        return TopicPartition(tp[0], tp[1], offset, f"{TID}{tid}") if tid else TopicPartition(tp[0], tp[1], offset)

    def _rewind_group(self, partitions: Sequence[SourcePartition]) -> None:
        """Commit offset 0 (read from the beginning) for partitions re-mirrored into a new
        target topic: the group's old offsets describe the deleted one, and a crash before
        the next commit must not resume past records the new topic never received."""
        if not partitions:
            return
        try:
            commit_offsets(self._consumer, [self._offset(tp, 0) for tp in partitions])
            for tp in partitions:
                if tp in self._ledger.parts:
                    self._ledger.parts[tp].committed = 0
        except KafkaException as exc:
            log.warning("flow %s: could not rewind the group's offsets of %d partitions (%s); they move at the next commit", self.flow.name, len(partitions), exc.args[0].str())

    def _committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> dict[SourcePartition, int | None]:
        timeout = timeout or self._source.timeout
        try:
            got = committed_offsets(self._consumer, partitions, timeout)
        except KafkaException as exc:
            raise_for(self.flow.source, f"read the committed offsets of group {self.flow.group_id!r}", exc, timeout)
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in got}

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            r = route(self.flow, tp.topic, tp.partition)
            st = Partition(r, producer=self._producer_for(r.target_topic))
            self._size_check(st)
            self._ledger.assign((tp.topic, tp.partition), st)
        # A target topic this worker created is empty: it must receive everything the source
        # still holds, even if the group committed offsets for an earlier, deleted incarnation
        # of it. But only if nobody committed since the creation: another worker may have
        # filled it in the meantime (then the group's offsets are right, as always).
        created = [tp for tp in partitions if (tp.topic, tp.partition) in self._created_at]
        start, current, read = self._stale_commits(partitions)
        if created:
            # The group's offsets as `_stale_commits` just read them (one read for the whole
            # assignment: at 10,000 partitions each read is seconds inside the callback). If
            # that read failed, the new topic is filled from the source's beginning, as when
            # the offsets could not be read at creation: duplicates if another worker filled
            # it meanwhile, never a gap at the start of the new topic.
            now = read or {}
            for key in [(tp.topic, tp.partition) for tp in created]:
                created_with = self._created_at.pop(key)
                if key in current:
                    continue  # committed into this very topic since: another worker filled it
                if read is None or created_with == UNREAD or (key in now and now[key] == created_with):
                    start[key] = OFFSET_BEGINNING
        if start:
            # Rows of an earlier incarnation of the target would mistranslate; and the group's
            # offsets are rewound first, so a crash before the first commit cannot resume past
            # records the new topic never received.
            for listener in self.listeners:
                listener.on_reset(self.flow.name, sorted(start))
        chosen = [TopicPartition(tp.topic, tp.partition, start[(tp.topic, tp.partition)]) if (tp.topic, tp.partition) in start else tp for tp in partitions]
        # An eager assignor hands over the whole assignment each time (all was revoked first).
        if self._eager:
            consumer.assign(chosen)
        else:
            consumer.incremental_assign(chosen)
        # Nothing to rewind where the group never committed (a new group: every partition of
        # a cold start at 10,000 partitions, one large commit inside the callback saved).
        self._rewind_group(sorted(k for k in start if read is None or read.get(k) is not None))
        if self._paused:
            consumer.pause(partitions)
        else:
            # librdkafka keeps a partition's paused flag across unassign and assign: one
            # paused here before (a freeze, backpressure) and handed back would never fetch.
            consumer.resume(partitions)
        self._tick = self.clock()  # the offset reads above may block: not a freeze
        log.info("flow %s: assigned %d partitions (now %d)", self.flow.name, len(partitions), len(self._ledger.parts))

    def _stale_commits(self, partitions: list[TopicPartition]) -> tuple[dict[SourcePartition, int], set[SourcePartition], dict[SourcePartition, int | None] | None]:
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
            got = committed_offsets(self._consumer, [TopicPartition(tp.topic, tp.partition) for tp in partitions], min(5.0, self._source.timeout))
        except KafkaException as exc:
            log.warning("flow %s: could not read the group's offsets of the assigned partitions (%s); trusting them", self.flow.name, exc.args[0].str())
            return {}, set(), None
        read = {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in got}
        tagged = [tp for tp in got if tp.offset >= 0 and (tp.metadata or "").startswith(TID)]
        try:  # the ids as they are now, not as this worker last saw them
            ids = self._target_admin.topic_ids(sorted({self._ledger.parts[(tp.topic, tp.partition)].route.target_topic for tp in got}))
        except MirrorError as exc:
            log.warning("flow %s: could not read the target topics' ids (%s); trusting the group's offsets", self.flow.name, exc)
            return {}, set(), read
        # What this worker writes from now on goes to the topic as it is now: a later id
        # change is a re-creation under it (`_refresh_topics`), an earlier one is not.
        for tp in got:
            st = self._ledger.parts[(tp.topic, tp.partition)]
            st.target_id = ids.get(st.route.target_topic)
        if not tagged:
            return {}, set(), read
        stale: dict[SourcePartition, int] = {}
        current: set[SourcePartition] = set()
        for tp in tagged:
            meta = tp.metadata or ""
            now = ids.get(self._ledger.parts[(tp.topic, tp.partition)].route.target_topic)
            if tp.offset >= 0 and meta.startswith(TID) and now is not None and meta[len(TID):] != now:
                stale[(tp.topic, tp.partition)] = OFFSET_BEGINNING
            elif now is not None and meta[len(TID):] == now:
                current.add((tp.topic, tp.partition))
        if stale:
            log.warning("flow %s: %d partitions were committed into an earlier incarnation of their target topic; re-mirroring them from the source's beginning", self.flow.name, len(stale))
            ends = {(self._ledger.parts[k].route.target_topic, k[1]): OFFSET_END for k in stale}
            try:
                self._target_admin.delete_records(ends)
            except MirrorError as exc:
                log.warning("flow %s: could not empty the recreated target partitions: %s", self.flow.name, exc)
        return stale, current, read

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Hand partitions over cleanly: wait for their acknowledgements, commit, forget."""
        keys = {(tp.topic, tp.partition) for tp in partitions}
        revoked = {k: self._ledger.parts[k] for k in keys if k in self._ledger.parts}
        self._drop_pending(keys)
        for st in revoked.values():
            st.drop_open()
        self._drain(revoked.values())
        try:
            self._commit(revoked)
        except MirrorError as exc:
            log.warning("flow %s: commit on revoke failed: %s", self.flow.name, exc)
        left = sum(st.inflight_records() for st in revoked.values())
        if left and len(revoked) == len(self._ledger.parts):
            # The drain gave up (a slow target, or a topic the producer cannot see yet: it
            # holds those records for up to topic.metadata.propagation.max.ms). Left queued,
            # they would land after the new owner's copies of the same records. Nothing of
            # this worker's stays assigned (an eager revoke takes every partition), so the
            # whole queue can go.
            log.warning("flow %s: %d records of the revoked partitions not acknowledged after %.0fs; dropped (their new owners mirror them from the committed offsets)", self.flow.name, left, DRAIN_TIMEOUT)
            self._drop_queued()
        self._ledger.forget(keys)
        if self._fenced is not None:
            # Fenced after a freeze: the commit that asks the group (`_confirm_owner`) must
            # not name these any more. Made as a member of the next generation it would be
            # accepted, and move their new owner's offset back.
            for k in keys:
                self._fenced.pop(k, None)
        if self._eager:
            consumer.unassign()
        else:
            consumer.incremental_unassign(partitions)
        self._tick = self.clock()  # the commit above may block: not a freeze
        log.info("flow %s: revoked %d partitions (now %d)", self.flow.name, len(partitions), len(self._ledger.parts))

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        # Another worker owns these now; committing would overwrite its progress.
        keys = {(tp.topic, tp.partition) for tp in partitions}
        self._drop_pending(keys)
        for k in keys:
            if k in self._ledger.parts:
                self._ledger.parts[k].drop_open()
        lost = [st for k, st in self._ledger.parts.items() if k in keys]
        if len(lost) == len(self._ledger.parts) and any(st.inflight for st in lost):
            # Nothing of this worker's stays assigned: drop what is queued rather than let it
            # land among the new owners' copies (see `_on_revoke`).
            log.warning("flow %s: %d records of the lost partitions not acknowledged; dropped", self.flow.name, sum(st.inflight_records() for st in lost))
            self._drop_queued()
        self._ledger.forget(keys)
        if self._eager:
            consumer.unassign()
        else:
            consumer.incremental_unassign(partitions)
        log.warning("flow %s: lost %d partitions", self.flow.name, len(partitions))
        self._unfence()  # the group has spoken: what is left (if anything) is ours
