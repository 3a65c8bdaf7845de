"""A record's route from a source partition to its target partition (pure, engine-free).

Both engines use this: the confluent-kafka daemon (`mirror.engine.worker`) and the Spark engine.
A route is computed once per source partition, so the per-record work left to an engine is
copying key, value, headers and timestamp and appending the one provenance header that
changes per record (the source offset).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mirror.domain.flow import Flow
from mirror.domain.naming import target_topic

# Provenance: where a mirrored record came from, as one header `mirror.origin` with the value
# `cluster/topic/partition/offset` (neither cluster nor topic names may contain "/"). It
# lets an auditor match target records to source records, and a consumer on the DR side
# deduplicate after a failover. One header, not four: per record, headers are most of the
# Python work left (what four cost: bench/README.md).
HEADER_ORIGIN = "mirror.origin"

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Route:
    """Where the records of one source partition go, and what their origin header starts with."""

    source_topic: str
    partition: int
    target_topic: str
    origin: bytes | None  # b"cluster/topic/partition/"; None when the flow switched provenance off

    def headers(self, offset: int, original: Sequence[tuple[str, bytes | None]] | None) -> Headers | Sequence[tuple[str, bytes | None]] | None:
        """The record's own headers, in order, then its origin (a new list: the original is not touched)."""
        if self.origin is None:
            return original
        origin = (HEADER_ORIGIN, self.origin + b"%d" % offset)
        return [*original, origin] if original else [origin]


def route(flow: Flow, source_topic: str, partition: int) -> Route:
    """Same partition number on the target: keys keep their partition and order is kept."""
    origin = f"{flow.source}/{source_topic}/{partition}/".encode() if flow.provenance_headers else None
    return Route(source_topic, partition, target_topic(source_topic, flow.source, flow.rename), origin)


def provenance(headers: Sequence[tuple[str, bytes | None]] | None) -> dict[str, str] | None:
    """The newest hop's origin of a mirrored record: cluster, topic, partition, offset.

    A record mirrored twice (hub and spoke) carries one origin header per hop, oldest first.
    """
    values = [v for k, v in (headers or []) if k == HEADER_ORIGIN and v is not None]
    if not values:
        return None
    cluster, topic, partition, offset = values[-1].decode().split("/")
    return {"cluster": cluster, "topic": topic, "partition": partition, "offset": offset}
