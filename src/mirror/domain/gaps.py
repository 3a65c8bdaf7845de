"""Source gaps: records the source lost before the mirror copied them (pure).

A gap is a range of source offsets of one partition that never reached the target: deleted
by retention (or delete-records) while the mirror was behind or stopped, cut off by an
unclean leader election, or gone with a topic deleted and created again. Both engines
detect gaps themselves rather than let the Kafka client reset positions silently, report
each one the same way (`SourceGap.describe`), count it, and record it in the offset map
so that failover names those records as never mirrored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum


class GapReason(str, Enum):
    """Why records were skipped (the `reason` label of mirror_source_records_skipped_total)."""

    RETENTION = "retention"  # deleted at the source (retention, delete-records) before they were copied
    TRUNCATED = "truncated"  # the source log ends below the mirror's position (unclean leader election)
    RECREATED = "recreated"  # the source topic was deleted and created again
    NOT_STARTED = "not-started"  # before where the flow was told to start (never meant to be copied)


class GapPolicy(str, Enum):
    """A flow's `on_source_gap`: what the mirror does when it finds a gap."""

    SKIP = "skip"  # report it (log, counter, offset map) and mirror on from the first record left
    STOP = "stop"  # report it and stop the flow before copying anything past it


@dataclass(frozen=True, slots=True)
class SourceGap:
    """Source offsets `first`..`last` (inclusive) of one partition, never mirrored."""

    topic: str
    partition: int
    first: int
    last: int
    reason: GapReason

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    def describe(self) -> str:
        """The words both engines use for a gap: partition, offsets, how many, why."""
        return (
            f"{self.topic}[{self.partition}]: source records {self.first}..{self.last} ({self.count}) "
            f"were never mirrored: {_WHY[self.reason]}"
        )

    def covers(self, position: int) -> bool:
        return self.first <= position <= self.last


_WHY = {
    GapReason.RETENTION: "deleted at the source before they were copied (retention or delete-records)",
    GapReason.TRUNCATED: "the source log was truncated below the mirror's position (unclean leader election?)",
    GapReason.RECREATED: "the source topic was deleted and created again before they were copied",
    GapReason.NOT_STARTED: "before the flow's start",
}


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a partition whose position fell outside the source log resumes, and what it skips."""

    offset: int
    gap: SourceGap | None  # None: nothing skipped (the log was truncated below records already copied)
    truncated: int = 0  # records copied that the source no longer holds (a truncation), 0 otherwise


def resume_outside_log(topic: str, partition: int, position: int, low: int, high: int) -> Resume:
    """Where to resume a partition whose next offset to copy (`position`) lies outside the
    source log [`low`, `high`), and the gap that leaves.

    Before the log start: the records `position`..`low - 1` were deleted before they were
    copied; resume at `low`. Past the log end: the log was truncated below records already
    copied (an unclean leader election), or the topic was created again under the same name
    (the caller tells that apart by the topic's id). Resuming at the end would skip the new
    records written there, resuming at the beginning would copy the old ones twice: resume
    at `high`, where the source writes next, skipping nothing.
    """
    if position < low:
        return Resume(low, SourceGap(topic, partition, position, low - 1, GapReason.RETENTION))
    if position > high:
        return Resume(high, None, truncated=position - high)
    return Resume(position, None)


def gap_inside(gaps: Sequence[SourceGap], position: int | None) -> SourceGap | None:
    """The recorded gap that holds source offset `position`, if any."""
    for gap in gaps:
        if position is not None and gap.covers(position):
            return gap
    return None


def recreated_while_stopped(
    recorded_id: str | None, now_id: str | None, committed: Sequence[int | None], history: bool
) -> bool:
    """Whether a source topic was deleted and created again while no worker of the flow ran.

    Kafka drops a group's offsets with their topic, so the group has none for any of its
    partitions (`committed`); and the topic's id (`now_id`) is not the one the flow recorded
    when it last mirrored it (`recorded_id`), or, with none recorded (a store from before
    ids were recorded), the offset store holds the flow's history of it (`history`: rows or
    source ends). A topic the group committed is not new to it, whatever its id.
    """
    if now_id is None or any(c is not None for c in committed):
        return False
    return recorded_id != now_id if recorded_id is not None else history


def old_unmirrored(ends: Mapping[int, int], copied: Mapping[int, int]) -> int | None:
    """How many records of a deleted topic the flow had not copied: per partition, past the
    newest copied one (`copied`: partition -> its source offset) up to the end the flow last
    saw (`ends`: partition -> end offset). None: no end was ever seen (unknown)."""
    if not ends:
        return None
    return sum(max(0, end - copied.get(p, -1) - 1) for p, end in ends.items())
