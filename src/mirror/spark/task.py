"""What one Spark task does with one Kafka partition's slice of a micro-batch (executor side).

Spark's Kafka source gives every source partition's offset range of a batch to one task (the
job never sets `minPartitions`), in offset order. The task produces those records to the
target with confluent-kafka, exactly as `mirror run` does (same route, provenance header,
producer settings, partition, key, value, headers, CreateTime), flushes, and returns what the
driver needs for the offset map and the group commit. This module never imports pyspark: a
task gets plain tuples, so the logic runs (and is tested) without Spark.

Replays add no duplicates: a retried task or a batch replayed after a driver crash first
reads the target partition's last record; when its provenance header names a source offset
of this batch or later (`held`), the copies are read back from where the copy of the batch's
first record must be, and the batch's records up to `held` are skipped only when they are
copies of *these* records: the copy of the last record to skip is read back and has that
record's timestamp, key and value, and so does every copy of the run back to the batch's
first record (a copy of another record, or of an earlier one, right before the run means
the batch's first records never landed: nothing is skipped). A source topic deleted and created again restarts its
offsets at 0 while the target's copies name the old ones: those never match, and the batch
is produced (a copy of a record that is not on the target is never skipped; the worst case
is a duplicate). The offset map gets the skipped records' (source -> target) pairs, read
from the same headers, so rows an interrupted attempt never stored are stored now, but only
when the copy of the batch's first record was read back: pairs that start later would
translate the positions before them past their copies (invariant 2).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.route import HEADER_ORIGIN, Route, route
from mirror.errors import FatalProduceError, MirrorError
from mirror.kafka import Admin, make_producer
from mirror.kafka.reader import TailRecord, read_range
from mirror.kafka.settings import BATCH_SIZE, PRODUCER_DEFAULTS, batch_size_for

# A Spark row of the batch, as the job selects it:
# (topic, partition, offset, timestamp ms, key, value, headers as [(key, value)] or None)
SourceRow = tuple[str, int, int, int, Any, Any, Any]
log = logging.getLogger(__name__)
FLUSH_TIMEOUT = 300.0  # a target slower than this for one batch fails the task (Spark retries it)


@dataclass(frozen=True)
class TaskPlan:
    """Everything a task needs, shipped (pickled) to the executors with the task."""

    flow: FlowConfig
    target: ClusterConfig
    # Each source partition's high watermark when the batch was planned (the driver sets it
    # per batch): a target copy naming an offset at or past it cannot be of this topic.
    source_ends: dict[tuple[str, int], int] = field(default_factory=dict)
    # Each target topic's max.message.bytes (the driver reads them at every topic refresh):
    # a topic that takes smaller batches than batch.size gets a producer with batches that fit.
    limits: dict[str, int] = field(default_factory=dict)

    @property
    def producer_settings(self) -> dict[str, Any]:
        return {**PRODUCER_DEFAULTS, "client.id": f"mirror-spark-{self.flow.name}", **self.flow.producer}

    def producer_settings_for(self, target_topic: str) -> dict[str, Any]:
        """The producer settings for one target topic: batches sized as `mirror run` sizes them."""
        settings = self.producer_settings
        return {**settings, "batch.size": batch_size_for(int(settings.get("batch.size", BATCH_SIZE)), self.limits.get(target_topic))}


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
    placed: bool = True  # False: the target offsets of part of the batch are unknown (no syncs, no tip)
    warning: str | None = None  # for the driver's log


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


@dataclass
class Replay:
    """What the target already holds of a batch, as the task decided it."""

    held: int = -1  # skip source offsets up to this one
    pairs: list[tuple[int, int]] = field(default_factory=list)
    placed: bool = True
    warning: str | None = None


def _same(copy: TailRecord, row: SourceRow) -> bool:
    """A copy of this source record: same key and value, and same timestamp unless the target
    topic stamps its own (LogAppendTime; then the key and value must do)."""
    return (copy.log_append_time or copy.timestamp_ms == row[3]) and copy.key == _bytes(row[4]) and copy.value == _bytes(row[5])


def replay_check(r: Route, batch: Sequence[SourceRow], low: int, high: int,
                 read: Callable[..., list[TailRecord]], source_end: int | None = None) -> Replay:
    """Decide which of `batch` the target partition [low, high) already holds.

    `read(start, end, until=None)` reads target records back. Skips only what is proved to
    be on the target; anything in doubt is produced (a duplicate, never a loss).
    """
    if high <= low or not batch:
        return Replay()
    first, last = batch[0][2], batch[-1][2]
    tail = read(high - 1, high)
    newest = origin_offset(r, tail[-1].headers) if tail else None
    if newest is None or newest < first:
        return Replay()
    where = f"{r.target_topic}[{r.partition}]"
    if source_end is not None and newest >= source_end:
        return Replay(warning=f"{where}: the target's last copy names source offset {newest}, but {r.source_topic}[{r.partition}] ends at "
                              f"{source_end} (a recreated source topic?): producing offsets {first}..{last}, nothing skipped")
    upto = min(newest, last)
    anchor = max((row for row in batch if row[2] <= upto), key=lambda row: row[2])
    # The copies of source offsets [first, newest] are among the target's last
    # (newest - first + 1) records: the source range has at least as many offsets as records.
    start = max(low, high - (newest - first + 1))

    def reached(rec: TailRecord) -> bool:
        o = origin_offset(r, rec.headers)
        return o is not None and o >= anchor[2]

    copies = read(start, high, until=reached)
    by_origin: dict[int, TailRecord] = {}
    for rec in copies:
        o = origin_offset(r, rec.headers)
        if o is not None:
            by_origin[o] = rec
    copy = by_origin.get(anchor[2])
    if copy is None or not _same(copy, anchor):
        what = "is not among the records read back" if copy is None else f"at {where} offset {copy.offset} differs from the source record"
        return Replay(warning=f"{where}: the target's last copy names source offset {newest}, but the copy of {r.source_topic}[{r.partition}] "
                              f"offset {anchor[2]} {what} (a recreated source topic?): producing offsets {first}..{last}, nothing skipped")
    # The pairs: the run of copies that ends at the matched copy, back to the copy of `first`.
    pairs: list[tuple[int, int]] = []
    before: int | None = None  # the origin of the copy right before the run, when it is of another record
    rows = {row[2]: row for row in batch}
    for rec in reversed(copies[: copies.index(copy) + 1]):
        o = origin_offset(r, rec.headers)
        if o is None:
            continue
        if o < first or (o in rows and not _same(rec, rows[o])):
            # A copy of an earlier record, or not of this one (an older incarnation of the
            # source topic whose offsets run on below the new copies): the run ends here.
            before = o
            break
        if pairs and o >= pairs[-1][0]:
            break
        pairs.append((o, rec.offset))
    pairs.reverse()
    if pairs[0][0] != first and before is not None:
        # The copy right before the run is of a record before this batch: the copies of
        # offsets first..(run start - 1) are provably not on the target (never produced),
        # so nothing of the batch may be skipped on the anchor's word.
        return Replay(warning=f"{where}: the copies on the target run back from source offset {anchor[2]} to {pairs[0][0]} only, and the copy before "
                              f"them is of offset {before} (another record's): {r.source_topic}[{r.partition}] offsets {first}..{pairs[0][0] - 1} never reached the target; "
                              f"producing offsets {first}..{last}, nothing skipped")
    if pairs[0][0] != first:
        # The copies of this batch's first records are gone (target retention) or were never
        # read: no pairs, so no row can translate a position before them past their copies.
        return Replay(held=newest, placed=False)
    return Replay(held=newest, pairs=pairs)


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

    replay = Replay()
    if r.origin is not None:
        admin = _cached(("admin", plan.flow.target), lambda: Admin(plan.flow.target, plan.target))
        marks = admin.watermarks([(r.target_topic, partition)], committed_only=False)[(r.target_topic, partition)]
        read = partial(read_range, plan.flow.target, plan.target, r.target_topic, partition, timeout=plan.target.timeout)
        replay = replay_check(r, batch, marks.low, marks.high, read, plan.source_ends.get((topic, partition)))
    held, pairs = replay.held, list(replay.pairs)
    result.placed, result.warning = replay.placed, replay.warning
    if replay.warning:
        log.warning("%s", replay.warning)
    todo = [row for row in batch if row[2] > held]
    result.skipped = len(batch) - len(todo)

    if todo:
        settings = plan.producer_settings_for(r.target_topic)
        key = ("producer", plan.flow.name, plan.flow.target, str(settings["batch.size"]))
        try:
            produced = _produce(plan, r, todo, key, settings)
        except Exception:
            # Never reuse a failed producer (a fatal error, raised by produce() as a
            # KafkaException, leaves it unusable), and purge what it still holds first:
            # records left queued or in flight could land after the retried task's copies
            # (out of order, and the retry's contiguity check fails on them).
            failed = _CLIENTS.pop(key, None)
            if failed is not None:
                _purge(failed)
            raise
        result.produced = len(todo)
        result.bytes = sum((len(row[4]) if row[4] is not None else 0) + (len(row[5]) if row[5] is not None else 0) for row in todo)
        result.max_timestamp_ms = max(row[3] for row in todo)
        if produced:
            pairs.extend(produced)
        else:
            result.placed = False  # delivered, but the target did not say where (see `_produce`)
    result.syncs = delta_changes(pairs) if result.placed else []
    yield result


def _produce(plan: TaskPlan, r: Route, rows: Sequence[SourceRow], key: tuple[str, ...], settings: dict[str, Any]) -> list[tuple[int, int]]:
    """Produce `rows` in order, flush, and return every record's (source, target) offsets
    (none when the target acknowledged them without offsets).

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

    # One producer per batch size (as `mirror run`): a small-limit topic keeps the others' large batches.
    producer = _cached(key, lambda: make_producer(plan.flow.target, plan.target, settings))
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
    if (t0 is not None and t0 < 0) or (t1 is not None and t1 < 0):
        # A DUPLICATE_SEQUENCE_NUMBER "success" (a retried batch the broker already had)
        # carries offset -1: the records are on the target, their offsets unknown. No pair
        # at all: a (source, -1) row would translate to a target offset that does not exist.
        return []
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


def _purge(producer: Any) -> None:
    try:
        producer.purge(in_queue=True, in_flight=True, blocking=True)
        producer.poll(0)  # deliver the purge reports now, not from a later task's poll
    except Exception as exc:  # the task fails anyway; a purge error must not hide why
        log.warning("purging a failed producer: %s", exc)


def _both(a: Any, b: Any) -> Any:
    def cb(err: Any, msg: Any) -> None:
        a(err, msg)
        b(err, msg)
    return cb
