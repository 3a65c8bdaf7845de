"""The I/O half of planning: collect the facts `failover.plan` turns into a plan.

Reads the group's positions (live from the source; from the newest checkpoints when the
source does not answer), the offset map, the target's watermarks and, for `--at`, the
target's timestamp index. It changes nothing anywhere.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from failover.offsets_file import coordinated
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
from mirror.kafka import Admin, PendingOffsets, TopicPartition, Watermarks, make_consumer
from mirror.store import FullOffsetStore, SyncWindow, group_sync_windows, sync_tips

log = logging.getLogger(__name__)

Key = tuple[str, int]  # (source topic, partition)


@dataclass
class FlowContext:
    """A flow's clusters and offset store, opened lazily (a dead source must not block --at)."""

    config: Config
    flow: FlowConfig
    store_factory: Callable[[], FullOffsetStore]
    _store: FullOffsetStore | None = None
    _admins: dict[str, Admin] = field(default_factory=dict)
    # Clusters found not answering: asked once per site plan, not once per flow and group.
    dead: set[str] = field(default_factory=set)
    lanes: int = 1  # connections per cluster for many groups' requests (`AdminBase`)

    @property
    def store(self) -> FullOffsetStore:
        if self._store is None:
            self._store = self.store_factory()
        return self._store

    def admin(self, cluster: str) -> Admin:
        if cluster not in self._admins:
            self._admins[cluster] = Admin(cluster, self.config.cluster(cluster), lanes=self.lanes)
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


def require_topics_visible(admin: Admin, config: Config, cluster: str, listed: Iterable[str] | None = None) -> None:
    """An authorization error when the flows' topics on `cluster` (their source topics, or
    their copies on it as a target) are hidden from us: listings and a group's offsets
    leave out topics we may not Describe, which must not pass for no topics or no offsets."""
    names = list(admin.topics() if listed is None else listed)
    for f in config.flows:
        if f.source == cluster:
            admin.require_visible(f.topics.include, names, "Describe")
        if f.target == cluster:
            prefix = re.escape(target_topic("", f.source, f.rename))
            admin.require_visible([prefix + p for p in f.topics.include], names, "Describe")


def check_group(flow: FlowConfig, flow_index: int, group: str) -> None:
    """The flow must name the group in `groups`: only those are checkpointed and trusted."""
    key = f"flows[{flow_index}].groups"
    if not flow.groups:
        raise UsageError(
            f"flow {flow.name!r} has no consumer groups to fail over",
            hint=f"add the group's pattern to {key} in the config",
        )
    if not any(re.fullmatch(p, group) for p in flow.groups):
        raise UsageError(
            f"group {group!r} does not match {key} of flow {flow.name!r} ({', '.join(flow.groups)})",
            hint=f"add a pattern matching it to {key}",
        )


