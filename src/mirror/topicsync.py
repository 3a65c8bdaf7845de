"""Keep target topics fit to receive their source topics: present, as many partitions, same configs.

Run on every topic refresh, before a source topic is subscribed, so that a record never
waits for a target partition that does not exist.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .kafka import Admin
from .topics import TopicMapping

log = logging.getLogger(__name__)

# Topic configs that change what a consumer sees or how long data lives; copied at creation.
# Cluster-local tuning (segment sizes, flush, placement) is the target operator's business.
COPIED_CONFIGS = (
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
    "compression.type",
    "message.timestamp.type",
    "min.insync.replicas",
)


@dataclass(frozen=True)
class SyncResult:
    created: tuple[str, ...]  # target topics created by this call (they start empty)
    grown: tuple[str, ...]  # target topics given more partitions


def ensure_targets(source: Admin, target: Admin, mappings: Iterable[TopicMapping], *, existing: Mapping[str, int] | None = None) -> SyncResult:
    """Create missing target topics and grow ones with fewer partitions than their source.

    `existing` (target topic -> partitions) saves a metadata request when the caller has it.
    """
    mappings = list(mappings)
    if not mappings:
        return SyncResult((), ())
    if existing is None:
        existing = target.topics()
    missing = [m for m in mappings if m.target not in existing]
    created, grown = [], []
    if missing:
        details = source.topic_details()
        configs = source.topic_configs([m.source for m in missing if m.source in details])
        brokers = max(1, target.broker_count())
        for m in missing:
            partitions, source_rf = details.get(m.source, (m.partitions, 1))
            # Same replication as the source where the target can hold it: MM2 users lose
            # durability when a 3-replica topic arrives with 2 (or 1) replicas.
            rf = min(source_rf, brokers)
            cfg = {k: v for k, v in configs.get(m.source, {}).items() if k in COPIED_CONFIGS}
            if "min.insync.replicas" in cfg and int(cfg["min.insync.replicas"]) > rf:
                cfg["min.insync.replicas"] = str(rf)
            if target.create_topic(m.target, partitions, rf, cfg):
                created.append(m.target)
                log.info("created target topic %s (%d partitions, rf %d, %s)", m.target, partitions, rf, cfg or "default configs")
    for m in mappings:
        have = existing.get(m.target)
        if have is not None and have < m.partitions:
            # Fewer target partitions would force records into other partitions and break
            # per-key order; growing is safe for an empty or append-only mirror topic.
            target.create_partitions(m.target, m.partitions)
            grown.append(m.target)
            log.warning("grew target topic %s from %d to %d partitions to match its source", m.target, have, m.partitions)
    return SyncResult(tuple(created), tuple(grown))


@dataclass(frozen=True)
class TopicReport:
    """How a target topic compares with its source (for `mirror topics`)."""

    source: str
    target: str
    source_partitions: int
    target_partitions: int | None  # None: not created yet
    source_replication: int
    target_replication: int | None
    drift: dict[str, tuple[str | None, str | None]]  # config -> (source value, target value)

    @property
    def ok(self) -> bool:
        return self.target_partitions is not None and self.target_partitions >= self.source_partitions and not self.drift


def compare_topics(source: Admin, target: Admin, mappings: Iterable[TopicMapping]) -> list[TopicReport]:
    """Partition counts, replication and the copied topic configs, side by side."""
    mappings = list(mappings)
    sdet, tdet = source.topic_details(), target.topic_details()
    present = [m for m in mappings if m.target in tdet]
    scfg = source.topic_configs([m.source for m in present])
    tcfg = target.topic_configs([m.target for m in present])
    out = []
    for m in mappings:
        sp, srf = sdet.get(m.source, (m.partitions, 0))
        tp, trf = tdet.get(m.target, (None, None))
        drift: dict[str, tuple[str | None, str | None]] = {}
        if tp is not None:
            a, b = scfg.get(m.source, {}), tcfg.get(m.target, {})
            for key in COPIED_CONFIGS:
                if key == "min.insync.replicas" and trf is not None and b.get(key) == str(trf) and int(a.get(key, trf)) > trf:
                    continue  # capped on purpose at creation
                if a.get(key) != b.get(key):
                    drift[key] = (a.get(key), b.get(key))
        out.append(TopicReport(m.source, m.target, sp, tp, srf, trf, drift))
    return out
