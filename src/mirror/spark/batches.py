"""The driver's part of each micro-batch: plan the tasks, then rows stored, then the group committed.

Invariant 1 holds per batch: the tasks produce the batch's records, the offset-map rows of
what they produced are stored (retried while the store fails), and only then the group moves
past them. A batch whose rows cannot be stored before a stop commits nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from mirror.domain.acks import AckBatch
from mirror.domain.throttle import Throttle
from mirror.domain.topics import TopicMapping
from mirror.engine.status import FlowState, FlowStatus
from mirror.errors import OffsetStoreError
from mirror.run.supervisor import restart_delay
from mirror.spark.arrow import COLUMNS, RESULT_SCHEMA, mirror_arrow, results_of
from mirror.spark.checkpoint import batch_ends
from mirror.spark.commits import GroupCommits, Partition
from mirror.spark.gaps import BatchGaps, without_deleted
from mirror.spark.jvm import JvmWriter
from mirror.spark.task import TaskPlan, TaskResult
from mirror.spark.warmup import Warmup

log = logging.getLogger(__name__)

STORE_BACKOFF, STORE_BACKOFF_MAX = 1.0, 30.0  # offset-store retries: doubling waits, at most this long


class Batches:
    """`foreachBatch`'s handler for one flow's queries; counts what was mirrored."""

    def __init__(
        self,
        flow: str,
        source: Any,
        plan: TaskPlan,
        recorder: Any,
        commits: GroupCommits,
        *,
        metrics: Any = None,
        stop: threading.Event | None = None,
        status: FlowStatus | None = None,
        throttle: Throttle | None = None,
    ) -> None:
        self.flow = flow
        # The flow's read cap: paid for after each batch, the next one waits until it is.
        self.throttle = throttle
        self.source = source
        self.plan = plan
        self.recorder = recorder
        self.commits = commits
        self.metrics = metrics
        self.stop = stop or threading.Event()
        self.status = status or FlowStatus(flow)
        self.limits: dict[str, int] = {}  # target topic -> max.message.bytes (`TaskPlan.limits`)
        self.store_backoff = STORE_BACKOFF  # first wait after an offset-store failure
        self.records = 0
        self.skipped = 0
        self.paths: dict[str, int] = {}  # batches per path taken (`JvmWriter.run`), for tests and the bench
        self._parts: list[Partition] = []
        self._checkpoint = Path()
        # Partitions whose target holds nothing past their next batch's start (`TaskPlan.settled`):
        # a batch of theirs completed in this query, or their target was empty when it started.
        self._settled: set[Partition] = set()
        self.jvm = JvmWriter(plan)  # the batch's records produced by Java tasks where it may (`mirror.spark.jvm`)
        self.gaps = BatchGaps(flow, source, recorder, metrics)  # records deleted past the query's position

    def start_query(self, mappings: list[TopicMapping], checkpoint: Path, empty: Collection[Partition] = ()) -> None:
        """A new query over `mappings`, checkpointed at `checkpoint`. It starts at the group's
        offsets (or resumes where they lie): the target may be ahead of any partition, but
        for those in `empty` (their target partition held nothing before the query started,
        `mirror.spark.starts.empty_targets`), which are settled from the first batch."""
        self._parts = [(m.source, p) for m in mappings for p in range(m.partitions)]
        self._checkpoint = checkpoint
        self._settled = set(empty) & set(self._parts)

    def warm_up(self, spark: Any, mappings: list[TopicMapping]) -> Warmup | None:
        """Start readying the executors' clients for a query over `mappings` (`mirror.spark.warmup`)."""
        return Warmup.start(spark, self.jvm, replace(self.plan, limits=self.limits), {m.source for m in mappings})

    def on_batch(self, df: Any, batch_id: int) -> None:
        """Mirror one micro-batch: tasks produce, then rows are stored, then the group commits."""
        # The source ends now (after the batch was planned): a target copy naming an offset at
        # or past them is not of this topic's records (a recreated topic); see `replay_check`.
        # Only the Python tasks use them: asked now, waited for only where the batch (or the
        # part the JVM writer left) goes their way, so the JVM writer's job does not wait for
        # the round trip.
        t0 = time.monotonic()
        pending = self.source.request_end_offsets(self._parts)
        plan = replace(self.plan, limits=self.limits, settled=frozenset(self._settled))

        def python(df: Any, plan: TaskPlan) -> list[TaskResult]:
            return _python_tasks(df, replace(plan, source_ends=pending.result()))

        begins = self._begins(batch_id)
        t1 = time.monotonic()
        path, results = self.jvm.run(df, plan, {t for t, _ in self._parts}, batch_id, python)
        self.paths[path] = self.paths.get(path, 0) + 1
        t2 = time.monotonic()
        ends = batch_ends(self._checkpoint, batch_id)
        if ends is None:  # not expected: Spark wrote it before the batch ran
            log.warning(
                "flow %s: batch %d: its offset range is unreadable; committing its records only", self.flow, batch_id
            )
        self.gaps.report(batch_id, begins, ends or {}, results)
        self.finish(batch_id, results, ends or {})
        # Their next batch starts where this one ended, and the target holds nothing past it.
        self._settled.update((r.topic, r.partition) for r in results)
        if self.throttle is not None and self.throttle.capped:
            read = sum(r.produced + r.skipped for r in results)
            pace(self.throttle, self.stop, read, sum(r.bytes for r in results))
        log.debug(
            "flow %s: batch %d: %d tasks (%s), %d records; tasks %.0f ms, driver %.0f ms (source ends asked "
            "%.0f ms, rows stored and committed %.0f ms)",
            self.flow,
            batch_id,
            len(results),
            path,
            sum(r.produced for r in results),
            (t2 - t1) * 1000,
            (time.monotonic() - t2 + t1 - t0) * 1000,
            (t1 - t0) * 1000,
            (time.monotonic() - t2) * 1000,
        )

    def _begins(self, batch_id: int) -> dict[Partition, int]:
        """Where batch `batch_id`'s ranges start: the previous batch's ends in Spark's offset
        log, else (a query's first batch) where the group stands, as the query started it."""
        before = batch_ends(self._checkpoint, batch_id - 1) if batch_id > 0 else None
        return dict(before) if before is not None else self.commits.positions

    def finish(self, batch_id: int, results: list[TaskResult], ends: Mapping[Partition, int]) -> None:
        """The driver's part of a batch once the tasks produced it: rows stored, then the commit.

        The group is committed at the batch's range `ends` (Spark's offset log), not only past
        its last records: a range may end in transaction markers or aborted records, and Spark
        records the batch complete as soon as this returns. A driver dying then must find the
        group at the end of the range, or the restart cannot resume the checkpoint.
        """
        batches = [
            AckBatch(
                self.flow,
                r.topic,
                r.partition,
                r.target_topic,
                r.first_offset,
                r.next_offset,
                # Unplaced (part of the batch's target offsets unknown): no rows and no
                # tip, so translation resumes before these records, never past them.
                count=r.produced + r.skipped if r.placed else 0,
                bytes=r.bytes,
                max_timestamp_ms=r.max_timestamp_ms,
                syncs=r.syncs,
            )
            for r in results
        ]
        for r in results:
            warning = without_deleted(r.warning)  # deleted records: reported as gaps (`BatchGaps`)
            if warning:
                log.warning("flow %s: batch %d: %s", self.flow, batch_id, warning)
        self.recorder.on_acked(batches)
        if self.metrics is not None:
            # The metrics count what was produced; a copy only where that differs (a replay).
            self.metrics.on_acked(
                [b if b.count == r.produced else replace(b, count=r.produced) for b, r in zip(batches, results)]
            )
        self._store_rows(batch_id)  # invariant 1: rows durable before the group moves past them
        self.records += sum(r.produced for r in results)
        self.skipped += sum(r.skipped for r in results)
        if any(r.skipped for r in results):
            log.warning(
                "flow %s: batch %d: %d records were already on the target (a replayed batch); not produced again",
                self.flow,
                batch_id,
                sum(r.skipped for r in results),
            )
        positions = dict(ends)
        for r in results:
            positions[(r.topic, r.partition)] = max(r.next_offset, positions.get((r.topic, r.partition), -1))
        self.commits.commit(positions)

    def _store_rows(self, batch_id: int) -> None:
        """Flush the recorder, retrying with backoff while the store fails (as `mirror run`
        holds commits back and carries on): the batch, and so the query, waits for the
        store instead of failing. The recorder keeps the rows and logs the outage and the
        recovery once each. A stop while the store still fails raises: no commit."""
        failures = 0
        while True:
            try:
                self.recorder.flush()
                if failures:
                    self.status.set(FlowState.RUNNING, "the offset store answers again")
                return
            except OffsetStoreError as exc:
                failures += 1
                if self.stop.is_set():
                    raise
                self.status.set(FlowState.RETRYING, f"batch held back: {exc}")
                delay = restart_delay(failures, base=self.store_backoff, cap=STORE_BACKOFF_MAX)
                log.debug(
                    "flow %s: batch %d: offset store failure %d, retrying in %.1fs",
                    self.flow,
                    batch_id,
                    failures,
                    delay,
                )
                self.stop.wait(delay)  # a stop meanwhile: one last attempt, then raise above


def pace(throttle: Throttle, stop: threading.Event, records: int, nbytes: int) -> None:
    """After a batch of `records` and `nbytes` read: wait (returning at a stop) until the cap
    has paid for them, so the next batch starts no sooner than the average rate allows.
    The batch is committed already: the cap delays only the next read."""
    throttle.took(records, nbytes)
    while not stop.is_set() and not throttle.allowed(1):
        stop.wait(min(1.0, max(0.01, throttle.delay())))


def _python_tasks(df: Any, plan: TaskPlan) -> list[TaskResult]:
    """The batch's tasks in Python workers (`mirror.spark.arrow`)."""
    return results_of(df.selectExpr(*COLUMNS).mapInArrow(partial(mirror_arrow, plan), RESULT_SCHEMA).collect())
