"""`mirror spark run`: one flow mirrored by a Spark Structured Streaming query (driver side).

    Kafka source (read_committed, headers)            per batch, on the driver
    ──▶ foreachBatch: one task per source partition ──▶ offset-map rows stored ──▶ group commit
        (mirror.spark.task: produce, flush)              (OffsetMapRecorder)       (explicit offsets)

The flow's consumer group on the source is the source of truth, whichever engine ran the
flow: a query starts from the group's committed offsets (`startingOffsets`), and every batch
ends with the offset-map rows stored and then the group committed (invariant 1), so `mirror
lag`, checkpoints, failover and a later `mirror run` work unchanged. Spark's own checkpoint
only says which batch was planned last; a batch replayed from it skips what the target
provably holds (see `mirror.spark.task`). With `exactly_once` the target's committed progress, not the group,
says where a query starts, and each task attempt commits its copies with that progress in
one fenced transaction (`mirror.spark.exactly_once`); the group is still committed after
each batch, for lag, checkpoints and failover.

Spark's Kafka *sink* is not used: it cannot set the record timestamp and discards the
produced records' offsets, so it could keep neither CreateTime nor the offset map.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from mirror.config import Config, FlowConfig
from mirror.domain.gaps import GapPolicy
from mirror.domain.throttle import Throttle
from mirror.domain.topics import TopicMapping, mirrorable_topics, unmirrorable_reason
from mirror.engine.start_points import StartPoints
from mirror.engine.status import FlowState, FlowStatus
from mirror.engine.targets import LIMIT_HEADROOM, ensure_targets
from mirror.errors import MirrorError, UnsafeOperation
from mirror.kafka import Admin
from mirror.run.aclsync import start_acl_sync
from mirror.run.recorder import OffsetMapRecorder
from mirror.spark.batches import Batches
from mirror.spark.checkpoint import default_checkpoint, has_batches, own_checkpoint, resume_problem
from mirror.spark.clients import java_kafka_options
from mirror.spark.commits import GroupCommits, Partition
from mirror.spark.exactly_once import ProgressStarts
from mirror.spark.jvm import query_name
from mirror.spark.session import LOCAL, UI_PORT, check_local, start_session
from mirror.spark.starts import StartingOffsets, Starts, empty_targets
from mirror.spark.startup import SessionStart
from mirror.spark.task import CHUNK, TaskPlan
from mirror.spark.trigger import available_now_limit, backlog
from mirror.spark.watch import TopicWatch
from mirror.store import open_store

log = logging.getLogger(__name__)

CAPPED_BATCH_SECONDS = 10  # a capped flow's micro-batch: at most this many seconds of its records cap


class SparkFlow:
    """Runs one flow's streaming queries until caught up or stopped.

    Wires the units: `StartingOffsets` decides where each query starts, `Batches` handles
    its micro-batches (rows stored, then `GroupCommits` commits), `TopicWatch` says when
    the query must restart. This class owns the query's lifecycle: its source options,
    its checkpoint, and the wait that ends on a stop, a failure or a change of topics.
    """

    def __init__(
        self,
        config: Config,
        flow: FlowConfig,
        *,
        master: str | None = None,
        checkpoint: Path | None = None,
        until_caught_up: bool = False,
        max_records_per_batch: int | None = None,
        metrics: Any = None,
        stop: threading.Event | None = None,
        status: FlowStatus | None = None,
    ) -> None:
        self.config = config
        self.flow = flow
        self.master = master or LOCAL
        self.checkpoint = checkpoint
        self.until_caught_up = until_caught_up
        self.max_records_per_batch = max_records_per_batch
        # The flow's read cap: the driver waits after each batch until the cap paid for it.
        self.throttle = Throttle(flow.max_bytes_per_second, flow.max_records_per_second, clock=time.monotonic)
        self.metrics = metrics
        self.stop = stop or threading.Event()
        self.status = status or FlowStatus(flow.name)  # as `mirror run` reports it (`mirror_flow_state`)
        self._batches: Batches | None = None
        self._told_too_long: set[str] = set()  # topics left out (their target name is too long), said once

    @property
    def records(self) -> int:
        return self._batches.records if self._batches else 0

    @property
    def skipped(self) -> int:
        return self._batches.skipped if self._batches else 0

    @property
    def paths(self) -> dict[str, int]:
        """Batches per path taken (`mirror.spark.jvm.JvmWriter.run`)."""
        return dict(self._batches.paths) if self._batches else {}

    # ------------------------------------------------------------------ checks

    def preflight(self) -> None:
        """Everything that must hold before the query starts; nothing is produced before it."""
        self.check_local()
        self.check_clusters()

    def check_local(self) -> None:
        """What must hold before a Spark session is started: Java, the master, the source options."""
        check_local(self.config, self.flow, self.master)

    def check_clusters(self) -> None:
        """The clusters answer and no other engine mirrors the flow (may run beside the session's start)."""
        self._source = Admin(self.flow.source, self.config.clusters[self.flow.source])
        self._target = Admin(self.flow.target, self.config.clusters[self.flow.target])
        members = self._source.group_members(self.flow.group_id)
        if members:
            raise UnsafeOperation(
                f"flow {self.flow.name}: group {self.flow.group_id!r} has {members} live members on "
                f"{self.flow.source} (is `mirror run` mirroring it?)",
                hint="stop the other run first: one engine per flow at a time",
            )
        self._target.topics()

    # ------------------------------------------------------------------ run

    def run(self, session: Callable[[], Any]) -> None:
        """Mirror until stopped or caught up. `session()` gives the Spark session, called once
        the first query's start is decided: it may still be starting meanwhile (None: the
        run was stopped while it waited)."""
        name, group = self.flow.name, self.flow.group_id
        store = open_store(self.config.offset_store)
        recorder = OffsetMapRecorder(store, name, registry=None)
        self._commits = GroupCommits(name, group, self._source, self._target, stop=self.stop)
        progress = (
            ProgressStarts(self.flow, self.config.clusters[self.flow.target], self._target)
            if self.flow.exactly_once
            else None
        )
        self._starts = StartingOffsets(
            name,
            group,
            self._source,
            self._target,
            recorder,
            self._commits,
            progress,
            StartPoints(self.flow, lambda: self._source, target=lambda: self._target),
        )
        self._starts.on_source_gap, self._starts.metrics = GapPolicy(self.flow.on_source_gap), self.metrics
        plan = TaskPlan(self.flow, self.config.clusters[self.flow.target])
        self._batches = Batches(
            name,
            self._source,
            plan,
            recorder,
            self._commits,
            metrics=self.metrics,
            stop=self.stop,
            status=self.status,
            throttle=self.throttle,
        )
        self._batches.gaps.policy = self._starts.on_source_gap
        self._watch = TopicWatch(self.config, self.flow, self._source, self._target)
        spark = None
        try:
            while not self.stop.is_set():
                mappings = self._refresh()
                if not mappings:
                    if self.until_caught_up:
                        return
                    self.stop.wait(self.flow.refresh_interval)
                    continue
                starts = self._starts.decide(mappings)
                # Only before the run's first query: no task of this run can be sending then
                # (a query stopped for a change of topics may leave sends in flight).
                empty = empty_targets(self._target, mappings) if spark is None else set()
                limit = self._records_per_trigger(mappings, starts)
                spark = spark if spark is not None else session()
                if spark is None or self.stop.is_set():
                    return  # stopped while the session started: no query begun
                changed = self._run_query(spark, mappings, starts, limit, empty)
                if self.until_caught_up or not changed:
                    return
        finally:
            recorder.close()
            store.close()

    def _refresh(self) -> list[TopicMapping]:
        mappings, refused = mirrorable_topics(self.config, self.flow, self._source.topics())
        for m in refused:  # skipped, not fatal, as `mirror run` skips them (engine.target_watch)
            if m.source not in self._told_too_long:
                self._told_too_long.add(m.source)
                log.error("%s", unmirrorable_reason(self.flow.name, m))
        result = ensure_targets(self._source, self._target, mappings, headroom=LIMIT_HEADROOM)
        self._starts.created |= set(result.created)  # their partitions start from the beginning
        self._read_limits(mappings)
        return mappings

    def _read_limits(self, mappings: list[TopicMapping]) -> None:
        """The target topics' max.message.bytes, for the tasks' batch sizes (`TaskPlan.limits`)."""
        assert self._batches is not None
        try:
            self._batches.limits = self._target.max_message_bytes(sorted({m.target for m in mappings}))
        except MirrorError as exc:  # the last known sizes; a refused batch fails the task (retried)
            log.warning("flow %s: cannot read the target topics' max.message.bytes: %s", self.flow.name, exc)

    def _records_per_trigger(self, mappings: list[TopicMapping], starts: Starts) -> int:
        """The query's `maxOffsetsPerTrigger`: the flow's bound, or with `until_caught_up` the
        backlog from `starts` split evenly under it (`mirror.spark.trigger`)."""
        bound = self.max_records_per_batch or self.flow.spark.max_records_per_batch
        if self.flow.max_records_per_second is not None:
            # Capped: a batch of at most 10 s of the cap, so the pause after it (`pace`) is
            # never much longer than that.
            bound = min(bound, max(1, self.flow.max_records_per_second * CAPPED_BATCH_SECONDS))
        if not self.until_caught_up:
            return bound
        parts = [(m.source, p) for m in mappings for p in range(m.partitions)]
        try:
            # The ends a read_committed consumer (Spark's source) reaches.
            records = backlog(starts.offsets, self._source.watermarks(parts, committed_only=True))
        except MirrorError as exc:
            log.debug("flow %s: the source's watermarks are unreadable (%s); batches of the bound", self.flow.name, exc)
            return bound
        limit = available_now_limit(bound, records, len(parts))
        log.debug("flow %s: %d records to catch up; at most %d per micro-batch", self.flow.name, records, limit)
        return limit

    def _run_query(
        self,
        spark: Any,
        mappings: list[TopicMapping],
        starts: Starts,
        limit: int,
        empty: set[Partition] | None = None,
    ) -> bool:
        """Run one query over `mappings` from `starts`, at most `limit` records a batch
        (`empty`: partitions whose target held nothing before it, `Batches.start_query`);
        True when it stopped because the matched topics changed."""
        assert self._batches is not None
        # exactly_once: the tasks write the source topics' ids with the progress.
        self._batches.plan = replace(self._batches.plan, source_ids=dict(self._starts.source_ids))
        reader = self._reader(spark, mappings, starts.offsets, limit)
        # What a task's Python worker takes in at once (`mirror.spark.arrow`); the query's
        # session copies these when it starts.
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(CHUNK))
        spark.conf.set("spark.sql.execution.arrow.maxBytesPerBatch", str(int(self.flow.spark.max_bytes_per_chunk)))
        with ExitStack() as stack:
            location = self._checkpoint_location(stack, mappings, starts)
            self._batches.start_query(mappings, location, empty or ())
            writer = (
                reader.load()
                .writeStream.foreachBatch(self._batches.on_batch)
                .option("checkpointLocation", str(location))
            )
            writer = (
                writer.trigger(availableNow=True)
                if self.until_caught_up
                else writer.trigger(processingTime=f"{max(0.1, self.flow.commit_interval):g} seconds")
            )
            query = writer.queryName(query_name(self.flow.name)).start()
            try:
                # The executors ready their clients while the driver plans the first batch.
                warmup = self._batches.warm_up(spark, mappings)
                if warmup is not None:
                    stack.callback(warmup.close)
                return self._await(query, mappings)
            finally:
                if query.isActive:
                    query.stop()

    def _reader(self, spark: Any, mappings: list[TopicMapping], starting: dict[str, dict[str, int]], limit: int) -> Any:
        """The query's Kafka source: the flow's partitions from `starting`, read_committed, at
        most `limit` records a micro-batch."""
        source = self.config.clusters[self.flow.source]
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", source.bootstrap)
            .option("kafka.isolation.level", "read_committed")
            # Explicit partitions, not `subscribe`: a subscribed query reads a partition added
            # to a source topic as soon as Spark sees it, before its target partition exists
            # (the task fails). Assigned, a grown topic restarts the query (`TopicWatch`)
            # after `_refresh` grew the target, and the new partition starts from the group.
            .option("assign", json.dumps({m.source: list(range(m.partitions)) for m in mappings}))
            .option("startingOffsets", json.dumps(starting))
            .option("includeHeaders", "true")
            # on_source_gap: a gap found at the start is reported by `StartingOffsets`; one
            # that opens while the query runs (retention deleting past its position) fails
            # the query under `stop`, and under `skip` is skipped from the log start.
            .option("failOnDataLoss", "true" if self.flow.on_source_gap == "stop" else "false")
        )
        for k, v in java_kafka_options(self.flow.source, source.client).items():
            reader = reader.option(f"kafka.{k}", v)
        return reader.option("maxOffsetsPerTrigger", str(limit))

    def _checkpoint_location(self, stack: ExitStack, mappings: list[TopicMapping], starts: Starts) -> Path:
        """The query's checkpoint: the flow's, kept only where it resumes where the group says."""
        if self.checkpoint is None:
            return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"mirror-spark-{self.flow.name}-")))
        # The group, not Spark's checkpoint, says where to start: a query resumed from a
        # checkpoint ignores startingOffsets, so a partition started again from the
        # beginning (`StartingOffsets`) needs the checkpoint gone too.
        topics_changed = self._query_topics_changed(mappings)  # always: it records this query's topics
        why = (
            "the flow's topics or their partition counts changed"
            if topics_changed
            else "a partition starts again from the beginning"
            if starts.restarted
            else resume_problem(self.checkpoint, starts.offsets)
        )
        if why:
            if has_batches(self.checkpoint):
                log.warning(
                    "flow %s: not resuming the Spark checkpoint %s: %s; starting from the group's offsets",
                    self.flow.name,
                    self.checkpoint,
                    why,
                )
            shutil.rmtree(self.checkpoint, ignore_errors=True)
        return self.checkpoint

    def _await(self, query: Any, mappings: list[TopicMapping]) -> bool:
        """Wait for the running query; True when it must restart because the matched topics
        changed, False once stopped or caught up."""
        next_refresh = time.monotonic() + self.flow.refresh_interval
        while query.isActive:
            try:
                query.awaitTermination(min(self.flow.refresh_interval, 1.0))
            except Exception as failed:  # pyspark's StreamingQueryException: one line, not a JVM trace
                raise MirrorError(
                    f"flow {self.flow.name}: the Spark query failed: {_first_line(str(failed))}"
                ) from None
            self._commits.commit_progress(query.lastProgress)
            if self.stop.is_set():
                self.status.set(FlowState.STOPPING, "stop requested")
                return False
            if self.until_caught_up or time.monotonic() < next_refresh:
                continue
            next_refresh = time.monotonic() + self.flow.refresh_interval
            self._read_limits(mappings)  # a limit changed meanwhile: the next batch's tasks see it
            if self._watch.changed(mappings, self._starts.source_ids, self._commits.target_ids):
                log.info("flow %s: matched topics or their partitions changed; restarting the query", self.flow.name)
                return True
        exc = query.exception()
        if exc is not None:
            raise MirrorError(f"flow {self.flow.name}: the Spark query failed: {_first_line(str(exc))}")
        self._commits.commit_progress(query.lastProgress)
        # A commit the source refused (its coordinator moving) is made now, or fails the run.
        if not self._commits.settle():
            self.status.set(FlowState.STOPPING, "stop requested")
            return False
        if self.until_caught_up:
            self.status.set(FlowState.CAUGHT_UP, "every matched partition mirrored and committed")
        return False

    def _query_topics_changed(self, mappings: list[TopicMapping]) -> bool:
        assert self.checkpoint is not None
        stamp = self.checkpoint.parent / "topics.json"
        topics = sorted([m.source, m.partitions] for m in mappings)  # a grown topic counts as a change
        before = json.loads(stamp.read_text()) if stamp.exists() else None
        stamp.write_text(json.dumps(topics))
        return before is not None and before != topics


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return text


