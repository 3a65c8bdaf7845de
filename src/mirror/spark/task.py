"""What one Spark task does with one Kafka partition's slice of a micro-batch (executor side).

Spark's Kafka source gives every source partition's offset range of a batch to one task (the
job never sets `minPartitions`), in offset order. The task produces those records to the
target with confluent-kafka, exactly as `mirror run` does (same route, provenance header,
producer settings, partition, key, value, headers, CreateTime), flushes, and returns what the
driver needs for the offset map and the group commit. This module never imports pyspark: a
task gets plain tuples, so the logic runs (and is tested) without Spark.

Replays add no duplicates: a retried task or a batch replayed after a driver crash first
reads the target partition's last records, and skips every source offset the target already
holds (the provenance header of the target's last record names the newest one). The offset
map still gets the skipped records' (source -> target) pairs, read from the same headers, so
rows an interrupted attempt never stored are stored now.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.route import HEADER_ORIGIN, Route, route
from mirror.errors import FatalProduceError, MirrorError
from mirror.kafka import Admin, make_producer
from mirror.kafka.reader import read_headers
from mirror.kafka.settings import PRODUCER_DEFAULTS

# A Spark row of the batch, as the job selects it:
# (topic, partition, offset, timestamp ms, key, value, headers as [(key, value)] or None)
SourceRow = tuple[str, int, int, int, Any, Any, Any]
FLUSH_TIMEOUT = 300.0  # a target slower than this for one batch fails the task (Spark retries it)


@dataclass(frozen=True)
class TaskPlan:
    """Everything a task needs, shipped (pickled) to the executors with the task."""

    flow: FlowConfig
    target: ClusterConfig

    @property
    def producer_settings(self) -> dict[str, Any]:
        return {**PRODUCER_DEFAULTS, "client.id": f"mirror-spark-{self.flow.name}", **self.flow.producer}


@dataclass
class TaskResult:
    """One source partition's part of a batch, as the target acknowledged it."""

    topic: str
    partition: int
    target_topic: str
    first_offset: int
    next_offset: int  # last source offset seen + 1 (produced or already on the target)
    produced: int = 0
    skipped: int = 0  # already on the target (a replay)
    bytes: int = 0
    max_timestamp_ms: int = -1
    syncs: list[tuple[int, int]] = field(default_factory=list)  # (source, target) where the delta changes


def origin_offset(r: Route, headers: Sequence[tuple[str, bytes | None]] | None) -> int | None:
    """The source offset a target record is a copy of, when it came through route `r`."""
    if r.origin is None:
        return None
    values = [v for k, v in (headers or []) if k == HEADER_ORIGIN and v is not None]
    if not values or not values[-1].startswith(r.origin):
        return None
    try:
        return int(values[-1][len(r.origin):])
    except ValueError:
        return None


def held_pairs(r: Route, tail: Iterable[tuple[int, Sequence[tuple[str, bytes | None]] | None]], first: int) -> tuple[int, list[tuple[int, int]]]:
    """From the target partition's last records (target offset, headers), in order: the newest
    source offset the target holds (-1: none of this route) and the (source, target) pairs of
    the copies from source offset `first` on."""
    held = -1
    pairs: list[tuple[int, int]] = []
    for target_offset, headers in tail:
        src = origin_offset(r, headers)
        if src is None:
            continue
        held = src  # the last copy is the newest: a partition is written in source order
        if src >= first and (not pairs or src > pairs[-1][0]):
            pairs.append((src, target_offset))
    return held, pairs


