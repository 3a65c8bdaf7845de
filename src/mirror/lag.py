"""How far behind a flow is: the pure lag math, and gathering it from the clusters.

Lag of the mirror, per source partition:

* **position**: the mirror's committed offset on the source (group `flow.group_id`).
  The engine commits only after the target acknowledged the records, so it is "the next
  source offset not yet acknowledged by the target". Never committed: the mirror will
  start at the log start (it reads from the earliest offset), so that is the position.
* **lag in records**: source end offset (read_committed: open transactions are not lag)
  minus the position, counting only records that still exist (never negative; a
  position past a truncated end reads 0 rather than MM2's negative lag).
* **lag in seconds**: the age of the oldest record not yet mirrored, i.e. now minus the
  timestamp of the source record *at* the position, read from the source. Fallback:
  when that record is gone (compacted away, a transaction marker, expired by retention)
  the first record after it that still exists is used (for expired ones: the log start),
  which is the oldest record still waiting. If no record can be read before the
  deadline, the age is unknown: `None` here, an absent series on `/metrics`, never a
  reassuring 0. Time lag is not interpolated from offset/time tables (that estimate is
  what gives kafka-lag-exporter its absurd values on idle or bursty topics).

Lag of the flow's consumer groups (`flow.groups`), on both clusters: records each group
has not read yet on the source and on the target, and `unmirrored`: the records the
group has not read on the source that have not reached the target either, i.e. what it
would miss if it failed over now (0 means ready).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .burrow import Evaluator, Observation, Status, worst
from .config import Config, FlowConfig
from .errors import MirrorError
from .topics import TopicMapping, match_topics

log = logging.getLogger(__name__)

Clock = Callable[[], float]
PartitionKey = tuple[str, int]

# ---------------------------------------------------------------------------- pure math


def effective_position(position: int | None, start: int) -> int:
    """Where the mirror will read next: its commit, or the log start when it has none or
    when retention deleted the records at its commit."""
    return start if position is None else max(position, start)


def lag_records(end: int, position: int | None, start: int = 0) -> int:
    return max(0, end - effective_position(position, start))


def lag_seconds(now: float, oldest_timestamp_ms: int) -> float:
    """Age of a record; a producer clock ahead of ours gives 0, not a negative age."""
    return max(0.0, now - oldest_timestamp_ms / 1000.0)


def unmirrored(end: int, group_position: int | None, mirror_position: int) -> int:
    """Records a group has not read on the source that the target does not have yet."""
    if group_position is None:
        return 0
    return max(0, end - max(group_position, mirror_position))


# ---------------------------------------------------------------------------- results


@dataclass(frozen=True)
class PartitionLag:
    source_topic: str
    target_topic: str
    partition: int
    source_start: int
    source_end: int
    position: int | None  # the mirror's committed source position (None: never committed)
    target_end: int | None  # None: the target topic does not exist (yet) or was not reachable
    lag_records: int
    lag_seconds: float | None  # None: unknown (see the module docstring)
    lag_basis: str  # caught-up | record | next-existing | unknown
    status: str = "OK"
    reason: str = ""

    @property
    def key(self) -> PartitionKey:
        return (self.source_topic, self.partition)


@dataclass(frozen=True)
class GroupPartitionLag:
    topic: str
    partition: int
    committed: int | None
    end: int
    lag: int | None


@dataclass(frozen=True)
class GroupLag:
    group: str
    source: list[GroupPartitionLag]
    target: list[GroupPartitionLag]
    unmirrored: int  # records the group would miss if it failed over now
    target_members: int | None  # active members on the target (a failover needs 0)
    checkpoint_age: float | None = None  # seconds since the newest stored checkpoint

    @property
    def source_lag(self) -> int:
        return sum(p.lag or 0 for p in self.source)

    @property
    def target_lag(self) -> int:
        return sum(p.lag or 0 for p in self.target)


@dataclass(frozen=True)
class FlowLag:
    flow: str
    source: str
    target: str
    time: float
    partitions: list[PartitionLag]
    groups: list[GroupLag] = field(default_factory=list)
    mirror_active: bool | None = None  # does the mirror's group have members?
    status: str = "OK"
    errors: list[str] = field(default_factory=list)  # partial failures (target down, …)

    @property
    def lag_records(self) -> int:
        return sum(p.lag_records for p in self.partitions)

    @property
    def lag_seconds(self) -> float | None:
        known = [p.lag_seconds for p in self.partitions if p.lag_seconds is not None]
        return max(known) if known else None

    def to_json(self) -> dict[str, Any]:
        return {
            "flow": self.flow,
            "source": self.source,
            "target": self.target,
            "time": self.time,
            "status": self.status,
            "mirror_active": self.mirror_active,
            "lag_records": self.lag_records,
            "lag_seconds": self.lag_seconds,
            "partitions": [p.__dict__ for p in self.partitions],
            "groups": [
                {
                    "group": g.group,
                    "source_lag": g.source_lag,
                    "target_lag": g.target_lag,
                    "unmirrored": g.unmirrored,
                    "target_members": g.target_members,
                    "checkpoint_age_seconds": g.checkpoint_age,
                    "source": [p.__dict__ for p in g.source],
                    "target": [p.__dict__ for p in g.target],
                }
                for g in self.groups
            ],
            "errors": self.errors,
        }


# ---------------------------------------------------------------------------- gathering


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


def gather_flow(
    config: Config,
    flow: FlowConfig,
    *,
    source: Any,  # mirror.kafka.Admin of the source cluster
    target: Any,  # mirror.kafka.Admin of the target cluster
    reader: Any | None = None,  # mirror.kafka.PartitionReader on the source; None: no lag seconds
    store: Any | None = None,  # mirror.store offset store, for checkpoint ages
    cache: TimestampCache | None = None,
    clock: Clock = time.time,
    read_timeout: float = 3.0,
    with_groups: bool = True,
) -> FlowLag:
    """One observation of a flow. Raises `ClusterUnavailable` when the source does not answer
    (nothing can be said then); a target or group failure is reported in `errors`."""
    cache = cache if cache is not None else TimestampCache()
    errors: list[str] = []
    mappings = match_topics(config, flow, source.topics())
    parts = [(m.source, p) for m in mappings for p in range(m.partitions)]
    marks = source.watermarks(parts)
    committed = source.group_offsets(flow.group_id)
    try:
        active: bool | None = source.group_members(flow.group_id) > 0
    except MirrorError as exc:
        active = None
        errors.append(str(exc))
    target_marks: dict[PartitionKey, Any] = {}
    try:
        existing = target.topics()
        tparts = [(m.target, p) for m in mappings if m.target in existing for p in range(min(m.partitions, existing[m.target]))]
        target_marks = target.watermarks(tparts, committed_only=False)
    except MirrorError as exc:
        errors.append(str(exc))
    now = clock()

    # Lag seconds: the record at each lagging partition's position, read from the source.
    wanted: dict[PartitionKey, int] = {}
    for key in parts:
        wm = marks[key]
        pos = effective_position(committed.get(key), wm.low)
        if wm.high > pos and cache.get(key, pos) is None:
            wanted[key] = pos
    if wanted and reader is not None:
        try:
            for key, rec in reader.first_records(wanted, read_timeout).items():
                if rec.timestamp_ms >= 0:
                    cache.put(key, wanted[key], rec.timestamp_ms, "record" if rec.offset == wanted[key] else "next-existing")
        except MirrorError as exc:
            errors.append(str(exc))

    by_source = {m.source: m for m in mappings}
    out: list[PartitionLag] = []
    for topic, p in parts:
        key = (topic, p)
        wm = marks[key]
        pos = committed.get(key)
        lag = lag_records(wm.high, pos, wm.low)
        tm = by_source[topic]
        tw = target_marks.get((tm.target, p))
        if lag == 0:
            secs, basis = 0.0, "caught-up"
        else:
            hit = cache.get(key, effective_position(pos, wm.low))
            secs, basis = (lag_seconds(now, hit[0]), hit[1]) if hit else (None, "unknown")
        out.append(PartitionLag(topic, tm.target, p, wm.low, wm.high, pos, tw.high if tw else None, lag, secs, basis))

    groups = _gather_groups(flow, mappings, marks, committed, target_marks, source, target, store, now, errors) if with_groups and flow.groups else []
    return FlowLag(flow.name, flow.source, flow.target, now, out, groups, active, errors=errors)


def _gather_groups(
    flow: FlowConfig,
    mappings: list[TopicMapping],
    marks: Mapping[PartitionKey, Any],
    mirror_committed: Mapping[PartitionKey, int],
    target_marks: Mapping[PartitionKey, Any],
    source: Any,
    target: Any,
    store: Any | None,
    now: float,
    errors: list[str],
) -> list[GroupLag]:
    try:
        src_groups = {g for g in source.list_groups() if _matches(flow.groups, g)}
    except MirrorError as exc:
        errors.append(str(exc))
        return []
    try:
        tgt_groups = {g for g in target.list_groups() if _matches(flow.groups, g)}
    except MirrorError as exc:
        errors.append(str(exc))
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
            offsets = source.group_offsets(group) if group in src_groups else {}
            for (topic, p), off in sorted(offsets.items()):
                if topic in src_topics and (topic, p) in marks:
                    wm = marks[(topic, p)]
                    src_rows.append(GroupPartitionLag(topic, p, off, wm.high, max(0, wm.high - off)))
                    at_risk += unmirrored(wm.high, off, effective_position(mirror_committed.get((topic, p)), wm.low))
            if group in tgt_groups:
                members = target.group_members(group)
                for (topic, p), off in sorted(target.group_offsets(group).items()):
                    if topic in tgt_topics and (topic, p) in target_marks:
                        high = target_marks[(topic, p)].high
                        tgt_rows.append(GroupPartitionLag(topic, p, off, high, max(0, high - off)))
            else:
                members = 0
        except MirrorError as exc:
            errors.append(str(exc))
        age = None
        if store is not None:
            try:
                cps = store.checkpoints(flow.name, group)
                if cps:
                    age = max(0.0, now - max(c.time_ms for c in cps) / 1000.0)
            except MirrorError as exc:
                errors.append(str(exc))
        out.append(GroupLag(group, src_rows, tgt_rows, at_risk, members, age))
    return out


def judge(evaluator: Evaluator, lag: FlowLag) -> FlowLag:
    """Feed one observation per partition to the Burrow-style evaluator; fill in statuses."""
    parts = []
    verdicts = []
    for p in lag.partitions:
        v = evaluator.observe(lag.flow, p.source_topic, p.partition, Observation(lag.time, p.position if p.position is not None else p.source_start, p.source_end, p.source_start, lag.mirror_active))
        verdicts.append(v)
        parts.append(replace(p, status=v.status.name, reason=v.reason))
    evaluator.forget(lag.flow, [p.key for p in lag.partitions])
    return replace(lag, partitions=parts, status=worst(verdicts).name)


def status_value(name: str) -> int:
    return int(Status[name])
