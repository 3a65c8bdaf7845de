"""How far behind a flow is: the pure lag math (gathering it lives in `mirror.monitor.gather`).

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

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mirror.domain.lag_status import Evaluator, Observation, Status, worst

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


def judge(evaluator: Evaluator, lag: FlowLag) -> FlowLag:
    """Feed one observation per partition to the Burrow-style evaluator; fill in statuses."""
    parts = []
    verdicts = []
    for p in lag.partitions:
        v = evaluator.observe(lag.flow, p.source_topic, p.partition, Observation(lag.time, p.position if p.position is not None else p.source_start, p.source_end, p.source_start, lag.mirror_active))
        verdicts.append(v)
        # Built directly: `dataclasses.replace` is slow enough to dominate judging thousands of partitions.
        parts.append(PartitionLag(p.source_topic, p.target_topic, p.partition, p.source_start, p.source_end, p.position, p.target_end,
                                  p.lag_records, p.lag_seconds, p.lag_basis, v.status.name, v.reason))
    evaluator.forget(lag.flow, [p.key for p in lag.partitions])
    return replace(lag, partitions=parts, status=worst(verdicts).name)


def status_value(name: str) -> int:
    return int(Status[name])
