"""Gathering a flow's lag from the clusters: one observation per call, no Prometheus here.

`gather_flow` reads the source's end offsets and the mirror's committed positions, the
target's end offsets, the flow's groups on both sides, and (through a `PartitionReader`)
the timestamp of the oldest record not yet mirrored. The math is in `mirror.domain.lag`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mirror.config import Config, FlowConfig
from mirror.domain.acls import Resource, resource_for
from mirror.domain.lag import (
    Clock,
    FlowLag,
    GroupLag,
    GroupPartitionLag,
    PartitionKey,
    PartitionLag,
    effective_position,
    judge,
    lag_records,
    lag_seconds,
    unmirrored,
)
from mirror.domain.lag_status import Evaluator
from mirror.domain.topics import TopicMapping, match_topics
from mirror.errors import AuthorizationFailed, MirrorError
from mirror.kafka import Admin, PartitionReader, PendingOffsets, Watermarks
from mirror.kafka.errors import principal_of
from mirror.store import FullOffsetStore
from mirror.store.base import sync_windows


class TimestampCache:
    """Timestamp of the record at a position, per partition.

    While the mirror is stopped its position stays put, so each scrape would read the
    same record again; one entry per partition avoids that.
    """

    def __init__(self) -> None:
        self._entries: dict[PartitionKey, tuple[int, int, str]] = {}

    def get(self, key: PartitionKey, offset: int) -> tuple[int, str] | None:
        e = self._entries.get(key)
        return (e[1], e[2]) if e and e[0] == offset else None

    def put(self, key: PartitionKey, offset: int, ts_ms: int, basis: str) -> None:
        self._entries[key] = (offset, ts_ms, basis)


def _matches(patterns: Iterable[str], name: str) -> bool:
    return any(re.fullmatch(p, name) for p in patterns)


class _Errors(list[str]):
    """Partial failures of one observation; with `strict`, a missing grant is raised instead."""

    def __init__(self, strict: bool) -> None:
        super().__init__()
        self.strict = strict

    def add(self, exc: MirrorError) -> None:
        if self.strict and isinstance(exc, AuthorizationFailed):
            raise exc
        self.append(str(exc))


def gather_flow(
    config: Config,
    flow: FlowConfig,
    *,
    source: Admin,
    target: Admin,
    reader: PartitionReader | None = None,  # on the source; None: no lag seconds
    store: FullOffsetStore | None = None,  # for checkpoint ages
    cache: TimestampCache | None = None,
    clock: Clock = time.time,
    read_timeout: float = 3.0,
    with_groups: bool = True,
    strict: bool = False,
) -> FlowLag:
    """One observation of a flow. Raises `ClusterUnavailable` when the source does not answer
    (nothing can be said then); a target or group failure is reported in `errors`, except
    with `strict` a missing grant, which is raised (`mirror lag`: one line, exit 1; the
    exporter keeps what it can gather)."""
    cache = cache if cache is not None else TimestampCache()
    errors = _Errors(strict)
    listed = source.topics()
    # Topics the principal may not see are left out of the listing: said, not shown as none.
    source.require_visible(flow.topics.include, listed, "Read")
    mappings = match_topics(config, flow, listed)
    parts = [(m.source, p) for m in mappings for p in range(m.partitions)]
    # Every ListOffsets request in flight at once (source ends, target ends), waited for
    # together: at thousands of partitions each one is noticeable broker work and waiting.
    pending_marks = source.request_watermarks(parts)
    pending_committed = source.request_group_offsets(flow.group_id, parts)
    pending_target = _request_target_ends(flow, target, mappings, errors)
    marks = pending_marks.result()
    committed = pending_committed.result()
    try:
        active: bool | None = source.group_members(flow.group_id) > 0
    except MirrorError as exc:
        active = None
        errors.add(exc)
    target_marks: dict[PartitionKey, Any] = {}
    if pending_target is not None:
        try:
            target_marks = {k: Watermarks(-1, high) for k, high in pending_target.result().items()}
        except MirrorError as exc:
            errors.add(exc)
    now = clock()
    if reader is not None:
        _read_waiting_timestamps(parts, marks, committed, cache, reader, read_timeout, errors)
    out = _partition_lags(parts, mappings, marks, committed, target_marks, cache, now)
    groups = (
        _gather_groups(flow, mappings, marks, committed, target_marks, source, target, store, now, errors)
        if with_groups and flow.groups
        else []
    )
    return FlowLag(flow.name, flow.source, flow.target, now, out, groups, active, errors=list(errors))


def _request_target_ends(
    flow: FlowConfig, target: Admin, mappings: list[TopicMapping], errors: _Errors
) -> PendingOffsets[int] | None:
    """The target topics' end offsets, requested (not waited for); None when the target does not answer."""
    try:
        existing = target.topics()
        # A target topic the principal may not Describe is left out of the listing: asked
        # for by name, so a missing grant is not shown as a topic not mirrored yet.
        hidden = target.hidden_topics(sorted({m.target for m in mappings if m.target not in existing}))
        if hidden:
            errors.add(
                AuthorizationFailed(
                    f"cluster {flow.target!r}: {principal_of(flow.target)} is not allowed to see topic {hidden[0]!r}: "
                    f"missing Describe on topic {hidden[0]!r}"
                    + (f" (and {len(hidden) - 1} more)" if len(hidden) > 1 else ""),
                    hint="grant it; `mirror acls -c CONFIG` lists every ACL the mirror needs",
                )
            )
        tparts = [
            (m.target, p)
            for m in mappings
            if m.target in existing
            for p in range(min(m.partitions, existing[m.target]))
        ]
        # Only the ends are used: half the ListOffsets of `watermarks`.
        return target.request_end_offsets(tparts, committed_only=False)
    except MirrorError as exc:
        errors.add(exc)
        return None


