"""Exactly-once for the Spark engine: one target transaction per task attempt (executor side).

With `exactly_once`, a task's copies of its source partition's slice and the partition's
progress (the next source offset to copy, in the flow's progress group on the target:
`mirror.kafka.progress`) are committed in one transaction, so a read_committed consumer of
the target sees either all of an attempt's copies and the progress past them, or neither.

Fencing: every attempt of every task of a source partition uses the same transactional.id,
`mirror.<flow>.spark.<topic>.<partition>` (`writer_id`). A new attempt's `init_transactions`
bumps the id's epoch: it aborts whatever an earlier attempt left open (an executor killed
mid-batch, a driver killed with its tasks) and makes that attempt's later calls fail with a
fenced error, so a retried or speculative attempt can never commit beside the first. Batches
of one partition never run at the same time (a query runs its batches one after the other),
so the ids need no more than the partition. The native engine's fence step treats these ids
as any other writer's (they are in the progress metadata), so a flow can move between engines.

Only after `init_transactions` is the partition's progress read: what an earlier attempt
committed is then settled (no transaction of this id is open any more), and the attempt
writes only the records past it (`mirror.spark.task`).

The progress names the source topic's id as the query started (`TaskPlan.source_ids`), as the
native engine's does: a source topic deleted and created again has a new id, and progress
naming the old one counts as none, on the driver (the query starts the topic from the
beginning) and in the task (it writes the slice whole), whatever offsets it names.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain
from typing import Any, TypeVar

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.route import Route
from mirror.domain.topics import TopicMapping
from mirror.errors import ClusterUnavailable, MirrorError
from mirror.kafka import make_producer
from mirror.kafka.progress import (
    Progress,
    ProgressGroup,
    ProgressPending,
    TransactionFailed,
    fence,
    progress_offsets,
    transact,
)
from mirror.kafka.settings import transactional_settings
from mirror.spark.task import Sent, SourceRow, TaskPlan, TaskResult, cached, delta_changes, open_slice, produce_on

log = logging.getLogger(__name__)

Partition = tuple[str, int]
T = TypeVar("T")

RETRY_BACKOFF = 0.2  # between two reads of the progress while its coordinator is not ready
ABORT_TIMEOUT = 5.0  # a failed attempt's abort is a courtesy: the next attempt's init aborts it anyway


def writer_id(flow: str, topic: str, partition: int) -> str:
    """The transactional.id of every attempt of a Spark task for source partition `topic[partition]`."""
    return f"mirror.{flow}.spark.{topic}.{partition}"


class TaskTransaction:
    """One task attempt's transactional producer and its one transaction.

    `start()` fences earlier attempts and returns the progress; `begin()`, the records
    produced on `producer`, then `commit(next_offset)` (records and progress together) or
    `abort()`; `close()` always. A producer is never reused: the next attempt, or the next
    batch's task, must go through `init_transactions` to fence whatever ran before it.
    """

    def __init__(
        self,
        flow: FlowConfig,
        target: ClusterConfig,
        r: Route,
        settings: dict[str, Any],
        progress: ProgressGroup,
        source_id: str | None = None,
    ) -> None:
        """`settings`: the producer's, transactional (`transactional_settings` with `writer_id`);
        `source_id`: the source topic's id, written with the progress (None: not said)."""
        self.id = str(settings["transactional.id"])
        self.partition = (r.target_topic, r.partition)
        self.source_id = source_id
        self.timeout = target.timeout
        self._progress = progress
        self.cluster_name, self.cluster = flow.target, target
        self.producer = make_producer(flow.target, target, settings)
        self._open = False

    def start(self) -> Progress | None:
        """Fence every earlier attempt (their open transaction aborted), then read the
        partition's committed progress (None: no progress).

        A transaction of another writer still open on the progress (a native worker that
        died or froze while it held the partition) is that writer's, named in the last
        committed progress: it is fenced too, as the native engine's claim fences ours."""
        transact(f"init transactional id {self.id}", self.producer.init_transactions, self.timeout)
        deadline = time.monotonic() + self.timeout
        fenced: set[str] = set()
        while True:
            try:
                return _patient(lambda t: self._progress.read([self.partition], t).get(self.partition), deadline)
            except ProgressPending:
                last = self._progress.read([self.partition], self.timeout, stable=False).get(self.partition)
                writer = last.writer_id if last is not None else None
                if writer is None or writer == self.id or writer in fenced:
                    raise
                fence(self.cluster_name, self.cluster, writer, self.timeout)
                fenced.add(writer)

    def begin(self) -> None:
        transact(f"{self.id}: begin a transaction", lambda _t: self.producer.begin_transaction(), self.timeout)
        self._open = True

    def commit(self, next_offset: int) -> None:
        """Commit the records produced since `begin` with the partition's progress at `next_offset`."""
        ids = {self.partition: self.source_id} if self.source_id is not None else None
        offsets = progress_offsets({self.partition: next_offset}, self.id, ids)
        metadata = self._progress.metadata()
        transact(
            f"{self.id}: send the progress",
            lambda t: self.producer.send_offsets_to_transaction(offsets, metadata, t),
            self.timeout,
        )
        transact(f"{self.id}: commit", self.producer.commit_transaction, self.timeout)
        self._open = False

    def abort(self) -> None:
        """Abort the open transaction, if any; a failure is logged (the next attempt fences it)."""
        if not self._open:
            return
        self._open = False
        try:
            transact(f"{self.id}: abort", self.producer.abort_transaction, ABORT_TIMEOUT)
        except MirrorError as exc:
            log.warning(
                "%s: the failed attempt's transaction was not aborted (the next attempt will): %s", self.id, exc
            )

    def close(self) -> None:
        self.abort()
        try:
            self.producer.purge(in_queue=True, in_flight=False)
            self.producer.flush(0)
        except Exception as exc:  # closing after a failure: the cause is what the task reports
            log.debug("%s: closing the producer: %s", self.id, exc)


