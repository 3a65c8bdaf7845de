"""What one Spark task does with one Kafka partition's slice of a micro-batch (executor side).

Spark's Kafka source gives every source partition's offset range of a batch to one task (the
job never sets `minPartitions`), in offset order. The task produces those records to the
target with confluent-kafka, exactly as `mirror run` does (same route, provenance header,
producer settings, partition, key, value, headers, CreateTime), flushes, and returns what the
driver needs for the offset map and the group commit. This module never imports pyspark: a
task gets plain tuples, so the logic runs (and is tested) without Spark.

Replays add no duplicates where the target provably holds the copies: a retried task or a batch
replayed after a driver crash first reads the target partition's last record; when its
provenance header names a source offset of this batch or later (`held`), the copies are read
back from where the copy of the batch's first record must be, and the batch's records up to
`held` are skipped only when they are copies of *these* records: the copy of the last record to
skip is read back and has that record's timestamp, key and value, and so does every copy of the
run back to the batch's first record (a copy of another record, of an earlier one, or a run
landed twice right before the run means the batch's first records never landed: nothing is
skipped; records by others between the copies are passed over). A run that stops short of the
copy of the batch's first record skips nothing, unless it starts at the target's log start (its
retention removed the rest). A source topic deleted and created again restarts its offsets at 0
while the target's copies name the old ones: those never match, and the batch is produced. A
LogAppendTime target proves nothing and skips nothing. A copy of a record that is not on the
target is never skipped; the worst case is a duplicate. The offset map gets the skipped
records' (source -> target) pairs, read from the same headers, so rows an interrupted attempt
never stored are stored now, but only when the copy of the batch's first record was read back:
pairs that start later would translate the positions before them past their copies (invariant
2). The rule is `mirror.domain.replay`'s, which `mirror run` follows at its assignments too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, islice
from typing import Any

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.replay import Replay, SourceRecord, delta_changes, origin_offset, replay_check, same
from mirror.domain.route import Route, route
from mirror.errors import FatalProduceError, MirrorError
from mirror.kafka import Admin, make_producer
from mirror.kafka.reader import TailRecord, read_range
from mirror.kafka.settings import BATCH_SIZE, PRODUCER_DEFAULTS, batch_size_for

# A Spark row of the batch, as the job selects it:
# (topic, partition, offset, timestamp ms, key, value, headers as [(key, value)] or None)
SourceRow = tuple[str, int, int, int, Any, Any, Any]
log = logging.getLogger(__name__)
CHUNK = 10_000  # rows produced between two looks at the producer (Spark's Arrow batch size)
# A task's producer queue: every Python worker of every executor holds one, beside an Arrow
# batch, and a task flushes at its end anyway, so a deeper queue only adds memory per worker.
# The flow's `producer` settings still override it.
TASK_QUEUE_KB = 4096
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
    # Source partitions whose target holds nothing past this batch's start: an earlier batch
    # of theirs in this query completed, or their target partition was empty when the driver
    # read it before the run's first query. Their tasks need not read the target's tail
    # unless retried (`mirror_chunks`).
    settled: frozenset[tuple[str, int]] = frozenset()
    # exactly_once: each source topic's id as the query started (the driver sets it per
    # query), written with the progress: progress naming another id is a deleted incarnation's.
    source_ids: dict[str, str] = field(default_factory=dict)

    @property
    def producer_settings(self) -> dict[str, Any]:
        return {
            **PRODUCER_DEFAULTS,
            "queue.buffering.max.kbytes": TASK_QUEUE_KB,
            "client.id": f"mirror-spark-{self.flow.name}",
            **self.flow.producer,
        }

    def producer_settings_for(self, target_topic: str) -> dict[str, Any]:
        """The producer settings for one target topic: batches sized as `mirror run` sizes them."""
        settings = self.producer_settings
        return {
            **settings,
            "batch.size": batch_size_for(int(settings.get("batch.size", BATCH_SIZE)), self.limits.get(target_topic)),
        }


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


def _headers(raw: Any) -> list[tuple[str, bytes | None]] | None:
    if not raw:
        return None
    return [(h[0], bytes(h[1]) if h[1] is not None else None) for h in raw]


def _bytes(v: Any) -> bytes | None:
    return bytes(v) if v is not None else None


def _compared(row: SourceRow) -> SourceRecord:
    """A row as the replay rule (`mirror.domain.replay`) compares it with its copy."""
    return (row[2], row[3], _bytes(row[4]), _bytes(row[5]))


def _same(copy: TailRecord, row: SourceRow) -> bool:
    """Is `copy` a copy of this row (`mirror.domain.replay.same`)?"""
    return same(copy, _compared(row))


def mirror_partition(plan: TaskPlan, rows: Iterable[SourceRow], *, retried: bool = False) -> Iterator[TaskResult]:
    """Mirror one source partition's rows (a Spark partition); yields one result (none when empty)."""
    rows = iter(rows)
    yield from mirror_chunks(plan, iter(lambda: list(islice(rows, CHUNK)), []), retried=retried)