def _read_waiting_timestamps(
    parts: list[PartitionKey],
    marks: Mapping[PartitionKey, Any],
    committed: Mapping[PartitionKey, int],
    cache: TimestampCache,
    reader: PartitionReader,
    read_timeout: float,
    errors: _Errors,
) -> None:
    """Lag seconds' input: the record at each lagging partition's position, read from the source into `cache`."""
    wanted: dict[PartitionKey, int] = {}
    for key in parts:
        wm = marks[key]
        start = effective_position(committed.get(key), wm.low)
        if wm.high > start and cache.get(key, start) is None:
            wanted[key] = start
    if not wanted:
        return
    try:
        for key, rec in reader.first_records(wanted, read_timeout).items():
            if rec.timestamp_ms >= 0:
                cache.put(
                    key, wanted[key], rec.timestamp_ms, "record" if rec.offset == wanted[key] else "next-existing"
                )
    except MirrorError as exc:
        errors.add(exc)


def _partition_lags(
    parts: list[PartitionKey],
    mappings: list[TopicMapping],
    marks: Mapping[PartitionKey, Any],
    committed: Mapping[PartitionKey, int],
    target_marks: Mapping[PartitionKey, Any],
    cache: TimestampCache,
    now: float,
) -> list[PartitionLag]:
    by_source = {m.source: m for m in mappings}
    out: list[PartitionLag] = []
    for topic, p in parts:
        key = (topic, p)
        wm = marks[key]
        pos = committed.get(key)
        lag = lag_records(wm.high, pos, wm.low)
        tm = by_source[topic]
        tw = target_marks.get((tm.target, p))
        secs: float | None
        if lag == 0:
            secs, basis = 0.0, "caught-up"
        else:
            hit = cache.get(key, effective_position(pos, wm.low))
            secs, basis = (lag_seconds(now, hit[0]), hit[1]) if hit else (None, "unknown")
        out.append(PartitionLag(topic, tm.target, p, wm.low, wm.high, pos, tw.high if tw else None, lag, secs, basis))
    return out


