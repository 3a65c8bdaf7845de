"""A record's route from a source partition to its target partition (pure, engine-free).

Both engines use this: the confluent-kafka daemon (`mirror.engine`) and the Spark engine.
A route is computed once per source partition, so the per-record work left to an engine is
copying key, value, headers and timestamp and appending the one provenance header that
changes per record (the source offset).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .config import FlowConfig
from .naming import target_topic

# Provenance headers: where a mirrored record came from. They let an auditor match target
# records to source records, and let a consumer on the DR side deduplicate after failover.
HEADER_CLUSTER = "mirror.origin.cluster"
HEADER_TOPIC = "mirror.origin.topic"
HEADER_PARTITION = "mirror.origin.partition"
HEADER_OFFSET = "mirror.origin.offset"

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Route:
    """Where the records of one source partition go, and what constant headers they get."""

    source_topic: str
    partition: int
    target_topic: str
    provenance: tuple[tuple[str, bytes], ...]  # empty when the flow switched them off

    def headers(self, offset: int, original: Sequence[tuple[str, bytes | None]] | None) -> Headers | None:
        """The record's own headers, in order, then the provenance headers."""
        if not self.provenance:
            return list(original) if original else None
        out: Headers = list(original) if original else []
        out.extend(self.provenance)
        out.append((HEADER_OFFSET, b"%d" % offset))
        return out


def route(flow: FlowConfig, source_topic: str, partition: int) -> Route:
    """Same partition number on the target: keys keep their partition and order is kept."""
    prov: tuple[tuple[str, bytes], ...] = ()
    if flow.provenance_headers:
        prov = (
            (HEADER_CLUSTER, flow.source.encode()),
            (HEADER_TOPIC, source_topic.encode()),
            (HEADER_PARTITION, b"%d" % partition),
        )
    return Route(source_topic, partition, target_topic(source_topic, flow.source, flow.rename), prov)


def provenance(headers: Sequence[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """The provenance headers of a mirrored record (for audits and tests)."""
    names = {HEADER_CLUSTER, HEADER_TOPIC, HEADER_PARTITION, HEADER_OFFSET}
    return {k: v.decode() for k, v in (headers or []) if k in names and v is not None}