@dataclass
class SourceReads:
    """What the source said about a flow, read once for every group planned with it."""

    up: bool
    live: dict[str, dict[Key, int]] = field(default_factory=dict)  # group -> committed offsets
    mirror_committed: dict[Key, int] = field(default_factory=dict)
    ends: dict[Key, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Positions:
    """Where one group stands on the source, and how that is known."""

    offsets: dict[Key, int]
    truth: Truth
    checkpoint_offsets: dict[Key, int] = field(default_factory=dict)
    checkpoint_time_ms: int | None = None


@dataclass
class TargetReads:
    """The target's side of a flow's partitions, read once for every group planned with it."""

    names: dict[str, str]  # source topic -> target topic
    existing: set[str]
    marks: dict[Key, Watermarks] = field(default_factory=dict)
    time_offsets: dict[Key, int] = field(default_factory=dict)
    boundary: dict[Key, int] = field(default_factory=dict)
    source_logs: dict[Key, tuple[int, int]] = field(default_factory=dict)


def build_plan(ctx: FlowContext, group: str, method: Method, *, at_ms: int | None = None) -> Plan:
    """One group's plan; the single-group form of `build_plans` (its errors raised)."""
    check_group(ctx.flow, ctx.config.flows.index(ctx.flow), group)
    result = build_plans(ctx, [group], method, at_ms=at_ms)[group]
    if isinstance(result, NotFound) and ctx.flow.source in ctx.dead:
        # No live offsets because nobody was asked: not the group's fault, the cluster's.
        raise ClusterUnavailable(
            f"cluster {ctx.flow.source!r} did not answer, and the offset store holds no checkpoint of group "
            f"{group!r} for flow {ctx.flow.name!r}: nothing to plan from",
            hint="every method needs the group's partitions from the source or a checkpoint: bring the source back, "
            "or point offset_store at the store its flow checkpointed to",
        )
    if isinstance(result, MirrorError):
        raise result
    return result


def build_plans(
    ctx: FlowContext, groups: Sequence[str], method: Method, *, at_ms: int | None = None
) -> dict[str, Plan | MirrorError]:
    """Plans of many groups of one flow, sharing every read that is the flow's, not a group's.

    A group that cannot be planned (no offsets and no checkpoints, none of its topics on the
    target yet) gets its error instead of a plan; the others are planned regardless.
    """
    flow = ctx.flow
    topic_ok = flow.topic_filter(ctx.config.canary.topic).matches
    # The target's topics listed while the source answers (each listing is a quarter of a
    # second at 10,000 partitions). Nothing below depends on the order of the two.
    target_topics = ctx.target.request_topics()
    reads = read_source(ctx, groups, topic_ok)
    out: dict[str, Plan | MirrorError] = {}
    positions: dict[str, Positions] = {}
    for g in groups:
        pos = group_positions(ctx, g, reads, topic_ok)
        if pos is None:
            out[g] = NotFound(
                f"group {g!r} has no committed offsets on {flow.source!r} for the topics of flow "
                f"{flow.name!r}, and no checkpoints",
                hint="check the group name (`mirror failover export --cluster SOURCE --group G` shows what it "
                "committed)",
            )
        else:
            positions[g] = pos
    if not positions:
        return out
    target = read_target(ctx, target_topics(), positions, method, at_ms)
    store_ends: dict[Key, int] | None = None
    keys_of = {
        g: sorted(k for k in pos.offsets if target.names[k[0]] in target.existing) for g, pos in positions.items()
    }
    tips = (
        sync_tips(ctx.store, flow.name, sorted({k for ks in keys_of.values() for k in ks}))
        if method is Method.TRANSLATE
        else {}
    )
    # The tips were read before the rows: the rows read after them are then complete up to
    # them (a store write landing between the reads only adds rows; read after the rows, a
    # newer write's tip could vouch for rows this plan does not have).
    windows = group_sync_windows(
        ctx.store, flow.name, {g: {k: pos.offsets[k] for k in keys_of[g]} for g, pos in positions.items()}
    )
    gaps = ctx.store.gaps(flow.name) if method is Method.TRANSLATE else {}
    for g, pos in positions.items():
        missing = sorted({target.names[t] for t, _ in pos.offsets if target.names[t] not in target.existing})
        if not keys_of[g]:
            out[g] = MirrorError(
                f"none of group {g!r}'s topics exist on {flow.target!r} yet ({', '.join(missing)}): "
                "nothing to fail over to",
                hint=f"let flow {flow.name!r} mirror them first (`mirror run -c CONFIG --flow {flow.name}`)",
            )
            continue
        ends = reads.ends
        if pos.truth is not Truth.SOURCE:  # the checkpointer's last look, where the source said nothing now
            if store_ends is None:
                store_ends = {k: end for k, (end, _ms) in ctx.store.source_ends(flow.name).items()}
            ends = {**store_ends, **reads.ends}
        facts = partition_facts(method, pos, keys_of[g], target, tips, windows[g], ends, reads.mirror_committed)
        facts = [replace(f, gaps=gaps.get((f.source_topic, f.partition), ())) for f in facts]
        truth = {
            Method.TIMESTAMP: Truth.TIMESTAMPS,
            Method.EARLIEST: Truth.WATERMARKS,
            Method.LATEST: Truth.WATERMARKS,
        }.get(method, pos.truth)
        plan = make_plan(flow.name, g, method, truth, facts, at_ms=at_ms, checkpoint_time_ms=pos.checkpoint_time_ms)
        if missing:
            plan.notes.append(f"not on {flow.target} yet (left out): {', '.join(missing)}")
        out[g] = plan
    return out


def read_source(ctx: FlowContext, groups: Sequence[str], topic_ok: Callable[[str], bool]) -> SourceReads:
    """The groups' and the mirror's committed offsets and the source's ends, all in flight
    together; `up=False` when the source does not answer (plans then use checkpoints)."""
    flow = ctx.flow
    if flow.source in ctx.dead:
        return SourceReads(False)
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
        # Many groups: their coordinators found in one round (what each request would
        # otherwise ask in turn: 500 round trips); see `Admin.prepare_groups`.
        described = len(groups) > 1
        if described:
            coordinated(ctx.source, lambda: ctx.source.prepare_groups(groups))
        pending = {g: ctx.source.request_group_offsets(g, mine, described=described) for g in groups}
        try:  # in flight together with the groups' (10,000 partitions each)
            pending_mirror: PendingOffsets[int] | None = ctx.source.request_group_offsets(flow.group_id, mine)
        except MirrorError:
            pending_mirror = None  # asked again below, only when needed: its failure matters only then
        reads = SourceReads(True, {g: p.result() for g, p in pending.items()})
        wanted = sorted({k for offsets in reads.live.values() for k in offsets})
        if wanted:
            pending_ends = ctx.source.request_end_offsets(wanted)  # in flight while the mirror's offsets are read
            reads.mirror_committed = (pending_mirror or ctx.source.request_group_offsets(flow.group_id, mine)).result()
            reads.ends = pending_ends.result()
        return reads
    except ClusterUnavailable as exc:
        # Said once, by the plan (a note) or its error: not a second line here.
        log.info("source %s did not answer (%s); using the newest checkpoints", flow.source, exc)
        ctx.dead.add(flow.source)
        return SourceReads(False)


def group_positions(
    ctx: FlowContext, group: str, reads: SourceReads, topic_ok: Callable[[str], bool]
) -> Positions | None:
    """The group's live offsets, else its newest checkpoints, else None."""
    live = reads.live.get(group)
    if live:
        return Positions(live, Truth.SOURCE)
    checkpoints = ctx.store.checkpoints(ctx.flow.name, group)
    if not checkpoints:
        return None
    return Positions(
        {(c.topic, c.partition): c.source_offset for c in checkpoints if topic_ok(c.topic)},
        Truth.CHECKPOINTS,
        {(c.topic, c.partition): c.target_offset for c in checkpoints},
        min(c.time_ms for c in checkpoints),
    )


def read_target(
    ctx: FlowContext, existing: dict[str, int], positions: dict[str, Positions], method: Method, at_ms: int | None
) -> TargetReads:
    """Watermarks (and for --at, timestamp offsets) of every partition any group needs, then
    the source's watermarks again for translation from live offsets."""
    flow = ctx.flow
    topics = {t for pos in positions.values() for t, _ in pos.offsets}
    target = TargetReads({t: target_topic(t, flow.source, flow.rename) for t in topics}, set(existing))
    missing = sorted({target.names[t] for t in topics if target.names[t] not in target.existing})
    ctx.target.require_visible([], existing, "Read", literal=missing)  # not there, or not visible?
    keys = sorted({k for pos in positions.values() for k in pos.offsets if target.names[k[0]] in target.existing})
    tparts = [(target.names[t], p) for t, p in keys]
    target.marks = ctx.target.watermarks(tparts)
    live_keys = sorted(
        {
            k
            for pos in positions.values()
            if pos.truth is Truth.SOURCE
            for k in pos.offsets
            if target.names[k[0]] in target.existing
        }
    )
    if live_keys and method is Method.TRANSLATE:
        # The source's ends again, after the target's: every copy the target holds is then
        # of a record below them, which translating a partition with no offset-map row
        # relies on (see `translate`).
        try:
            target.source_logs = {k: (w.low, w.high) for k, w in ctx.source.watermarks(live_keys).items()}
        except ClusterUnavailable as exc:
            log.warning(
                "source %s did not answer again (%s); partitions without offset-map rows start at the "
                "target's beginning",
                flow.source,
                exc,
            )
    if method is Method.TIMESTAMP and at_ms is not None:
        target.time_offsets = ctx.target.offsets_for_times(tparts, at_ms)
        starts = {k: o for k, o in target.time_offsets.items() if o >= 0}
        target.boundary = count_boundary(ctx, starts, at_ms, {k: target.marks[k].high for k in target.marks})
    return target


def partition_facts(
    method: Method,
    pos: Positions,
    keys: list[Key],
    target: TargetReads,
    tips: dict[Key, OffsetSync | None],
    windows: dict[Key, SyncWindow],
    source_ends: dict[Key, int],
    mirror_committed: dict[Key, int],
) -> list[PartitionFacts]:
    """Everything one group's plan needs per partition (its offset-map rows read beforehand, in bulk)."""
    live = pos.truth is Truth.SOURCE
    facts = []
    for topic, part in keys:
        key = (topic, part)
        tkey = (target.names[topic], part)
        w = target.marks[tkey]
        window = windows[key]
        mirrored = mirrored_end_from_target(w.high, window.newest)
        if key in mirror_committed:
            mirrored = max(mirrored or 0, mirror_committed[key])
        translating = method is Method.TRANSLATE
        source_log = target.source_logs.get(key) if live else None
        facts.append(
            PartitionFacts(
                topic,
                tkey[0],
                part,
                w.low,
                w.high,
                source_offset=pos.offsets[key],
                syncs=window.rows if translating else [],
                mirrored_end=mirrored,
                source_end=source_log[1] if source_log else source_ends.get(key),
                source_log=source_log,
                tip=tips.get(key) if translating else None,
                checkpoint_offset=pos.checkpoint_offsets.get(key),
                time_offset=target.time_offsets.get(tkey),
                boundary_records=target.boundary.get(tkey, 0),
            )
        )
    return facts


def count_boundary(
    ctx: FlowContext,
    starts: dict[tuple[str, int], int],
    at_ms: int,
    highs: dict[tuple[str, int], int],
    timeout: float = 20.0,
) -> dict[tuple[str, int], int]:
    """Per target partition, the records from `starts` whose timestamp is exactly `at_ms`.

    They share the boundary millisecond: a group that stopped inside that millisecond read
    some of them already, so a `--at` plan can repeat up to this many records.
    """
    todo = {k: o for k, o in starts.items() if o < highs.get(k, 0)}
    if not todo:
        return {}
    consumer = make_consumer(
        f"{ctx.flow.target}-boundary",
        ctx.config.cluster(ctx.flow.target),
        {
            "group.id": f"mirror-failover-probe-{int(time.time() * 1000)}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        },
    )
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