def _gather_groups(
    flow: FlowConfig,
    mappings: list[TopicMapping],
    marks: Mapping[PartitionKey, Any],
    mirror_committed: Mapping[PartitionKey, int],
    target_marks: Mapping[PartitionKey, Any],
    source: Admin,
    target: Admin,
    store: FullOffsetStore | None,
    now: float,
    errors: _Errors,
) -> list[GroupLag]:
    try:
        src_listed = source.list_groups()
        src_groups = {g for g in src_listed if _matches(flow.groups, g)}
        _ask_unlisted(source, flow, src_listed, errors)
    except MirrorError as exc:
        errors.add(exc)
        return []
    try:
        tgt_listed = target.list_groups()
        tgt_groups = {g for g in tgt_listed if _matches(flow.groups, g)}
        _ask_unlisted(target, flow, tgt_listed, errors)
    except MirrorError as exc:
        errors.add(exc)
        tgt_groups = set()
    src_topics = {m.source: m for m in mappings}
    tgt_topics = {m.target: m for m in mappings}
    out = []
    for group in sorted(src_groups | tgt_groups):
        src_rows: list[GroupPartitionLag] = []
        tgt_rows: list[GroupPartitionLag] = []
        at_risk = 0
        members: int | None = None
        try:
            offsets = source.group_offsets(group, list(marks)) if group in src_groups else {}
            for (topic, p), off in sorted(offsets.items()):
                if topic in src_topics and (topic, p) in marks:
                    wm = marks[(topic, p)]
                    src_rows.append(GroupPartitionLag(topic, p, off, wm.high, max(0, wm.high - off)))
                    at_risk += unmirrored(wm.high, off, effective_position(mirror_committed.get((topic, p)), wm.low))
            at_risk += _before_the_copy(flow, store, {k: o for k, o in offsets.items() if k in marks}, marks, errors)
            if group in tgt_groups:
                members = target.group_members(group)
                for (topic, p), off in sorted(target.group_offsets(group, list(target_marks)).items()):
                    if topic in tgt_topics and (topic, p) in target_marks:
                        high = target_marks[(topic, p)].high
                        tgt_rows.append(GroupPartitionLag(topic, p, off, high, max(0, high - off)))
            else:
                members = 0
        except MirrorError as exc:
            errors.add(exc)
        age = None
        if store is not None:
            try:
                cps = store.checkpoints(flow.name, group)
                if cps:
                    age = max(0.0, now - max(c.time_ms for c in cps) / 1000.0)
            except MirrorError as exc:
                errors.add(exc)
        out.append(GroupLag(group, src_rows, tgt_rows, at_risk, members, age))
    return out


def _before_the_copy(
    flow: FlowConfig,
    store: FullOffsetStore | None,
    positions: Mapping[PartitionKey, int],
    marks: Mapping[PartitionKey, Any],
    errors: _Errors,
) -> int:
    """Records a group has not read that lie before where the copy began (`start_from`, or
    data the source had already deleted): the source still holds them, the target never had
    them. Told by the offset map: the group's position is below its first row."""
    if store is None or not positions:
        return 0
    try:
        windows = sync_windows(store, flow.name, positions)
    except MirrorError as exc:
        errors.add(exc)
        return 0
    return sum(
        max(0, w.next.source_offset - max(positions[k], marks[k].low))
        for k, w in windows.items()
        if w.floor is None and w.next is not None
    )


def _ask_unlisted(admin: Admin, flow: FlowConfig, listed: Iterable[str], errors: _Errors) -> None:
    """Listing shows only the groups the principal may Describe: a literally named group not
    listed is asked for by name, so a missing grant is reported, not shown as no group."""
    names = set(listed)
    for group in flow.groups:
        if group not in names and resource_for("group", group) == (Resource("group", group), True):
            try:
                admin.group_offsets(group)  # nothing, for a group that does not exist
            except AuthorizationFailed as exc:
                errors.add(exc)


class FlowProbe:
    """What gathering one flow needs, kept across scrapes (clients, caches, Burrow windows)."""

    def __init__(
        self,
        config: Config,
        flow: FlowConfig,
        admins: Callable[[str], Admin],
        store: FullOffsetStore | None,
        clock: Callable[[], float],
        timeout: float,
    ) -> None:
        self.config, self.flow = config, flow
        self._admins = admins
        self.store = store
        self.clock = clock
        self.timeout = timeout
        self.cache = TimestampCache()
        self.evaluator = Evaluator(min_span=3 * flow.commit_interval)
        self._reader_cluster = config.clusters[flow.source].model_copy(
            update={"timeout": min(config.clusters[flow.source].timeout, timeout)}
        )
        self.reader = PartitionReader(f"{flow.source}-lag-{flow.name}", self._reader_cluster)

    def reset(self) -> None:
        """Start over with a new reader (called after the source stopped answering)."""
        self.reader.close()
        self.reader = PartitionReader(f"{self.flow.source}-lag-{self.flow.name}", self._reader_cluster)

    def gather(self) -> FlowLag:
        lag = gather_flow(
            self.config,
            self.flow,
            source=self._admins(self.flow.source),
            target=self._admins(self.flow.target),
            reader=self.reader,
            store=self.store,
            cache=self.cache,
            clock=self.clock,
            read_timeout=max(0.5, self.timeout / 2),
        )
        return judge(self.evaluator, lag)

    def close(self) -> None:
        self.reader.close()
