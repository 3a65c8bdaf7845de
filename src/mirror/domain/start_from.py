"""`start_from`: where a flow begins a partition its group never committed (pure).

`earliest` (the default) copies everything the source still holds; `latest` only records
written after the flow started; a time (ISO 8601, epoch ms, or relative `-6h`, counted back
from the flow's start) the records from that time on. A partition the group committed is never moved: the
choice is made once per partition, and its start is committed at once, so a restart before
the first record resumes there rather than choosing again.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirror.domain.times import parse_time, relative_ms
from mirror.errors import UsageError

EARLIEST = "earliest"
LATEST = "latest"
_FUTURE = "start_from names the first record to copy: a time that has passed, or latest"


@dataclass(frozen=True, slots=True)
class StartFrom:
    """A parsed `start_from`: `kind` earliest, latest or time; a time is absolute (`at_ms`)
    or reaches `back_ms` before the flow's start."""

    kind: str
    at_ms: int | None = None
    back_ms: int | None = None

    @classmethod
    def parse(cls, value: str, now_ms: int) -> StartFrom:
        """`ValueError` with a one-line reason when `value` is none of the three forms."""
        text = str(value).strip()
        if text.lower() in (EARLIEST, LATEST):
            return cls(text.lower())
        back = relative_ms(text)
        if back is not None:
            return cls("time", back_ms=back)
        try:
            return cls("time", at_ms=parse_time(text, now_ms, "start_from", _FUTURE))
        except UsageError as exc:  # pydantic wants a ValueError
            raise ValueError(f"{exc.message}; write earliest, latest, an ISO 8601 time, epoch ms or -6h") from None

    def timestamp_ms(self, now_ms: int) -> int | None:
        """The time to start from as of `now_ms`; None for earliest and latest."""
        if self.at_ms is not None:
            return self.at_ms
        if self.back_ms is not None:
            return now_ms - self.back_ms
        return None


def start_moment(start: StartFrom, started_ms: int, first: bool) -> int | None:
    """The time whose first record a never-committed partition starts at; None: at its end.

    The moment is fixed when the flow starts (`started_ms`): `latest` is the flow's start, a
    relative time counts back from it. So a topic or partition that appears while the flow
    runs is copied from its first record written after that moment, not from when the flow
    happened to see it (within `refresh_interval`: records written meanwhile would be lost).
    `latest` at the flow's first assignment (`first`) is the partitions' end, read then: a
    record's timestamp is its producer's to set and may lie before the flow started.
    """
    if start.kind == LATEST:
        return None if first else started_ms
    return start.timestamp_ms(started_ms)


def chosen_start(time_offset: int | None, end: int) -> int:
    """The offset a never-committed partition starts at, given the first offset at or after
    the start moment (`time_offset`: None for the end, -1 when no record is that recent) and
    the partition's end (the last stable offset: records of open transactions are to come).
    """
    if time_offset is None or time_offset < 0:
        return end
    return min(time_offset, end)