def run_flow(
    config: Config,
    flow: FlowConfig,
    *,
    master: str | None = None,
    checkpoint: Path | None = None,
    until_caught_up: bool = False,
    max_records_per_batch: int | None = None,
    metrics_port: int | None = None,
    stop: threading.Event | None = None,
    spark: Any = None,
    quiet: bool = True,
    submitted: bool = False,
    ui_port: int | None = UI_PORT,
    conf: Mapping[str, str] | None = None,
    starting: SessionStart | None = None,
) -> SparkFlow:
    """`mirror spark run`'s core: checks, a session (unless given), the query; returns the finished run.
    `submitted`: under spark-submit (`mirror.cli.spark_app`), which set the master and the package.
    `starting`: the session the caller already started (`start_session`, with this run's
    master, conf and UI), let go of at the end like one started here.

    The query's checkpoint is `checkpoint`, else the flow's durable default (`default_checkpoint`)."""
    with ExitStack() as stack:
        if starting is not None:
            stack.callback(starting.close)  # also when a check below refuses the run
        # Held until the session below is stopped: a second driver of the flow is refused.
        location = stack.enter_context(own_checkpoint(checkpoint or default_checkpoint(config, flow), flow))
        metrics = run_metrics = None
        if metrics_port is not None:
            from mirror.metrics import RunMetrics, serve

            run_metrics = RunMetrics.create()
            server = serve(metrics_port, config.metrics.host, run_metrics.registry)
            stack.callback(server.shutdown)
            metrics = run_metrics.listener
        job = SparkFlow(
            config,
            flow,
            master=master,
            checkpoint=location,
            until_caught_up=until_caught_up,
            max_records_per_batch=max_records_per_batch,
            metrics=metrics,
            stop=stop,
        )
        job.check_local()
        if run_metrics is not None:
            watch_throttle(run_metrics.registry, job)
        if starting is None and spark is None:
            # The JVM and the session start beside the clusters' checks and the flow's start.
            starting = start_session(
                job.master, f"mirror-{flow.name}", conf, quiet=quiet, submitted=submitted, ui_port=ui_port
            )
            stack.callback(starting.close)
        get_session: Callable[[], Any] = (
            partial(starting.get, job.stop) if starting is not None else partial(_given, spark)
        )

        def session() -> Any:
            ready = get_session()
            if ready is not None and run_metrics is not None:
                from mirror.spark.progress import listen

                stack.callback(
                    ready.streams.removeListener,
                    listen(ready, flow.name, query_name(flow.name), run_metrics.registry, job.status),
                )
            return ready

        job.check_clusters()
        start_acl_sync(config, flow, stack, run_metrics.acl_sync if run_metrics else None)  # the driver runs it
        job.run(session)
        return job


def _given(spark: Any) -> Any:
    return spark


def watch_throttle(registry: Any, job: SparkFlow) -> None:
    """The flow's read cap and the time the driver held batches back for it, served at scrape
    time beside the driver's other metrics (as `mirror run` serves its workers')."""
    from mirror.metrics import ThrottleCollector

    t = job.throttle
    ThrottleCollector(lambda: {job.flow.name: (t.max_bytes, t.max_records, t.throttled_seconds())}, registry)