def delta_changes(pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pairs where target - source differs from the previous pair's (the first counts)."""
    out: list[tuple[int, int]] = []
    last: int | None = None
    for src, tgt in pairs:
        if tgt - src != last:
            out.append((src, tgt))
            last = tgt - src
    return out


def _headers(raw: Any) -> list[tuple[str, bytes | None]] | None:
    if not raw:
        return None
    return [(h[0], bytes(h[1]) if h[1] is not None else None) for h in raw]


def _bytes(v: Any) -> bytes | None:
    return bytes(v) if v is not None else None


def mirror_partition(plan: TaskPlan, rows: Iterable[SourceRow]) -> Iterator[TaskResult]:
    """Mirror one source partition's rows (a Spark partition); yields one result (none when empty)."""
    batch = list(rows)
    if not batch:
        return
    topic, partition = batch[0][0], batch[0][1]
    for row in batch:
        if row[0] != topic or row[1] != partition:
            # One Kafka partition per Spark partition is what keeps order; a job that broke
            # it (minPartitions, a repartition) must fail loudly, not mirror out of order.
            raise MirrorError(f"a Spark task got records of {topic}[{partition}] and {row[0]}[{row[1]}]: one Kafka partition per task is required")
    r = route(plan.flow, topic, partition)
    first, last = batch[0][2], batch[-1][2]
    result = TaskResult(topic, partition, r.target_topic, first, last + 1)

    held, pairs = -1, list[tuple[int, int]]()
    if r.origin is not None:
        admin = _cached(("admin", plan.flow.target), lambda: Admin(plan.flow.target, plan.target))
        marks = admin.watermarks([(r.target_topic, partition)], committed_only=False)[(r.target_topic, partition)]
        low, high = marks.low, marks.high
        if high > low:
            # The target's last record says the newest source offset it holds; only when that
            # is in this batch (a replay) are the copies read back, for their offset-map pairs.
            # They are among the target's last (last - first + 1) records: the source range has
            # at least as many offsets as it has records.
            read = partial(read_headers, plan.flow.target, plan.target, r.target_topic, partition, timeout=plan.target.timeout)
            held, pairs = held_pairs(r, read(high - 1, high), first)
            if held >= first:
                held, pairs = held_pairs(r, read(max(low, high - (last - first + 1)), high), first)
    todo = [row for row in batch if row[2] > held]
    result.skipped = len(batch) - len(todo)

    if todo:
        try:
            produced = _produce(plan, r, todo)
        except MirrorError:
            _CLIENTS.pop(("producer", plan.flow.name, plan.flow.target), None)  # never reuse a failed producer
            raise
        result.produced = len(todo)
        result.bytes = sum((len(row[4]) if row[4] is not None else 0) + (len(row[5]) if row[5] is not None else 0) for row in todo)
        result.max_timestamp_ms = max(row[3] for row in todo)
        pairs.extend(produced)
    result.syncs = delta_changes(pairs)
    yield result


def _produce(plan: TaskPlan, r: Route, rows: Sequence[SourceRow]) -> list[tuple[int, int]]:
    """Produce `rows` in order, flush, and return every record's (source, target) offsets.

    Only the first and last record ask for a delivery report (as in `mirror run`): the
    producer is idempotent with the gapless guarantee, so the last one acknowledged means all
    are, and two reports `n - 1` apart prove the run landed contiguously.
    """
    reports: dict[str, Any] = {}
    errors: list[str] = []

    def report(which: str) -> Any:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"{err.str() if hasattr(err, 'str') else err}")
            else:
                reports[which] = msg.offset()
        return cb

    producer = _cached(("producer", plan.flow.name, plan.flow.target), lambda: make_producer(plan.flow.target, plan.target, plan.producer_settings))
    n = len(rows)
    for i, (_topic, partition, offset, ts, key, value, headers) in enumerate(rows):
        kwargs: dict[str, Any] = {}
        if i == 0:
            kwargs["on_delivery"] = report("first")
        if i == n - 1:
            kwargs["on_delivery"] = report("last") if n > 1 else _both(report("first"), report("last"))
        while True:
            try:
                producer.produce(r.target_topic, _bytes(value), _bytes(key), partition=partition, timestamp=ts, headers=r.headers(offset, _headers(headers)), **kwargs)  # type: ignore[arg-type]
                break
            except BufferError:
                producer.poll(0.05)  # acknowledgements free queue room
    deadline = time.monotonic() + FLUSH_TIMEOUT
    while producer.flush(1.0) > 0:
        if time.monotonic() > deadline:
            raise FatalProduceError(r.source_topic, r.partition, rows[0][2], f"the target did not acknowledge {r.target_topic}[{r.partition}] within {FLUSH_TIMEOUT:.0f}s")
    if errors:
        raise FatalProduceError(r.source_topic, r.partition, rows[0][2], f"producing to {r.target_topic} failed: {errors[0]}")
    t0, t1 = reports.get("first"), reports.get("last")
    if t0 is None or t1 is None or t1 - t0 != n - 1:
        raise FatalProduceError(r.source_topic, r.partition, rows[0][2], f"{r.target_topic}[{r.partition}] did not receive the batch contiguously (offsets {t0}..{t1} for {n} records)", hint="is another producer writing the target topic?")
    return [(row[2], t0 + i) for i, row in enumerate(rows)]


# Spark reuses a Python worker process for the tasks of later batches (one task at a time):
# its producer and admin client are kept for them, instead of a new connection per task.
_CLIENTS: dict[tuple[str, ...], Any] = {}


def _cached(key: tuple[str, ...], make: Callable[[], Any]) -> Any:
    client = _CLIENTS.get(key)
    if client is None:
        client = _CLIENTS[key] = make()
    return client


def _both(a: Any, b: Any) -> Any:
    def cb(err: Any, msg: Any) -> None:
        a(err, msg)
        b(err, msg)
    return cb