def mirror_chunks(
    plan: TaskPlan, chunks: Iterable[Sequence[SourceRow]], *, retried: bool = False
) -> Iterator[TaskResult]:
    """Mirror one source partition's rows, arriving in chunks (Arrow record batches), as they
    arrive: a chunk is produced before the next is read, so a task holds one chunk, not its
    slice of the batch. Yields one result (none when there are no rows).

    The target's tail is read (`_replayed`) only where it may hold copies of these records
    already: a retried task (an earlier attempt may have produced part of the slice), or a
    partition the plan does not call `settled` (its first batch in this query: the group's
    commit may trail what an earlier run produced). A settled partition's batch starts
    where its previous batch in this query ended, and that batch's task flushed every record
    it was given before the batch completed; or it is the partition's first batch and its
    target partition was empty when the driver read it before the run's first query
    (`mirror.spark.starts.empty_targets`). Either way the target holds nothing past the
    batch's start, but for copies an earlier driver's executors were still sending (those
    are then produced again: duplicates, never a skip).
    """
    opened = open_slice(plan, chunks)
    if opened is None:
        return
    r, result, stream = opened
    topic, partition = result.topic, result.partition
    replay = Replay()
    if r.origin is not None and (retried or (topic, partition) not in plan.settled):
        replay, stream = _replayed(plan, r, stream)
    result.placed, result.warning, result.skipped = replay.placed, replay.warning, replay.skipped
    if replay.warning:
        log.warning("%s", replay.warning)
    result.next_offset = replay.last + 1
    settings = plan.producer_settings_for(r.target_topic)
    key = ("producer", plan.flow.name, plan.flow.target, str(settings["batch.size"]))
    sent = Sent()
    try:
        produced = _produce(plan, r, stream, key, settings, sent)
    except Exception:
        # Never reuse a failed producer (a fatal error, raised by produce() as a
        # KafkaException, leaves it unusable), and purge what it still holds first:
        # records left queued or in flight could land after the retried task's copies
        # (out of order, and the retry's contiguity check fails on them).
        failed = _CLIENTS.pop(key, None)
        if failed is not None:
            _purge(failed)
        raise
    pairs = list(replay.pairs)
    if sent.count:
        result.produced, result.bytes, result.max_timestamp_ms = sent.count, sent.bytes, sent.max_timestamp_ms
        result.next_offset = sent.last_offset + 1
        if produced:
            pairs.extend(produced)
        else:
            result.placed = False  # delivered, but the target did not say where (see `_produce`)
    result.syncs = delta_changes(pairs) if result.placed else []
    yield result


def open_slice(
    plan: TaskPlan, chunks: Iterable[Sequence[SourceRow]]
) -> tuple[Route, TaskResult, Iterator[Sequence[SourceRow]]] | None:
    """A task's slice: its route, the result to fill in, and its non-empty chunks, checked to
    be of one source partition as they stream by; None when there are no rows."""
    stream: Iterator[Sequence[SourceRow]] = (chunk for chunk in chunks if len(chunk))
    head = next(stream, None)
    if head is None:
        return None
    topic, partition = head[0][0], head[0][1]
    r = route(plan.flow, topic, partition)
    result = TaskResult(topic, partition, r.target_topic, head[0][2], head[0][2])
    return r, result, _one_partition(chain([head], stream), topic, partition)


