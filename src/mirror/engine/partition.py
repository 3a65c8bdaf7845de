"""One assigned source partition as every engine unit sees it, and what the units ask of the
group's side of the worker.

The small module the units share: `AssignedPartition` (a partition's ledger with its target
producer and limits), `CommitTags` (commits tagged with their target topic's id),
`read_committed`, and `Rebalance`, the part of the rebalance callbacks (engine/assignment.py)
that `TargetWatch` and `Resync` call. The callbacks depend on the units, never the other way
round: a unit that imported `Assignment` would close a cycle through every unit it wires.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.acks import SourcePartition
from mirror.domain.ledger import Ledger, PartitionLedger
from mirror.domain.route import Route
from mirror.engine.lifecycle import FlowLifecycle
from mirror.kafka import KafkaException, TopicPartition, committed_offsets, raise_for

TID = "target-topic-id="  # commit metadata: see `CommitTags.offset`
DRAIN_TIMEOUT = 30.0  # how long a stop (or a revoke) waits for outstanding acknowledgements


@dataclass(slots=True)
class AssignedPartition(PartitionLedger):
    """The ledger of one assigned source partition, with what the worker needs to write it."""

    producer: Any = None  # the producer whose batches fit this target topic's limit
    room: int = 1 << 62  # key + value bytes below which a record surely fits the target's limit
    limit: int | None = None  # the target topic's max.message.bytes
    # The target topic's id when this worker began writing this partition: a different id
    # later means the topic was deleted and created again under it.
    target_id: str | None = None


class CommitTags:
    """The target topics' ids as this worker last saw them, and the commits tagged with them.

    Invariant: every commit a worker makes names the id of the target topic its offset was
    mirrored into (when known), so whoever resumes from it can tell whether that topic is
    still the same one, across restarts and workers. `TargetWatch` alone writes `ids`.
    """

    def __init__(self, ledger: Ledger[AssignedPartition]) -> None:
        self._ledger = ledger
        self.ids: dict[str, str] = {}  # target topic -> topic id when last seen

    def offset(self, tp: SourcePartition, offset: int) -> TopicPartition:
        """A source offset to commit, tagged with the id of its partition's target topic."""
        part = self._ledger.parts.get(tp)
        # The id of the topic this partition writes to: `_stale_commits` may have seen a
        # re-creation the refresh (`ids`) has not yet.
        tid = (part.target_id or self.ids.get(part.route.target_topic)) if part is not None else None
        return TopicPartition(tp[0], tp[1], offset, f"{TID}{tid}") if tid else TopicPartition(tp[0], tp[1], offset)


def read_committed(
    consumer: Any,
    flow: FlowConfig,
    source: ClusterConfig,
    partitions: list[TopicPartition],
    timeout: float | None = None,
) -> dict[SourcePartition, int | None]:
    """The group's committed offsets (None: nothing committed); `MirrorError` if unreadable."""
    timeout = timeout or source.timeout
    try:
        got = committed_offsets(consumer, partitions, timeout)
    except KafkaException as exc:
        raise_for(flow.source, f"read the committed offsets of group {flow.group_id!r}", exc, timeout)
    return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in got}


class Rebalance(Protocol):
    """What `TargetWatch` and `Resync` ask of the group's side (`Assignment`)."""

    eager: bool  # an eager assignor (roundrobin, range): whole assignments, not increments
    lifecycle: FlowLifecycle  # the start and rebalance lines operators read

    def note_created(self, partitions: list[TopicPartition], targets: Sequence[str]) -> None: ...

    def subscribe(self, topics: list[str]) -> None: ...

    def unsubscribe(self) -> None: ...

    def new_partition(self, r: Route) -> AssignedPartition: ...

    def rewind_group(self, partitions: Sequence[SourcePartition]) -> None: ...