def mirror_exactly_once(plan: TaskPlan, chunks: Iterable[Sequence[SourceRow]]) -> Iterator[TaskResult]:
    """`mirror_chunks` with `exactly_once`: the slice's records and the partition's progress
    committed together. Yields one result (none when there are no rows).

    The records written are those at or past the committed progress `P` (read after the
    fence). `P` at or past the slice's end: an earlier attempt (or an earlier run) committed
    all of it, nothing is written. `P` inside the slice: its records before `P` are on the
    target already. `P` before the slice's start: the records are written from the start,
    which cannot lose one: the slice starts where the driver started the query (at `P`
    itself, or at the source log's start when retention deleted the records from `P` on) or
    where the query's previous batch ended, whose records were all committed with the
    progress at its last record + 1; what lies between that and the batch's end are offsets
    a read_committed consumer never gets (transaction markers, aborted or compacted records).
    A `P` naming another source topic id, or past the source partition's end, is another
    incarnation's (the source topic was deleted and created again): it is ignored, and the
    slice written whole.
    """
    opened = open_slice(plan, chunks)
    if opened is None:
        return
    r, result, stream = opened
    progress = cached(
        ("progress", plan.flow.name, plan.flow.target),
        lambda: ProgressGroup(plan.flow.target, plan.target, plan.flow.progress_group),
    )
    settings = transactional_settings(
        writer_id(plan.flow.name, r.source_topic, r.partition), plan.producer_settings_for(r.target_topic)
    )
    txn = TaskTransaction(plan.flow, plan.target, r, settings, progress, plan.source_ids.get(r.source_topic))
    try:
        done = _trusted(txn, txn.start(), plan.source_ends.get((r.source_topic, r.partition)), result.first_offset)
        rows = _Skip(-1 if done is None else done)
        sent, pairs = _write(txn, r, rows.past(stream), int(settings["transaction.timeout.ms"]) / 1000 / 3)
    except MirrorError:
        raise
    except Exception as exc:  # a fenced producer's flush raises from inside its callbacks: say the cause
        raise MirrorError(f"{txn.id}: the task attempt failed: {_root_cause(exc)}") from exc
    finally:
        txn.close()
    result.skipped, result.next_offset = rows.skipped, rows.last + 1
    if sent.count:
        result.produced, result.bytes, result.max_timestamp_ms = sent.count, sent.bytes, sent.max_timestamp_ms
    # Skipped records are an earlier attempt's copies, at target offsets this attempt does not
    # know: no rows and no tip for the batch then (translation errs before them, never past).
    result.placed = not rows.skipped and pairs is not None
    result.syncs = delta_changes(pairs or []) if result.placed else []
    yield result