def _one_partition(chunks: Iterable[Sequence[SourceRow]], topic: str, partition: int) -> Iterator[Sequence[SourceRow]]:
    for chunk in chunks:
        for row in chunk:
            if row[1] != partition or row[0] != topic:
                # One Kafka partition per Spark partition is what keeps order; a job that broke
                # it (minPartitions, a repartition) must fail loudly, not mirror out of order.
                raise MirrorError(
                    f"a Spark task got records of {topic}[{partition}] and {row[0]}[{row[1]}]: one Kafka "
                    "partition per task is required"
                )
        yield chunk


def _replayed(
    plan: TaskPlan, r: Route, stream: Iterator[Sequence[SourceRow]]
) -> tuple[Replay, Iterator[Sequence[SourceRow]]]:
    """What the target already holds of this slice (`replay_check`), and the chunks left to produce.

    Only the rows the target's last copy may cover (source offsets up to the one it names)
    are held back to be compared: at most what the target received of this slice before.
    """
    admin = cached(("admin", plan.flow.target), lambda: Admin(plan.flow.target, plan.target))
    marks = admin.watermarks([(r.target_topic, r.partition)], committed_only=False)[(r.target_topic, r.partition)]
    read = partial(read_range, plan.flow.target, plan.target, r.target_topic, r.partition, timeout=plan.target.timeout)
    tail = read(marks.high - 1, marks.high) if marks.high > marks.low else []
    newest = origin_offset(r, tail[-1].headers) if tail else None
    head = next(stream)
    if newest is None or newest < head[0][2]:
        return Replay(), chain([head], stream)
    held: list[SourceRow] = []
    rest: list[SourceRow] = []
    for chunk in chain([head], stream):
        cut = next((i for i, row in enumerate(chunk) if row[2] > newest), None)
        if cut is None:
            held.extend(chunk)
            continue
        held.extend(chunk[:cut])
        rest = list(chunk[cut:])
        break
    replay = replay_check(
        r,
        [_compared(row) for row in held],
        marks.low,
        marks.high,
        read,
        plan.source_ends.get((r.source_topic, r.partition)),
        tail=tail,
    )
    todo = [row for row in held if row[2] > replay.held]
    replay.skipped, replay.last = len(held) - len(todo), held[-1][2]
    return replay, chain([todo + rest] if todo or rest else [], stream)


@dataclass
class Sent:
    """What `_produce` sent, counted as the rows stream by."""

    count: int = 0
    bytes: int = 0
    max_timestamp_ms: int = -1
    first_offset: int = -1
    last_offset: int = -1


class _Reports:
    """The delivery reports `_produce` asked for: target offset by record index, and errors."""

    def __init__(self) -> None:
        self.offsets: dict[int, int] = {}
        self.errors: list[str] = []

    def callback(self, index: int) -> Callable[[Any, Any], None]:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(f"{err.str() if hasattr(err, 'str') else err}")
            else:
                self.offsets[index] = msg.offset()

        return cb


def _produce(
    plan: TaskPlan,
    r: Route,
    chunks: Iterable[Sequence[SourceRow]],
    key: tuple[str, ...],
    settings: dict[str, Any],
    sent: Sent,
) -> list[tuple[int, int]]:
    """Produce the rows in order as their chunks arrive, flush, and return the (source,
    target) offsets where target - source changes (none when the target acknowledged the
    records without offsets).

    Only the first record and each chunk's last ask for a delivery report (as `mirror run`
    reports per segment): the producer is idempotent with the gapless guarantee, so the last
    one acknowledged means all are, and reports `n - 1` apart prove the run landed contiguously.
    """
    # One producer per batch size (as `mirror run`): a small-limit topic keeps the others' large batches.
    producer = cached(key, lambda: make_producer(plan.flow.target, plan.target, settings))
    return produce_on(producer, r, chunks, sent)


