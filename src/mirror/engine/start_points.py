"""`StartPoints`: where the partitions a flow's group never committed start (`start_from`).

Both engines ask it: `mirror run` in the assign callback (`Assignment`), the Spark driver
before each query (`mirror.spark.starts`).

Invariant: only a partition with no committed offset and no copies on the target is ever
moved (a group's offsets expire, offsets.retention.minutes, or are deleted: the copies the
target holds still say the flow mirrored it, so it starts from the beginning, copying more,
never less), and its start is
committed as soon as it is chosen (by `Assignment`), so the choice is made once: a restart,
a rebalance or another worker resumes at the committed start, never at a new "latest".
Records before the start were never mirrored by choice; they are not a gap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mirror.config import FlowConfig
from mirror.domain.acks import SourcePartition
from mirror.domain.naming import target_topic
from mirror.domain.start_from import EARLIEST, StartFrom, chosen_start, start_moment
from mirror.errors import MirrorError
from mirror.kafka import OFFSET_BEGINNING

log = logging.getLogger(__name__)


def wall_ms() -> int:
    return int(time.time() * 1000)


class StartPoints:
    """Chooses the start of never-committed partitions from the flow's `start_from`."""

    def __init__(
        self,
        flow: FlowConfig,
        source: Callable[[], Any],
        now_ms: Callable[[], int] = wall_ms,
        target: Callable[[], Any] | None = None,
    ) -> None:
        self.flow = flow
        self._source = source  # the source's admin, as it is now: offsets by time and the stable ends
        self._target = target  # the target's admin: a target partition holding copies has history
        self._started_ms = now_ms()  # the moment `latest` and a relative time count from
        self._first = True  # the worker's first assignment: `latest` is the end, read then
        self.start = StartFrom.parse(flow.start_from, self._started_ms)

    def choose(
        self,
        partitions: Sequence[SourcePartition],
        starts: Mapping[SourcePartition, int],
        committed: Mapping[SourcePartition, int | None] | None,
    ) -> dict[SourcePartition, int]:
        """The start of each of `partitions` the group never committed (as read into
        `committed`) and that nothing else starts elsewhere than the beginning (`starts`).

        Offsets unreadable (`committed` None) or a source that does not answer: none is
        chosen, and the partition starts as without `start_from` (from the earliest record:
        more is copied, nothing is skipped), said in one WARNING.
        """
        if self.start.kind == EARLIEST or not partitions:
            return {}
        first, self._first = self._first, False
        if committed is None:
            log.warning(
                "flow %s: the group's offsets were unreadable at assignment; start_from %s not applied to %d "
                "partitions (they start at the earliest record)",
                self.flow.name,
                self.flow.start_from,
                len(partitions),
            )
            return {}
        fresh = [
            tp
            for tp in partitions
            if tp in committed and committed[tp] is None and starts.get(tp, OFFSET_BEGINNING) == OFFSET_BEGINNING
        ]
        fresh = self._without_history(fresh)
        if not fresh:
            return {}
        admin = self._source()
        at_ms = start_moment(self.start, self._started_ms, first)
        try:
            ends = admin.end_offsets(fresh)
            times = admin.offsets_for_times(fresh, at_ms) if at_ms is not None else {}
        except MirrorError as exc:
            log.warning(
                "flow %s: start_from %s not applied to %d partitions (they start at the earliest record): %s",
                self.flow.name,
                self.flow.start_from,
                len(fresh),
                exc,
            )
            return {}
        chosen = {tp: chosen_start(times.get(tp), ends[tp]) for tp in fresh if tp in ends}
        log.info(
            "flow %s: %d partitions never mirrored start from %s (earlier records are not mirrored)",
            self.flow.name,
            len(chosen),
            self.flow.start_from,
        )
        return chosen

    def _without_history(self, fresh: list[SourcePartition]) -> list[SourcePartition]:
        """Those of `fresh` whose target partition holds no copies: a partition the flow
        mirrored before its group's offsets expired starts from the beginning instead (its
        copies on the target say so). The target unreadable: none (more copied, nothing skipped)."""
        if self._target is None or not fresh:
            return fresh
        flow = self.flow
        on_target = {tp: (target_topic(tp[0], flow.source, flow.rename), tp[1]) for tp in fresh}
        try:
            ends = self._target().end_offsets(list(on_target.values()), committed_only=False)
        except MirrorError as exc:
            log.warning(
                "flow %s: start_from %s not applied to %d partitions (they start at the earliest record): "
                "the target's ends unreadable, copies there would say they were mirrored before (%s)",
                flow.name,
                flow.start_from,
                len(fresh),
                exc,
            )
            return []
        mirrored = [tp for tp in fresh if ends.get(on_target[tp], 0) > 0]
        if mirrored:
            log.warning(
                "flow %s: %d partitions without committed offsets (expired or deleted) have copies on the target; "
                "start_from %s not applied to them, they start at the earliest record",
                flow.name,
                len(mirrored),
                flow.start_from,
            )
        return [tp for tp in fresh if tp not in mirrored]
