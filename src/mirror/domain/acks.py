"""What the data path tells the rest of the system: records the target acknowledged.

The engine (`mirror.engine.worker`) produces records and learns from delivery reports which ones
the target has stored. It hands those facts, batched per source partition, to every
`AckListener` (the offset-map recorder, the metrics counters, …) and asks them, before each
source offset commit, whether they are ready for it. That second call is how invariant 1
holds: a delta change is stored durably before the source offset past it is committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

SourcePartition = tuple[str, int]  # (source topic, partition)


@dataclass(slots=True)
class AckBatch:
    """Records of one source partition acknowledged by the target since the last batch.

    `syncs` lists the (source offset, target offset) pairs where target - source differs
    from the previous acknowledged record's (the first record after a start always counts
    as a change). Between two syncs every record has the same delta, so the pairs are all
    that offset translation needs.
    """

    flow: str
    source_topic: str
    partition: int
    target_topic: str
    first_offset: int  # first source offset acknowledged in this batch
    next_offset: int  # last acknowledged source offset + 1
    count: int = 0
    bytes: int = 0  # key + value bytes
    max_timestamp_ms: int = -1  # newest record timestamp in the batch
    syncs: list[tuple[int, int]] = field(default_factory=list)


class AckListener(Protocol):
    def on_acked(self, batches: Sequence[AckBatch]) -> None:
        """Called on the flow's thread, off the per-record path, with new acknowledgements."""

    def before_commit(self, flow: str, positions: Mapping[SourcePartition, int]) -> None:
        """Make durable whatever must be before these source positions are committed.

        Raise `OffsetStoreError` (or any `MirrorError`) to veto the commit; the engine keeps
        mirroring, retries the commit later, and reports the reason.
        """

    def on_reset(self, flow: str, partitions: Sequence[SourcePartition]) -> None:
        """These partitions are being mirrored again from the beginning into a new target topic
        (the old one was deleted): earlier acknowledgements, and offset-map rows, no longer hold."""

    def close(self) -> None:
        """The flow stops; flush and release resources."""


def backlog_full(listeners: Sequence[AckListener]) -> bool:
    """Does a listener hold too much not yet made durable (its store is away)?

    Optional for listeners (`backlog_full` attribute): the engine then pauses reading, so
    memory stays bounded while commits are held back.
    """
    return any(getattr(listener, "backlog_full", False) for listener in listeners)


def targets_created(
    listeners: Sequence[AckListener], flow: str, created: Mapping[str, tuple[str, str]], source_cluster_id: str = ""
) -> None:
    """Tell the listeners which target topics this worker created: target -> (source topic,
    target topic id, "" when not known yet), and the source cluster's id ("" if not known).

    Optional for listeners (`on_targets_created`): the offset-map recorder keeps them, so
    `sync_topic_deletes` only ever deletes a topic the mirror made itself.
    """
    for listener in listeners:
        hook = getattr(listener, "on_targets_created", None)
        if hook is not None:
            hook(flow, created, source_cluster_id=source_cluster_id)
