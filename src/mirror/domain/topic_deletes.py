"""When a target topic may follow its source topic into deletion (`sync_topic_deletes`).

Two judgements, both pure: how long each source topic has been gone (`GoneTopics`, a grace
clock that a re-created source resets), and whether a sample of a target topic's records is
all the mirror's own copies of that source topic (`foreign_record`). A copy is the mirror's
when its newest provenance header names the flow's source cluster and the source topic; a
record without one, or with another origin, was written by somebody else, and the topic is
kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mirror.domain.route import provenance

Headers = Sequence[tuple[str, bytes | None]]


@dataclass
class GoneTopics:
    """Since when each watched source topic has been missing from the source's listing.

    Invariant: a topic is due only after it was seen missing at two observations at least
    `grace` apart with no observation in between that saw it present; seeing it present
    again (re-created within the grace) starts its count over.
    """

    grace: float
    since: dict[str, float] = field(default_factory=dict)

    def observe(self, present: set[str], watched: Iterable[str], now: float) -> tuple[list[str], list[str], list[str]]:
        """(due: gone for at least the grace; back: gone before and present now; new: first seen gone now)."""
        watched = set(watched)
        back = sorted(t for t in self.since if t in present)
        for t in back:
            del self.since[t]
        for t in list(self.since):
            if t not in watched:
                del self.since[t]  # no longer ours to delete (its record was forgotten)
        due, new = [], []
        for t in sorted(watched - present):
            if t not in self.since:
                self.since[t] = now
                new.append(t)
            if now - self.since[t] >= self.grace:
                due.append(t)
        return due, back, new

    def forget(self, topic: str) -> None:
        self.since.pop(topic, None)


def foreign_record(
    records: Iterable[tuple[int, Headers]], source_cluster: str, source_topic: str
) -> tuple[int, str] | None:
    """The first record (offset, why) in `records` that is not this flow's copy of `source_topic`."""
    for offset, headers in records:
        try:
            origin = provenance(headers)
        except (ValueError, UnicodeDecodeError):
            return offset, "its provenance header does not parse"
        if origin is None:
            return offset, "it has no provenance header"
        if origin["cluster"] != source_cluster or origin["topic"] != source_topic:
            return offset, f"it came from {origin['cluster']}/{origin['topic']}"
    return None


@dataclass
class SourceWipe:
    """Whether the source looks wiped: rebuilt empty at the same address, not pruned.

    Invariant: once the canary topic, listed at one observation, is gone at the next together
    with every topic of the flow, the source counts as wiped for good (for this deleter's
    life: until the flow or `mirror run` restarts). The mirror made the canary topic itself and
    nobody deletes it on purpose; a source that loses it and everything else at once lost its
    storage or is another cluster, and deleting its DR copies would lose the only copy left.
    """

    canary_seen: bool = False
    wiped: bool = False

    def observe(self, canary_listed: bool, flow_topics_listed: bool) -> bool:
        """Note one listing; True once the source counts as wiped."""
        if not self.wiped and self.canary_seen and not canary_listed and not flow_topics_listed:
            self.wiped = True
        self.canary_seen = canary_listed
        return self.wiped
