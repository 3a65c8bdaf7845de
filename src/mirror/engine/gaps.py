"""`SourceGaps`: a source position out of range, reported and resumed past (or stopped at).

The consumer runs with `auto.offset.reset=error` (mirror.kafka.settings): librdkafka's reset
would move a partition to the log start silently, and the records between the mirror's
position and that start, deleted before they were copied, would vanish without a word. With
`error` the fetch stops and the partition's error event names the offset it wanted; this
unit reads the log's bounds, decides (`mirror.domain.gaps.resume_outside_log`), reports, and
moves the partition itself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mirror.config import FlowConfig
from mirror.domain.acks import AckListener, SourcePartition
from mirror.domain.gaps import GapPolicy, GapReason, SourceGap, resume_outside_log
from mirror.errors import MirrorError, SourceGapError
from mirror.kafka import OFFSET_BEGINNING, KafkaException, Message, TopicPartition

if TYPE_CHECKING:
    from mirror.domain.ledger import Ledger
    from mirror.engine.admins import AdminPair
    from mirror.engine.failures import Failures
    from mirror.engine.gate import ReadGate
    from mirror.engine.partition import AssignedPartition

log = logging.getLogger(__name__)

RESUME_HINT = (
    "to mirror on past it deliberately, run the flow once with on_source_gap: skip (the gap is then "
    "recorded and counted), or copy the records from a backup first"
)


class SourceGaps:
    """Positions out of range on the source: find what was skipped, say so once, move on.

    Invariant: no partition moves past records it did not copy before a WARNING, the
    listeners' `on_gap` (the offset map, the counter) have it; with `on_source_gap: stop`
    it does not move at all: the flow fails with `SourceGapError` and commits nothing past
    the records the target holds.
    """

    def __init__(
        self,
        flow: FlowConfig,
        consumer: Any,
        *,
        admins: AdminPair,
        listeners: Sequence[AckListener],
        failures: Failures | None,
        ledger: Ledger[AssignedPartition],
        eager: bool,
    ) -> None:
        self.flow, self._consumer, self._admins, self._listeners = flow, consumer, admins, listeners
        self.failures, self._ledger, self._eager = failures, ledger, eager  # failures: set once wired
        self._policy = GapPolicy(flow.on_source_gap)
        self.source_ids: dict[str, str] = {}  # source topic -> id when first assigned: tells a re-creation
        # Where the worker started or last moved each partition (assigned or sought at): an
        # eager move re-assigns a partition that returned no record yet there, not at -1001
        # (librdkafka would start it at the group's offset, which may be past or before it).
        self.starts: dict[SourcePartition, int] = {}
        self._unread: set[str] = set()  # topics assigned while their ids were unreadable
        self.gate: ReadGate | None = None  # set once wired: records read, not produced yet

    def remember_ids(self, topics: Sequence[str]) -> set[str]:
        """Note the ids of newly assigned source topics; return those whose id changed since
        this worker last had them: deleted and created again while it ran (a topic gone
        from the source is revoked; back, it is assigned again under its new id). Unreadable:
        none (a re-creation is then told by a position past the log's end, if at all)."""
        try:
            now = self._admins.source.topic_ids(list(topics))
        except MirrorError as exc:
            log.debug("flow %s: source topic ids unreadable: %s", self.flow.name, exc)
            self._unread.update(t for t in topics if t not in self.source_ids)
            return set()
        self._unread.difference_update(now)
        recreated = {t for t, i in now.items() if self.source_ids.get(t, i) != i}
        self.source_ids.update(now)
        for topic in sorted(recreated):
            log.warning(
                "flow %s: source topic %s was deleted and created again; records of the old topic not yet "
                "copied, if any, were never mirrored (how many is unknown); mirroring the new one from its beginning",
                self.flow.name,
                topic,
            )
            self._report(SourceGap(topic, -1, 0, -1, GapReason.RECREATED))
        return recreated

    def started(self, chosen: Sequence[TopicPartition], committed: Mapping[SourcePartition, int | None] | None) -> None:
        """Partitions assigned at these offsets (-1001: at the group's, as read into `committed`)."""
        for tp in chosen:
            key = (tp.topic, tp.partition)
            at = tp.offset if tp.offset >= 0 or tp.offset == OFFSET_BEGINNING else (committed or {}).get(key)
            if at is None and committed is not None and key in committed:
                at = OFFSET_BEGINNING  # never committed: librdkafka starts it per the reset
            if at is None:
                self.starts.pop(key, None)
            else:
                self.starts[key] = at

    def on_out_of_range(self, msg: Message) -> None:
        """A partition's fetch position lies outside the source log (`msg`: its error event)."""
        topic, partition, position = str(msg.topic()), int(msg.partition() or 0), msg.offset()
        key = (topic, partition)
        if key not in self._ledger.parts:
            return  # revoked meanwhile
        if position is None or position <= 0:
            # Nothing committed, or a concrete 0 meaning "from the beginning" (the fence's ask
            # or a rewind of a never-committed partition): nothing this flow meant to copy is
            # skipped, the records before the log start were gone before it began.
            self._move(key, OFFSET_BEGINNING)
            return
        try:
            marks = self._admins.source.watermarks([key], committed_only=False)[key]
        except (MirrorError, KeyError) as exc:
            log.warning(
                "flow %s: %s[%d]: position %d out of range, and the log's bounds are unreadable (%s); trying again",
                self.flow.name,
                topic,
                partition,
                position,
                exc,
            )
            self._move(key, position)
            return
        resume = resume_outside_log(topic, partition, position, marks.low, marks.high)
        gap, offset = resume.gap, resume.offset
        recreated = self._recreated(topic) if resume.truncated else False
        if resume.truncated and recreated is None:
            offset = self._unsure(key, position, marks.low, marks.high)
        elif resume.truncated and recreated:
            # A new topic under the old name: all of it is new, from its beginning. What the
            # old one held past `position` is gone, and how much is unknown.
            log.warning(
                "flow %s: %s[%d]: source topic %s was deleted and created again; records of the old topic "
                "from offset %d on, if any, were never mirrored; mirroring the new one from offset %d",
                self.flow.name,
                topic,
                partition,
                topic,
                position,
                marks.low,
            )
            self._report(SourceGap(topic, partition, position, position - 1, GapReason.RECREATED))
            offset = marks.low
        elif resume.truncated:
            log.warning(
                "flow %s: %s[%d]: the source log ends at %d, below the %d records already copied up to %d "
                "(truncated by an unclean leader election?); the target keeps those copies, and mirroring "
                "resumes at %d, where the source writes next",
                self.flow.name,
                topic,
                partition,
                marks.high,
                resume.truncated,
                position - 1,
                offset,
            )
        if offset < position:
            self._forget_position(key)
        if gap is not None:
            if self._policy is GapPolicy.STOP:
                self._fail(
                    SourceGapError(f"flow {self.flow.name}: {gap.describe()}; on_source_gap: stop", hint=RESUME_HINT)
                )
                return  # the partition stays where it is: nothing past the gap is read
            log.warning("flow %s: %s; mirroring on from offset %d", self.flow.name, gap.describe(), offset)
            self._report(gap)
            self._past(key, offset)
        self._move(key, offset)

    def _forget_position(self, key: SourcePartition) -> None:
        """The partition resumes below its position (a truncated log, a topic created again):
        the books forget the offsets they acknowledged and committed there, so the next commit
        moves the group back to what is copied now. Left past the new log's end, a restart
        would resume there and skip whatever the source writes below it meanwhile."""
        part = self._ledger.parts[key]
        part.committed = None
        part.acked_next = None

    def _past(self, key: SourcePartition, offset: int) -> None:
        """The gap is recorded: let the next commit move the group past it, or an idle
        partition (nothing read past the gap, so no position) would be reported again by
        every restart and new owner. Only when nothing read is unacknowledged: then
        everything before `offset` is on the target or in the gap."""
        part = self._ledger.parts.get(key)
        if part is None or not part.quiet or (part.acked_next is not None and part.acked_next >= offset):
            return
        if self.gate is not None and any((m.topic(), m.partition()) == key for m in self.gate.pending):
            return  # records before the gap wait for the producer: they move the commit first
        part.acked_next = offset

    def _unsure(self, key: SourcePartition, position: int, low: int, high: int) -> int:
        """Past the log end, and a re-created topic (all of it new) cannot be told from a
        truncation (its records copied already): reported, resumed at the log start (more
        copied rather than less)."""
        log.warning(
            "flow %s: %s[%d]: the source log ends at %d, below the position %d, and the topic's id cannot "
            "be compared (unreadable now or when assigned): deleted and created again, or truncated by an "
            "unclean leader election; records from offset %d on, if any, were never mirrored; mirroring "
            "from offset %d (records copied before may be copied twice)",
            self.flow.name,
            key[0],
            key[1],
            high,
            position,
            position,
            low,
        )
        self._report(SourceGap(key[0], key[1], position, position - 1, GapReason.RECREATED))
        return low

    def _fail(self, failure: MirrorError) -> None:
        if self.failures is not None:
            self.failures.first(failure)

    def _recreated(self, topic: str) -> bool | None:
        """Whether `topic` was deleted and created again since it was assigned; None when
        that cannot be told (the ids unreadable now, or not read when assigned)."""
        before = self.source_ids.get(topic)
        try:
            now = self._admins.source.topic_ids([topic]).get(topic)
        except MirrorError as exc:
            log.debug("flow %s: source topic id of %s unreadable: %s", self.flow.name, topic, exc)
            return None
        if now is None:
            return None
        self.source_ids[topic] = now
        if before is None:
            # Assigned while the ids were unreadable: nothing to compare with.
            return None if topic in self._unread else False
        return now != before

    def _report(self, gap: SourceGap) -> None:
        """The counter and the offset map hear of it (listeners with `on_gap`)."""
        for listener in self._listeners:
            on_gap = getattr(listener, "on_gap", None)
            if on_gap is not None:
                on_gap(self.flow.name, gap)

    def _move(self, key: SourcePartition, offset: int) -> None:
        """Fetch the partition from `offset`. After an out-of-range error librdkafka stops
        fetching it and refuses a seek (its fetch state is none): only a new assignment of it
        restarts the fetch. An eager assignor's consumer is re-assigned whole, the other
        partitions at their positions (what was read and not produced is pending, in order)."""
        tp = TopicPartition(key[0], key[1], offset)
        self.starts[key] = offset
        try:
            if not self._eager:
                self._consumer.incremental_unassign([TopicPartition(key[0], key[1])])
                self._consumer.incremental_assign([tp])
                return
            current = self._consumer.position(self._consumer.assignment())
            self._consumer.assign([tp if (p.topic, p.partition) == key else self._kept(p) for p in current])
        except KafkaException as exc:
            self._fail(MirrorError(f"flow {self.flow.name}: cannot move {key[0]}[{key[1]}] to offset {offset}: {exc}"))

    def _kept(self, p: TopicPartition) -> TopicPartition:
        """Where an eager move re-assigns another partition: its position, or, with none yet
        (no record returned since it was started), where the worker started it; unknown, from
        the beginning (more copied, nothing skipped), never at the group's offset."""
        if p.offset >= 0:
            return p
        return TopicPartition(p.topic, p.partition, self.starts.get((p.topic, p.partition), OFFSET_BEGINNING))
