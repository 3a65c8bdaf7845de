"""What every offset store offers, and the types shared by the backends (no I/O here).

`OffsetStore` (in `mirror.domain.offsetmap`) is the engine's narrow port: write rows, read a
partition's rows, write checkpoints. `FullOffsetStore` adds what failover, the checkpointer
and the tests ask for. Both backends (`sqlite`, `cassandra`) implement it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from mirror.domain.gaps import SourceGap
from mirror.domain.offsetmap import OffsetStore, OffsetSync
from mirror.errors import OffsetStoreError

# A position past any real offset: `floor_sync(..., NEWEST)` is a partition's newest row.
NEWEST = 2**62

SourceEnds = Mapping[tuple[str, int], int]


@dataclass(frozen=True)
class CreatedTopic:
    """A target topic the mirror created: its source topic and the id it got (for `sync_topic_deletes`).

    The id tells this topic apart from one of the same name created later by someone else;
    "" when the target did not describe it yet at creation. The source cluster's id tells a
    source rebuilt empty at the same address from the one the topic came from; "" when the
    source did not say it."""

    target: str
    source: str
    topic_id: str
    time_ms: int
    source_cluster_id: str = ""


@runtime_checkable
class CreatedTopicStore(Protocol):
    """Target topics the mirror created, per flow (both backends; `sync_topic_deletes` reads them)."""

    def record_created_topics(self, flow: str, topics: Sequence[CreatedTopic]) -> None: ...

    def created_topics(self, flow: str) -> list[CreatedTopic]: ...

    def forget_created_topic(self, flow: str, target: str) -> None: ...


class FullOffsetStore(OffsetStore, Protocol):
    """What both backends offer beyond the engine's contract (failover and tests use it)."""

    def floor_sync(self, flow: str, topic: str, partition: int, position: int) -> OffsetSync | None: ...

    def next_sync(self, flow: str, topic: str, partition: int, position: int) -> OffsetSync | None:
        """The oldest row with `source_offset > position` (where a gap ends)."""
        ...

    def delete_syncs(self, flow: str, partitions: Sequence[tuple[str, int]]) -> None:
        """Forget the rows, tips and checkpoints of these source partitions (their target topic was recreated)."""
        ...

    def delete_syncs_after(self, flow: str, topic: str, partition: int, source_offset: int) -> None:
        """Forget rows with `source_offset` greater than this (superseded by a re-mirror)."""
        ...

    def write_source_ends(self, flow: str, ends: SourceEnds, time_ms: int) -> None: ...

    def source_ends(self, flow: str) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) -> (source end offset, time_ms it was seen)."""
        ...

    def sync_count(self, flow: str) -> int: ...

    def gaps(self, flow: str) -> dict[tuple[str, int], list[SourceGap]]:
        """The flow's recorded source gaps per source partition, oldest first."""
        ...

    def describe(self) -> str: ...

    def synced_acls(self, flow: str) -> set[str]:
        """The target ACLs the flow's ACL sync created (`Acl.key()`s), and only those: what it may remove."""
        ...

    def claim_acls(self, flow: str, acls: Iterable[str]) -> None:
        """Record ACLs as the sync's own, before it creates them (a second worker then never takes them for
        someone else's)."""
        ...

    def forget_acls(self, flow: str, acls: Iterable[str]) -> None: ...

    def record_source_topic_ids(self, flow: str, ids: Mapping[str, str]) -> None:
        """Remember the ids of the source topics the flow mirrors (a re-created topic has another)."""
        ...

    def source_topic_ids(self, flow: str) -> dict[str, str]:
        """Source topic -> its id, as the flow last recorded it."""
        ...


def sync_window(store: FullOffsetStore, flow: str, topic: str, partition: int, position: int) -> list[OffsetSync]:
    """The rows `translate` needs for `position`: the floor row and the one after it."""
    floor = store.floor_sync(flow, topic, partition, position)
    nxt = store.next_sync(flow, topic, partition, position)
    return [r for r in (floor, nxt) if r is not None]


@dataclass(frozen=True)
class SyncWindow:
    """A partition's rows around a position: what translating it and bounding it need."""

    floor: OffsetSync | None
    next: OffsetSync | None
    newest: OffsetSync | None

    @property
    def rows(self) -> list[OffsetSync]:
        """What `sync_window` returns: the floor row and the one after it."""
        return [r for r in (self.floor, self.next) if r is not None]


def sync_tips(
    store: FullOffsetStore, flow: str, partitions: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], OffsetSync | None]:
    """`tip` of many partitions: in bulk where the backend can (`tips()`), else one by one
    (one query per partition, per checkpoint tick and failover plan)."""
    bulk = getattr(store, "tips", None)
    if bulk is not None:
        return bulk(flow, partitions)  # type: ignore[no-any-return]
    return {(t, p): store.tip(flow, t, p) for t, p in partitions}


def sync_windows(
    store: FullOffsetStore, flow: str, positions: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], SyncWindow]:
    """`SyncWindow` of many partitions at once.

    A checkpoint or a failover plan covers every partition of a group: one request per
    partition and row kind would be three round trips per partition. A backend with
    `windows()` answers them in bulk; others one by one.
    """
    bulk = getattr(store, "windows", None)
    if bulk is not None:
        return bulk(flow, positions)  # type: ignore[no-any-return]
    return {
        (t, p): SyncWindow(
            store.floor_sync(flow, t, p, pos), store.next_sync(flow, t, p, pos), store.floor_sync(flow, t, p, NEWEST)
        )
        for (t, p), pos in positions.items()
    }


def group_sync_windows(
    store: FullOffsetStore, flow: str, positions: Mapping[str, Mapping[tuple[str, int], int]]
) -> dict[str, dict[tuple[str, int], SyncWindow]]:
    """`sync_windows` of many groups (group -> its positions), one bulk read per round.

    A site's groups mostly stand at the same offsets of the same partitions (they read the
    same topics, caught up): each distinct (partition, position) is read once, and a round
    asks for one position of every partition, so there are as many rounds as the most
    positions any one partition has, not one per group.
    """
    wanted: dict[tuple[str, int], list[int]] = {}
    for offsets in positions.values():
        for key, pos in offsets.items():
            wanted.setdefault(key, []).append(pos)
    distinct = {k: sorted(set(v)) for k, v in wanted.items()}
    found: dict[tuple[tuple[str, int], int], SyncWindow] = {}
    for i in range(max((len(v) for v in distinct.values()), default=0)):
        batch = {k: v[i] for k, v in distinct.items() if i < len(v)}
        found.update({(k, batch[k]): w for k, w in sync_windows(store, flow, batch).items()})
    return {g: {k: found[(k, pos)] for k, pos in offsets.items()} for g, offsets in positions.items()}


def checkpointed_groups(store: FullOffsetStore, flow: str) -> list[str]:
    """The groups a flow holds checkpoints of (what a site failover plans when the source is gone)."""
    bulk = getattr(store, "checkpointed_groups", None)
    if bulk is None:
        # Both shipped backends list them; a store without the query gets one line, not a traceback.
        raise OffsetStoreError(f"{store.describe()} cannot list checkpointed groups")
    return sorted(bulk(flow))