def _patient(read: Callable[[float], T], deadline: float) -> T:
    """`read(remaining time)`, again while the group's coordinator is not ready
    (ClusterUnavailable: a new group, a broker restarting) and `deadline` is not past: not
    worth a failed task attempt, nor a failed run."""
    while True:
        try:
            return read(max(0.1, deadline - time.monotonic()))
        except ClusterUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(RETRY_BACKOFF)


def _root_cause(exc: BaseException) -> BaseException:
    while (inner := exc.__cause__ or exc.__context__) is not None:
        exc = inner
    return exc


def _trusted(txn: TaskTransaction, got: Progress | None, source_end: int | None, first: int) -> int | None:
    """The progress `got`'s next offset, unless it is another source incarnation's: it names
    another source topic id, or an offset past the source partition's end."""
    if got is None:
        return None
    if not same_source(got, txn.source_id):
        log.warning(
            "%s: the progress on the target (%d) was committed copying a deleted incarnation of the source "
            "topic (id %s, now %s): writing the batch from offset %d",
            txn.id,
            got.next_offset,
            got.source_id,
            txn.source_id,
            first,
        )
        return None
    if source_end is None or got.next_offset <= source_end:
        return got.next_offset
    log.warning(
        "%s: the progress on the target (%d) is past the source partition's end %d (a recreated source topic?): "
        "writing the batch from offset %d",
        txn.id,
        got.next_offset,
        source_end,
        first,
    )
    return None


def same_source(got: Progress, source_id: str | None) -> bool:
    """Whether progress `got` counts in the source topic whose id is `source_id`: it names
    that id, or either id is unknown (progress written before ids were, or by a reset)."""
    return got.source_id is None or source_id is None or got.source_id == source_id


def _write(
    txn: TaskTransaction, r: Route, todo: Iterator[Sequence[SourceRow]], budget: float
) -> tuple[Sent, list[tuple[int, int]] | None]:
    """Write the chunks in transactions of at most `budget` seconds of producing each (a
    third of the transaction timeout: the coordinator aborts a transaction open longer, and
    a task of a large batch would then fail every attempt), each committed with the progress
    past its last record. Returns what was sent and its (source, target) pairs (None: some
    records were acknowledged without offsets)."""
    total = Sent()
    pairs: list[tuple[int, int]] | None = []
    while (head := next(todo, None)) is not None:
        sent = Sent()
        txn.begin()
        run = produce_on(txn.producer, r, chain([head], _until(todo, time.monotonic() + budget)), sent)
        txn.commit(sent.last_offset + 1)
        if not run:
            pairs = None
        elif pairs is not None:
            pairs.extend(run)  # each transaction's marker moves the delta: its first pair is a row
        total.count, total.bytes = total.count + sent.count, total.bytes + sent.bytes
        total.max_timestamp_ms = max(total.max_timestamp_ms, sent.max_timestamp_ms)
        total.last_offset = sent.last_offset
    return total, pairs


def _until(chunks: Iterator[Sequence[SourceRow]], deadline: float) -> Iterator[Sequence[SourceRow]]:
    """The chunks up to the first one that ends past `deadline` (the rest stay in `chunks`)."""
    for chunk in chunks:
        yield chunk
        if time.monotonic() >= deadline:
            return


class _Skip:
    """Drops a slice's rows before source offset `done` as the chunks stream by, counting them."""

    def __init__(self, done: int) -> None:
        self.done = done
        self.skipped = 0
        self.last = -1  # the last source offset seen, skipped or not

    def past(self, chunks: Iterable[Sequence[SourceRow]]) -> Iterator[Sequence[SourceRow]]:
        for chunk in chunks:
            self.last = chunk[-1][2]
            if chunk[0][2] >= self.done:
                yield chunk
                continue
            cut = next((i for i, row in enumerate(chunk) if row[2] >= self.done), len(chunk))
            self.skipped += cut
            if cut < len(chunk):
                yield chunk[cut:]


