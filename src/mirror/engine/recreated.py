"""`RecreatedTopics`: a source topic deleted and created again while the flow was stopped.

Kafka drops the group's offsets with the topic, so nothing in the group tells the new topic
from one never mirrored: the flow would mirror it from its beginning (or from `start_from`)
without a word, and the old topic's records it had not copied yet would be lost silently.
The offset store remembers each source topic's id as the flow last mirrored it; at
assignment, a topic with no committed offset whose id differs (or, with no id recorded, of
which the store holds rows) was re-created (`mirror.domain.gaps.recreated_while_stopped`):
one WARNING, the counter (`reason="recreated"`: the old topic's records not yet copied, if
the store saw its end), and the new topic is mirrored from its beginning.

No `offset_gaps` row: the old topic's offsets name nothing in the new one (the offset-map
rows of the old incarnation are dropped as the partition starts again, `on_reset`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from mirror.domain.acks import AckListener, SourcePartition
from mirror.domain.gaps import GapReason, SourceGap, old_unmirrored, recreated_while_stopped
from mirror.errors import MirrorError
from mirror.store.base import sync_tips

log = logging.getLogger(__name__)


class RecreatedTopics:
    """Tells, at assignment, the source topics re-created while no worker ran, and records
    the ids of the topics assigned (so the next start can tell)."""

    def __init__(self, flow: str, store: Any, listeners: Sequence[AckListener]) -> None:
        self.flow, self.store, self._listeners = flow, store, listeners
        # The source ends the store saw before this worker started: the checkpointer, started
        # with it, soon writes the new topic's ends over the old one's. Read once, as the
        # worker is made; later checks read the store as it is.
        self._ends_at_start: dict[tuple[str, int], tuple[int, int]] | None = None
        try:
            self._ends_at_start = store.source_ends(flow)
        except MirrorError as exc:
            log.debug("flow %s: the source ends the store saw are unreadable: %s", flow, exc)

    @classmethod
    def of(cls, flow: str, listeners: Sequence[AckListener]) -> RecreatedTopics | None:
        """The flow's, on the offset store one of its `listeners` writes to (None: no store keeps ids)."""
        for listener in listeners:
            store = getattr(listener, "store", None)
            if hasattr(store, "source_topic_ids") and hasattr(store, "source_ends"):
                return cls(flow, store, listeners)
        return None

    def _source_ends(self) -> dict[tuple[str, int], tuple[int, int]]:
        ends, self._ends_at_start = self._ends_at_start, None
        return ends if ends is not None else self.store.source_ends(self.flow)

    def check(
        self,
        ids: Mapping[str, str],
        partitions: Sequence[SourcePartition],
        committed: Mapping[SourcePartition, int | None] | None,
        known: set[str],
    ) -> set[str]:
        """The topics of `partitions` re-created while the flow was stopped, reported; `ids`:
        the source topics' ids now, `committed`: the group's offsets as read at assignment
        (None: unreadable, nothing decided or recorded), `known`: topics already found
        re-created (while this worker ran). Unreadable store: none (said at DEBUG)."""
        topics: dict[str, list[SourcePartition]] = {}
        for tp in partitions:
            topics.setdefault(tp[0], []).append(tp)
        if committed is None or not topics:
            return set()
        try:
            recorded = self.store.source_topic_ids(self.flow)
            found = self._find(ids, topics, committed, recorded, known)
            self.store.record_source_topic_ids(
                self.flow, {t: ids[t] for t in topics if t in ids and recorded.get(t) != ids[t]}
            )
        except MirrorError as exc:
            log.debug("flow %s: the source topics' recorded ids are unreadable: %s", self.flow, exc)
            return set()
        return found

    def _find(
        self,
        ids: Mapping[str, str],
        topics: Mapping[str, list[SourcePartition]],
        committed: Mapping[SourcePartition, int | None],
        recorded: Mapping[str, str],
        known: set[str],
    ) -> set[str]:
        candidates = {
            t: parts
            for t, parts in topics.items()
            if t in ids and t not in known and all(committed.get(tp) is None for tp in parts)
        }
        if not candidates:
            return set()
        parts = [tp for ps in candidates.values() for tp in ps]
        tips = {tp: s.source_offset for tp, s in sync_tips(self.store, self.flow, parts).items() if s is not None}
        ends = {tp: end for tp, (end, _) in self._source_ends().items() if tp[0] in candidates}
        found = set()
        for topic, ps in sorted(candidates.items()):
            history = any(tp in tips or tp in ends for tp in ps)
            if not recreated_while_stopped(recorded.get(topic), ids[topic], [None] * len(ps), history):
                continue
            found.add(topic)
            count = old_unmirrored(
                {p: e for (t, p), e in ends.items() if t == topic}, {p: o for (t, p), o in tips.items() if t == topic}
            )
            self._report(topic, count)
        return found

    def _report(self, topic: str, count: int | None) -> None:
        how_many = "how many is unknown" if count is None else f"{count} by the offset store's last look"
        log.warning(
            "flow %s: source topic %s was deleted and created again while the flow was stopped; records of the old "
            "topic not yet copied were never mirrored (%s); mirroring the new one from its beginning",
            self.flow,
            topic,
            how_many,
        )
        gap = SourceGap(topic, -1, 0, (count or 0) - 1, GapReason.RECREATED)
        for listener in self._listeners:
            on_gap = getattr(listener, "on_gap", None)
            if on_gap is not None:
                on_gap(self.flow, gap)
