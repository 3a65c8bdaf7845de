"""The I/O half of planning: collect the facts `failover.plan` turns into a plan.

Reads the group's positions (live from the source; from the newest checkpoints when the
source does not answer), the offset map, the target's watermarks and, for `--at`, the
target's timestamp index. It changes nothing anywhere.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from failover.plan import (
    Method,
    PartitionFacts,
    Plan,
    Truth,
    make_plan,
    mirrored_end_from_target,
)
from mirror.config import Config, FlowConfig
from mirror.domain.naming import target_topic
from mirror.domain.offsetmap import OffsetSync
from mirror.errors import ClusterUnavailable, MirrorError, NotFound, UsageError
from mirror.kafka import Admin, PendingOffsets, TopicPartition, make_consumer
from mirror.store import FullOffsetStore, sync_tips, sync_windows

log = logging.getLogger(__name__)



@dataclass
class FlowContext:
    """A flow's clusters and offset store, opened lazily (a dead source must not block --at)."""

    config: Config
    flow: FlowConfig
    store_factory: Callable[[], FullOffsetStore]
    _store: FullOffsetStore | None = None
    _admins: dict[str, Admin] = field(default_factory=dict)

    @property
    def store(self) -> FullOffsetStore:
        if self._store is None:
            self._store = self.store_factory()
        return self._store

    def admin(self, cluster: str) -> Admin:
        if cluster not in self._admins:
            self._admins[cluster] = Admin(cluster, self.config.cluster(cluster))
        return self._admins[cluster]

    @property
    def source(self) -> Admin:
        return self.admin(self.flow.source)

    @property
    def target(self) -> Admin:
        return self.admin(self.flow.target)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def check_group(flow: FlowConfig, flow_index: int, group: str) -> None:
    """The flow must name the group in `groups`: only those are checkpointed and trusted."""
    key = f"flows[{flow_index}].groups"
    if not flow.groups:
        raise UsageError(f"flow {flow.name!r} has no consumer groups to fail over", hint=f"add the group's pattern to {key} in the config")
    if not any(re.fullmatch(p, group) for p in flow.groups):
        raise UsageError(f"group {group!r} does not match {key} of flow {flow.name!r} ({', '.join(flow.groups)})", hint=f"add a pattern matching it to {key}")