# ---------------------------------------------------------------------------- driver side


def with_progress(
    committed: Mapping[Partition, tuple[int, str | None]],
    progress: Mapping[Partition, Progress],
    mappings: Iterable[TopicMapping],
    source_ids: Mapping[str, str] | None = None,
) -> dict[Partition, tuple[int, str | None]]:
    """The source group's (offset, metadata) per source partition with the offset replaced by
    the target's committed progress (keyed by target partition) where there is one that
    counts in the source topic as it is now (`source_ids`: see `same_source`).

    With `exactly_once` the target says where the copy resumes; the group's offset is the
    start only of a partition with no progress yet (its first exactly-once run), and its
    metadata (the target topic's id) still tells a recreated target."""
    ids = source_ids or {}
    out = dict(committed)
    for m in mappings:
        for p in range(m.partitions):
            got = progress.get((m.target, p))
            if got is not None and same_source(got, ids.get(m.source)):
                meta = committed[(m.source, p)][1] if (m.source, p) in committed else None
                out[(m.source, p)] = (got.next_offset, meta)
    return out


class ProgressStarts:
    """Where a query starts with `exactly_once`: the target's committed progress (the source
    group's offset only where a partition has none yet), and that progress set back to 0
    for partitions mirrored again from the beginning. Used by `mirror.spark.starts`."""

    def __init__(self, flow: FlowConfig, target: ClusterConfig, admin: Any) -> None:
        self.flow = flow
        self.target = target
        self.admin = admin  # the target's Admin

    def committed(
        self,
        committed: Mapping[Partition, tuple[int, str | None]],
        mappings: list[TopicMapping],
        source_ids: Mapping[str, str],
    ) -> tuple[dict[Partition, tuple[int, str | None]], set[str]]:
        """`committed` (the source group's) with the target's progress where there is one, and
        the source topics some of whose progress names another id than `source_ids`': their
        topic was deleted and created again since (while no query ran), so the query must
        mirror them from the beginning, as a topic recreated between two queries of a run.

        Read not `stable`: a transaction still open (a task of a killed driver, whose
        executors died with it) would hold this read until it timed out. The last committed
        progress is a safe start: every task fences its partition's earlier attempts and
        reads the progress again, stable, before it writes (`mirror_exactly_once`)."""
        parts = [(m.target, p) for m in mappings for p in range(m.partitions)]
        group = ProgressGroup(self.flow.target, self.target, self.flow.progress_group)
        try:
            progress = _patient(lambda t: group.read(parts, t, stable=False), time.monotonic() + self.target.timeout)
        finally:
            group.close()
        others = {
            m.source
            for m in mappings
            for p in range(m.partitions)
            if (got := progress.get((m.target, p))) is not None and not same_source(got, source_ids.get(m.source))
        }
        return with_progress(committed, progress, mappings, source_ids), others

    def reset(self, mappings: list[TopicMapping], partitions: Iterable[Partition]) -> None:
        """The progress of source `partitions` mirrored again from the beginning (a recreated
        topic) back to 0: a task skips the records below the progress, and the old one names
        an earlier incarnation's offsets.

        Every attempt of their tasks is fenced first: one left over from before (an executor
        of a killed driver, its transaction open) could otherwise commit its progress after
        the reset, and this query's tasks would skip the records below its slice."""
        targets = {m.source: m.target for m in mappings}
        reset = [(s, p) for s, p in partitions if s in targets]
        for s, p in reset:
            fence(self.flow.target, self.target, writer_id(self.flow.name, s, p), self.target.timeout)
        if reset:
            self.admin.alter_group_offsets(self.flow.progress_group, {(targets[s], p): 0 for s, p in reset})


__all__ = [
    "ProgressStarts",
    "TaskTransaction",
    "TransactionFailed",
    "mirror_exactly_once",
    "with_progress",
    "writer_id",
]
