"""Keep target topics fit to receive their source topics: present, as many partitions, same configs.

Run on every topic refresh, before a source topic is subscribed, so that a record never
waits for a target partition that does not exist.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mirror.domain.topics import TopicMapping
from mirror.errors import AuthorizationFailed, KafkaOperationError
from mirror.kafka import Admin

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


# What the mirror adds to a record: its provenance header (`mirror.origin` =
# cluster/topic/partition/offset, at most ~330 bytes with a 249-character topic name) plus
# framing. A record that sits exactly at its source topic's limit must still fit the target.
LIMIT_HEADROOM = 1024


def ensure_targets(
    source: Admin,
    target: Admin,
    mappings: Iterable[TopicMapping],
    *,
    existing: Mapping[str, int] | None = None,
    headroom: int = 0,
) -> SyncResult:
    """Create missing target topics and grow ones with fewer partitions than their source.

    `existing` (target topic -> partitions) saves a metadata request when the caller has it.
    `headroom` is added to a `max.message.bytes` copied from the source (the bytes the mirror
    adds to every record, see `LIMIT_HEADROOM`).
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
        wanted: dict[str, tuple[int, int, dict[str, str]]] = {}
        for m in missing:
            partitions, source_rf = details.get(m.source, (m.partitions, 1))
            # Same replication as the source where the target can hold it: MM2 users lose
            # durability when a 3-replica topic arrives with 2 (or 1) replicas.
            rf = min(source_rf, brokers)
            cfg = {k: v for k, v in configs.get(m.source, {}).items() if k in COPIED_CONFIGS}
            if headroom and "max.message.bytes" in cfg:
                cfg["max.message.bytes"] = str(int(cfg["max.message.bytes"]) + headroom)
            if "min.insync.replicas" in cfg and int(cfg["min.insync.replicas"]) > rf:
                cfg["min.insync.replicas"] = str(rf)
            wanted[m.target] = (partitions, rf, cfg)
        # One request for all of them: a flow starting over thousands of topics would
        # otherwise wait a round trip per topic before mirroring anything.
        done = set(target.create_topics(wanted))
        for m in missing:
            if m.target in done:
                partitions, rf, cfg = wanted[m.target]
                created.append(m.target)
                log.info(
                    "created target topic %s (%d partitions, rf %d, %s)",
                    m.target,
                    partitions,
                    rf,
                    cfg or "default configs",
                )
    for m in mappings:
        have = existing.get(m.target)
        if have is not None and have < m.partitions:
            # Fewer target partitions would force records into other partitions and break
            # per-key order; growing is safe for an empty or append-only mirror topic.
            target.create_partitions(m.target, m.partitions)
            grown.append(m.target)
            log.warning(
                "grew target topic %s from %d to %d partitions to match its source", m.target, have, m.partitions
            )
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
        return (
            self.target_partitions is not None and self.target_partitions >= self.source_partitions and not self.drift
        )


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
                if (
                    key == "min.insync.replicas"
                    and trf is not None
                    and b.get(key) == str(trf)
                    and int(a.get(key, trf)) > trf
                ):
                    continue  # capped on purpose at creation
                if (
                    key == "max.message.bytes"
                    and a.get(key)
                    and b.get(key)
                    and 0 <= int(b[key]) - int(a[key]) <= LIMIT_HEADROOM
                ):
                    continue  # raised on purpose at creation: room for the provenance header
                if a.get(key) != b.get(key):
                    drift[key] = (a.get(key), b.get(key))
        out.append(TopicReport(m.source, m.target, sp, tp, srf, trf, drift))
    return out


@dataclass(frozen=True)
class TopicSync:
    """What one sync round did to one target topic, and whether it still differs."""

    source: str
    target: str
    applied: dict[str, str | None]  # config -> value set on the target (None: back to its default)
    grown: tuple[int, int] | None  # (from, to) partitions
    failed: str | None = None  # why the target could not be brought in line: it still drifts
    denied: bool = False  # failed for want of a grant (AuthorizationFailed)

    @property
    def drifting(self) -> bool:
        return self.failed is not None


def sync_topics(source: Admin, target: Admin, mappings: Iterable[TopicMapping]) -> list[TopicSync]:
    """Bring existing target topics in line with their sources: the copied configs, and more partitions.

    What it never does: delete or recreate a topic, lower a partition count (a target with
    more partitions than its source is left alone, see `TopicReport.ok`), or touch a config
    outside `COPIED_CONFIGS` (the target operator's tuning). A config the source no longer
    sets goes back to the target cluster's default. A topic the target refuses to change
    (authorization, a broker policy) is reported as still drifting; the others go on.
    Topics not created yet are the worker's business (created with the source's configs).
    """
    out = []
    for r in compare_topics(source, target, mappings):
        if r.target_partitions is None or r.ok:
            continue
        applied: dict[str, str | None] = {}
        grown = None
        try:
            if r.target_partitions < r.source_partitions:
                try:
                    target.create_partitions(r.target, r.source_partitions)
                except KafkaOperationError as exc:
                    # The worker's own refresh may have grown it a moment ago.
                    if exc.code != "INVALID_PARTITIONS":
                        raise
                grown = (r.target_partitions, r.source_partitions)
                log.info("grew target topic %s from %d to %d partitions to follow its source", r.target, *grown)
            if r.drift:
                set_configs = {k: v for k, (v, _) in r.drift.items() if v is not None}
                if "max.message.bytes" in set_configs:  # room for the provenance header, as at creation
                    set_configs["max.message.bytes"] = str(int(set_configs["max.message.bytes"]) + LIMIT_HEADROOM)
                mis = set_configs.get("min.insync.replicas")
                if mis is not None and r.target_replication and int(mis) > r.target_replication:
                    set_configs["min.insync.replicas"] = str(r.target_replication)  # as at creation
                reset = [k for k, (v, _) in r.drift.items() if v is None]
                target.alter_topic_configs(r.target, set_configs, reset)
                applied = {**set_configs, **dict.fromkeys(reset)}
                log.info(
                    "target topic %s follows its source: %s",
                    r.target,
                    ", ".join(f"{k}={v or 'default'}" for k, v in applied.items()),
                )
        except KafkaOperationError as exc:
            log.warning("target topic %s differs from its source %s and cannot be changed: %s", r.target, r.source, exc)
            out.append(
                TopicSync(r.source, r.target, applied, grown, str(exc), denied=isinstance(exc, AuthorizationFailed))
            )
            continue
        out.append(TopicSync(r.source, r.target, applied, grown))
    return out