def build_plan(ctx: FlowContext, group: str, method: Method, *, at_ms: int | None = None) -> Plan:
    flow = ctx.flow
    check_group(flow, ctx.config.flows.index(flow), group)
    topic_ok = flow.topic_filter(ctx.config.canary.topic).matches

    positions: dict[tuple[str, int], int] = {}
    source_ends: dict[tuple[str, int], int] = {}
    source_logs: dict[tuple[str, int], tuple[int, int]] = {}
    checkpoint_offsets: dict[tuple[str, int], int] = {}
    mirror_committed: dict[tuple[str, int], int] = {}
    truth = Truth.SOURCE
    checkpoint_time: int | None = None
    # The target's topics listed while the source answers (each listing is a quarter of a
    # second at 10,000 partitions). Nothing below depends on the order of the two.
    target_topics = ctx.target.request_topics()
    try:
        # Metadata first: group requests against a dead cluster wait on a coordinator
        # lookup that librdkafka (2.16) can abort the process on when it times out
        # (`eonce->refcnt > 0` assertion), so a source that does not answer this is
        # treated as gone before any group request is sent to it.
        listed = ctx.source.topics()
        # Topics it may not Describe are left out of listings and of the group's offsets:
        # that must not pass for a source that is gone (and a plan from checkpoints).
        ctx.source.require_visible(flow.topics.include, listed, "Describe")
        # The group's offsets of the flow's partitions as the source lists them, asked for
        # by name (in chunks, all in flight: mirror.kafka.offsets); a topic the source no
        # longer has could not be planned from it anyway.
        mine = [(t, p) for t, n in listed.items() if topic_ok(t) for p in range(n)]
        pending_group = ctx.source.request_group_offsets(group, mine)
        try:  # in flight together with the group's (10,000 partitions each)
            pending_mirror: PendingOffsets[int] | None = ctx.source.request_group_offsets(flow.group_id, mine)
        except MirrorError:
            pending_mirror = None  # asked again below, only when needed: its failure matters only then
        positions = pending_group.result()
        if positions:
            pending = ctx.source.request_end_offsets(positions)  # in flight while the mirror's offsets are read
            mirror_committed = (pending_mirror or ctx.source.request_group_offsets(flow.group_id, mine)).result()
            source_ends = pending.result()
    except ClusterUnavailable as exc:
        log.warning("source %s did not answer (%s); using the newest checkpoints", flow.source, exc)
        positions = {}
        truth = Truth.CHECKPOINTS
    if not positions:
        checkpoints = ctx.store.checkpoints(flow.name, group)
        if checkpoints:
            positions = {(c.topic, c.partition): c.source_offset for c in checkpoints if topic_ok(c.topic)}
            checkpoint_offsets = {(c.topic, c.partition): c.target_offset for c in checkpoints}
            checkpoint_time = min(c.time_ms for c in checkpoints)
            truth = Truth.CHECKPOINTS
            if not source_ends:
                source_ends = {k: end for k, (end, _ms) in ctx.store.source_ends(flow.name).items()}
    if not positions:
        raise NotFound(
            f"group {group!r} has no committed offsets on {flow.source!r} for the topics of flow {flow.name!r}, and no checkpoints",
            hint="check the group name (`mirror failover export --cluster SOURCE --group G` shows what it committed)",
        )
    if method is Method.TIMESTAMP:
        truth = Truth.TIMESTAMPS
    elif method in (Method.EARLIEST, Method.LATEST):
        truth = Truth.WATERMARKS

    names = {t: target_topic(t, flow.source, flow.rename) for t, _ in positions}
    existing = target_topics()
    missing = sorted({f"{names[t]}" for t, _ in positions if names[t] not in existing})
    ctx.target.require_visible([], existing, "Read", literal=missing)  # not there, or not visible?
    keys = sorted(k for k in positions if names[k[0]] in existing)
    if not keys:
        raise MirrorError(
            f"none of group {group!r}'s topics exist on {flow.target!r} yet ({', '.join(missing)}): nothing to fail over to",
            hint=f"let flow {flow.name!r} mirror them first (`mirror run -c CONFIG --flow {flow.name}`)",
        )
    tparts = [(names[t], p) for t, p in keys]
    marks = ctx.target.watermarks(tparts)
    if truth is Truth.SOURCE and method is Method.TRANSLATE:
        # The source's ends again, after the target's: every copy the target holds is then
        # of a record below them, which translating a partition with no offset-map row
        # relies on (see `translate`).
        try:
            source_logs = {k: (w.low, w.high) for k, w in ctx.source.watermarks(keys).items()}
            source_ends = {k: high for k, (_low, high) in source_logs.items()}
        except ClusterUnavailable as exc:
            log.warning("source %s did not answer again (%s); partitions without offset-map rows start at the target's beginning", flow.source, exc)
    time_offsets: dict[tuple[str, int], int] = {}
    boundary: dict[tuple[str, int], int] = {}
    if method is Method.TIMESTAMP and at_ms is not None:
        time_offsets = ctx.target.offsets_for_times(tparts, at_ms)
        boundary = count_boundary(ctx, {k: o for k, o in time_offsets.items() if o >= 0}, at_ms, {k: marks[k].high for k in marks})

    facts = []
    # The tips before the rows: the rows read after them are then complete up to them (a
    # store write landing between the reads only adds rows; read after the rows, a newer
    # write's tip could vouch for rows this plan does not have). The rows of every
    # partition in one bulk read (a plan covers them all).
    tips = sync_tips(ctx.store, flow.name, keys) if method is Method.TRANSLATE else {}
    windows = sync_windows(ctx.store, flow.name, {k: positions[k] for k in keys})
    for (topic, part), tkey in zip(keys, tparts):
        pos = positions[(topic, part)]
        w = marks[tkey]
        window = windows[(topic, part)]
        mirrored = mirrored_end_from_target(w.high, window.newest)
        if (topic, part) in mirror_committed:
            mirrored = max(mirrored or 0, mirror_committed[(topic, part)])
        syncs: list[OffsetSync] = []
        tip = None
        if method is Method.TRANSLATE:
            tip = tips[(topic, part)]
            syncs = window.rows
        facts.append(
            PartitionFacts(
                topic, tkey[0], part, w.low, w.high,
                source_offset=pos, syncs=syncs, mirrored_end=mirrored,
                source_end=source_ends.get((topic, part)), source_log=source_logs.get((topic, part)), tip=tip,
                checkpoint_offset=checkpoint_offsets.get((topic, part)),
                time_offset=time_offsets.get(tkey), boundary_records=boundary.get(tkey, 0),
            )
        )
    plan = make_plan(flow.name, group, method, truth, facts, at_ms=at_ms, checkpoint_time_ms=checkpoint_time)
    if missing:
        plan.notes.append(f"not on {flow.target} yet (left out): {', '.join(missing)}")
    return plan


def count_boundary(ctx: FlowContext, starts: dict[tuple[str, int], int], at_ms: int, highs: dict[tuple[str, int], int], timeout: float = 20.0) -> dict[tuple[str, int], int]:
    """Per target partition, the records from `starts` whose timestamp is exactly `at_ms`.

    They share the boundary millisecond: a group that stopped inside that millisecond read
    some of them already, so a `--at` plan can repeat up to this many records.
    """
    todo = {k: o for k, o in starts.items() if o < highs.get(k, 0)}
    if not todo:
        return {}
    consumer = make_consumer(f"{ctx.flow.target}-boundary", ctx.config.cluster(ctx.flow.target), {
        "group.id": f"mirror-failover-probe-{int(time.time() * 1000)}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    })
    counts = {k: 0 for k in todo}
    try:
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in todo.items()])
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
                if msg.error() or topic is None or partition is None or offset is None:
                    continue
                key = (topic, partition)
                if key not in todo:
                    continue
                if msg.timestamp()[1] == at_ms:
                    counts[key] += 1
                if msg.timestamp()[1] != at_ms or offset + 1 >= highs[key]:
                    del todo[key]
                    consumer.pause([TopicPartition(*key)])
    finally:
        consumer.close()
    return counts


def describe_offsets(offsets: dict[tuple[str, int], int]) -> Iterable[str]:
    for (t, p), o in sorted(offsets.items()):
        yield f"{t}[{p}]={o}"