def produce_on(producer: Any, r: Route, chunks: Iterable[Sequence[SourceRow]], sent: Sent) -> list[tuple[int, int]]:
    """`_produce` on a given producer (a task's transactional one, with exactly_once)."""
    reports = _Reports()
    changes = _send(producer, r, chunks, sent, reports)
    if not sent.count:
        return []
    _flush(producer, r, sent.first_offset)
    if reports.errors:
        raise FatalProduceError(
            r.source_topic, r.partition, sent.first_offset, f"producing to {r.target_topic} failed: {reports.errors[0]}"
        )
    return _placed(r, reports.offsets, changes, sent)


def _send(
    producer: Any, r: Route, chunks: Iterable[Sequence[SourceRow]], sent: Sent, reports: _Reports
) -> list[tuple[int, int]]:
    """The per-record loop: produce every row, count it in `sent`, and return the (source
    offset, index) pairs where index - source changes."""
    produce, target, headers_for = producer.produce, r.target_topic, r.headers
    changes: list[tuple[int, int]] = []
    n, nbytes, max_ts, shift = 0, 0, -1, None
    for chunk in chunks:
        end = n + len(chunk) - 1
        if sent.first_offset < 0:
            sent.first_offset = chunk[0][2]
        for _topic, partition, offset, ts, k, value, headers in chunk:
            kwargs: dict[str, Any] = {"on_delivery": reports.callback(n)} if n == end or n == 0 else {}
            if n - offset != shift:
                shift = n - offset
                changes.append((offset, n))
            while True:
                try:
                    produce(
                        target,
                        value,
                        k,
                        partition=partition,
                        timestamp=ts,
                        headers=headers_for(offset, _headers(headers)),
                        **kwargs,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)  # acknowledgements free queue room
            nbytes += (len(k) if k is not None else 0) + (len(value) if value is not None else 0)
            if ts > max_ts:
                max_ts = ts
            n += 1
        sent.last_offset = chunk[-1][2]
        producer.poll(0)  # serve the delivery reports as we go, not all at the flush
    sent.count, sent.bytes, sent.max_timestamp_ms = n, nbytes, max_ts
    return changes


def _flush(producer: Any, r: Route, first: int) -> None:
    """Wait for every record's acknowledgement; a target slower than FLUSH_TIMEOUT fails the task."""
    deadline = time.monotonic() + FLUSH_TIMEOUT
    while producer.flush(1.0) > 0:
        if time.monotonic() > deadline:
            raise FatalProduceError(
                r.source_topic,
                r.partition,
                first,
                f"the target did not acknowledge {r.target_topic}[{r.partition}] within {FLUSH_TIMEOUT:.0f}s",
            )


def _placed(r: Route, reports: dict[int, int], changes: list[tuple[int, int]], sent: Sent) -> list[tuple[int, int]]:
    """The (source, target) pairs where the delta changes, from the reported target offsets of
    the run's records (by index); fails the task when the run did not land contiguously."""
    if any(o < 0 for o in reports.values()):
        # A DUPLICATE_SEQUENCE_NUMBER "success" (a retried batch the broker already had)
        # carries offset -1: the records are on the target, their offsets unknown. No pair
        # at all: a (source, -1) row would translate to a target offset that does not exist.
        return []
    n = sent.count
    t0, t1 = reports.get(0), reports.get(n - 1)
    if t0 is None or t1 is None or any(o - t0 != i for i, o in reports.items()):
        raise FatalProduceError(
            r.source_topic,
            r.partition,
            sent.first_offset,
            f"{r.target_topic}[{r.partition}] did not receive the batch contiguously (offsets {t0}..{t1} "
            f"for {n} records)",
            hint="is another producer writing the target topic?",
        )
    return [(src, t0 + i) for src, i in changes]


# Spark reuses a Python worker process for the tasks of later batches (one task at a time):
# its producer and admin client are kept for them, instead of a new connection per task.
_CLIENTS: dict[tuple[str, ...], Any] = {}


def cached(key: tuple[str, ...], make: Callable[[], Any]) -> Any:
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
