"""`mirror spark run`: one flow mirrored by a Spark Structured Streaming query (driver side).

    Kafka source (read_committed, headers)            per batch, on the driver
    ──▶ foreachBatch: one task per source partition ──▶ offset-map rows stored ──▶ group commit
        (mirror.spark.task: produce, flush)              (OffsetMapRecorder)       (explicit offsets)

The flow's consumer group on the source is the source of truth, whichever engine ran the
flow: a query starts from the group's committed offsets (`startingOffsets`), and every batch
ends with the offset-map rows stored and then the group committed (invariant 1), so `mirror
lag`, checkpoints, failover and a later `mirror run` work unchanged. Spark's own checkpoint
only says which batch was planned last; a batch replayed from it adds no duplicates (see
`mirror.spark.task`).

Spark's Kafka *sink* is not used: it cannot set the record timestamp and discards the
produced records' offsets, so it could keep neither CreateTime nor the offset map.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mirror.config import Config, FlowConfig
from mirror.domain.acks import AckBatch
from mirror.domain.topics import TopicMapping, match_topics
from mirror.engine.targets import LIMIT_HEADROOM, ensure_targets
from mirror.errors import MirrorError, OffsetStoreError, UnsafeOperation, UsageError
from mirror.kafka import OFFSET_END, Admin
from mirror.run.recorder import OffsetMapRecorder
from mirror.run.supervisor import restart_delay
from mirror.spark.arrow import COLUMNS, RESULT_SCHEMA, mirror_arrow, results_of
from mirror.spark.checkpoint import default_checkpoint, resume_problem
from mirror.spark.clients import REDACT, java_kafka_options
from mirror.spark.exactly_once import read_starts, reset_progress, with_progress
from mirror.spark.task import CHUNK, TaskPlan, TaskResult
from mirror.store import open_store

log = logging.getLogger(__name__)

CACHE = Path(os.environ.get("MIRROR_CACHE", Path.home() / ".cache" / "mirror"))
MARKER = "mirror-flow.json"  # in a --checkpoint directory: which flow it belongs to
TARGET_TOPIC_ID = "target-topic-id="  # group commit metadata, the same tag `mirror run` writes (engine.assignment.TID)
STORE_BACKOFF, STORE_BACKOFF_MAX = 1.0, 30.0  # offset-store retries: doubling waits, at most this long


def connector_jars(version: str) -> list[str]:
    """The Kafka connector jars `make setup` fetched for this pyspark version."""
    folder = CACHE / f"spark-{version}" / "jars"
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not any(f"spark-sql-kafka-0-10_2.13-{version}.jar" in j for j in jars):
        raise MirrorError(
            f"no Spark Kafka connector for pyspark {version} in {folder}",
            hint="pyspark and deps/spark/pom.xml must name the same version; run `make setup`",
        )
    return jars


def check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise MirrorError(
            "no Java found (JAVA_HOME unset and no `java` on PATH)", hint="Spark needs a Java 17 or 21 runtime"
        )


def check_master(master: str, timeout: float = 5.0) -> None:
    """A standalone master that does not accept connections fails here, not after Spark's minute of retries."""
    if not master.startswith("spark://"):
        return
    for hostport in master[len("spark://") :].split(","):
        u = urlparse(f"//{hostport}")
        try:
            with socket.create_connection((u.hostname or "", u.port or 7077), timeout=timeout):
                return
        except OSError:
            continue
    raise MirrorError(
        f"Spark master {master} does not answer", hint="check --master and that the master runs (mirror dev up --spark)"
    )


def claim_checkpoint(directory: Path, flow: FlowConfig) -> Path:
    """A --checkpoint directory belongs to one flow; another flow's is refused (exit 2)."""
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / MARKER
    mine = {"flow": flow.name, "source": flow.source, "group": flow.group_id}
    if marker.exists():
        try:
            theirs = json.loads(marker.read_text())
        except (OSError, ValueError):
            theirs = None
        if theirs != mine:
            raise UsageError(
                f"--checkpoint {directory} belongs to {theirs!r}, not flow {flow.name!r}",
                hint="give each flow its own checkpoint directory (--checkpoint, or spark.checkpoint_dir in "
                "the config)",
            )
    else:
        marker.write_text(json.dumps(mine))
    return directory / "query"


class SparkFlow:
    """Runs one flow's streaming query until caught up or stopped."""

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
    ) -> None:
        self.config = config
        self.flow = flow
        self.master = master or "local[*]"
        self.checkpoint = checkpoint
        self.until_caught_up = until_caught_up
        self.max_records_per_batch = max_records_per_batch
        self.metrics = metrics
        self.stop = stop or threading.Event()
        self._lock = threading.Lock()
        self._committed: dict[tuple[str, int], int] = {}
        self._mappings: list[TopicMapping] = []
        self._created: set[str] = set()  # target topics this run created, not yet started from the beginning
        self._target_ids: dict[str, str] = {}
        self._source_ids: dict[str, str] = {}  # source topic -> id, as the last query started
        self._limits: dict[str, int] = {}  # target topic -> max.message.bytes
        self._restarted = False  # partitions with a commit start again from the beginning
        self._settled: set[tuple[str, int]] = (
            set()
        )  # partitions with a batch completed in this query (`TaskPlan.settled`)
        self.store_backoff = STORE_BACKOFF  # first wait after an offset-store failure
        self.records = 0
        self.skipped = 0

    # ------------------------------------------------------------------ checks

    def preflight(self) -> None:
        """Everything that must hold before Spark starts; nothing is produced before it."""
        check_java()
        check_master(self.master)
        java_kafka_options(
            self.flow.source, self.config.clusters[self.flow.source].client
        )  # a setting Spark's source cannot take: refused now
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

    def run(self, spark: Any) -> None:
        self._store = open_store(self.config.offset_store)
        self._recorder = OffsetMapRecorder(self._store, self.flow.name, registry=None)
        self._plan = TaskPlan(self.flow, self.config.clusters[self.flow.target])
        try:
            while not self.stop.is_set():
                mappings = self._refresh()
                if not mappings:
                    if self.until_caught_up:
                        return
                    self.stop.wait(self.flow.refresh_interval)
                    continue
                changed = self._run_query(spark, mappings)
                if self.until_caught_up or not changed:
                    return
        finally:
            self._recorder.close()
            self._store.close()

    def _refresh(self) -> list[TopicMapping]:
        mappings = match_topics(self.config, self.flow, self._source.topics())
        result = ensure_targets(self._source, self._target, mappings, headroom=LIMIT_HEADROOM)
        self._created |= set(result.created)  # their partitions start from the beginning
        self._read_limits(mappings)
        return mappings

    def _read_limits(self, mappings: list[TopicMapping]) -> None:
        """The target topics' max.message.bytes, for the tasks' batch sizes (`TaskPlan.limits`)."""
        try:
            self._limits = self._target.max_message_bytes(sorted({m.target for m in mappings}))
        except MirrorError as exc:  # the last known sizes; a refused batch fails the task (retried)
            log.warning("flow %s: cannot read the target topics' max.message.bytes: %s", self.flow.name, exc)

    def _starting_offsets(self, mappings: list[TopicMapping]) -> dict[str, dict[str, int]]:
        """Each source partition's start: the group's committed offset, except (from the
        beginning) where there is none, where it is outside the source log (`starting_offset`),
        and where the target topic is new: created by this run, or created again since the
        commit (its id differs from the one the commit is tagged with), as `mirror run` does."""
        committed = self._source.group_offsets_with_metadata(self.flow.group_id)
        if self.flow.exactly_once:  # the target's committed progress says where the copy resumes
            committed = with_progress(committed, read_starts(self.flow, self._plan.target, mappings), mappings)
        self._target_ids = self._target.topic_ids(sorted({m.target for m in mappings}))
        # A source topic deleted and created again since an earlier query of this run (Spark's
        # source does not notice: it skips the new records below the old position): its
        # offsets start again, so the group's commit and the rows are an old incarnation's.
        source_ids = self._source.topic_ids(sorted({m.source for m in mappings}))
        recreated = {t for t, i in source_ids.items() if self._source_ids.get(t, i) != i}
        self._source_ids.update(
            source_ids
        )  # a topic deleted meanwhile keeps its old id: recreated later, it is noticed
        parts = [(m.source, p) for m in mappings for p in range(m.partitions)]
        marks = self._source.watermarks([tp for tp in parts if tp in committed], committed_only=False)
        out: dict[str, dict[str, int]] = {}
        reset: list[tuple[str, int]] = []
        stale: dict[tuple[str, int], int] = {}  # target partitions to empty
        self._restarted = False
        for m in mappings:
            out[m.source] = {}
            tid = self._target_ids.get(m.target)
            for p in range(m.partitions):
                offset, meta = committed.get((m.source, p), (None, None))
                if m.source in recreated:
                    log.warning(
                        "flow %s: %s[%d]: source topic %s was deleted and created again; mirroring it "
                        "from the earliest offset",
                        self.flow.name,
                        m.source,
                        p,
                        m.source,
                    )
                    out[m.source][str(p)] = -2
                    reset.append((m.source, p))
                    continue
                if new_target(m.target in self._created, meta, tid):
                    log.warning(
                        "flow %s: %s[%d]: target topic %s is new (%s); mirroring from the earliest offset",
                        self.flow.name,
                        m.source,
                        p,
                        m.target,
                        "created by this run"
                        if m.target in self._created
                        else f"the group's offset was committed into an earlier {m.target}",
                    )
                    out[m.source][str(p)] = -2
                    reset.append((m.source, p))
                    if m.target not in self._created:
                        # Nobody committed into the new topic: what it holds are copies that
                        # would come ahead of (or twice with) the ones mirrored now.
                        stale[(m.target, p)] = OFFSET_END
                    continue
                w = marks.get((m.source, p))
                start, why = starting_offset(offset, w.low if w else None, w.high if w else None)
                if why:
                    log.warning(
                        "flow %s: %s[%d]: %s; mirroring from the earliest offset", self.flow.name, m.source, p, why
                    )
                out[m.source][str(p)] = start
                if start >= 0:
                    self._committed[(m.source, p)] = start
                else:
                    # From the beginning: what an earlier query of this run committed (an old
                    # incarnation's offsets) must not hold this query's commits back.
                    self._committed.pop((m.source, p), None)
                    if offset is not None:
                        self._restarted = True
        if stale:
            try:
                self._target.delete_records(stale)
            except MirrorError as exc:
                log.warning("flow %s: could not empty the recreated target partitions: %s", self.flow.name, exc)
        if reset:
            self._restarted = True
            # Rows of an earlier incarnation of the target would mistranslate; and the group is
            # rewound first, so a crash before the first commit cannot resume past records the
            # new topic never received.
            self._recorder.on_reset(self.flow.name, reset)
            self._recorder.flush()
            if self.flow.exactly_once:
                reset_progress(self._target, self.flow, mappings, reset)
            self._source.alter_group_offsets(self.flow.group_id, dict.fromkeys(reset, 0), metadata=self._tags(reset))
            for tp in reset:
                self._committed[tp] = 0
        self._created -= {m.target for m in mappings}
        return out

    def _tags(self, partitions: Any) -> dict[tuple[str, int], str]:
        """Commit metadata naming the id of each partition's target topic (see `new_target`)."""
        target = {m.source: m.target for m in self._mappings}
        missing = sorted({t for t in target.values() if t not in self._target_ids})
        if missing:  # a topic created a moment ago may not be describable yet
            try:
                self._target_ids.update(self._target.topic_ids(missing))
            except MirrorError as exc:
                log.debug("flow %s: target topic ids: %s", self.flow.name, exc)
        return {
            tp: f"{TARGET_TOPIC_ID}{self._target_ids[target[tp[0]]]}"
            for tp in partitions
            if self._target_ids.get(target.get(tp[0], ""))
        }

    def _run_query(self, spark: Any, mappings: list[TopicMapping]) -> bool:
        """Run one query over `mappings`; True when it stopped because the matched topics changed."""
        self._mappings = mappings
        self._settled = set()  # a new query starts at the group's offsets: the target may be ahead
        source = self.config.clusters[self.flow.source]
        starting = self._starting_offsets(mappings)
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", source.bootstrap)
            .option("kafka.isolation.level", "read_committed")
            # Explicit partitions, not `subscribe`: a subscribed query reads a partition added
            # to a source topic as soon as Spark sees it, before its target partition exists
            # (the task fails). Assigned, a grown topic restarts the query (`_topics_changed`)
            # after `_refresh` grew the target, and the new partition starts from the group.
            .option("assign", json.dumps({m.source: list(range(m.partitions)) for m in mappings}))
            .option("startingOffsets", json.dumps(starting))
            .option("includeHeaders", "true")
            # Like `mirror run` (auto.offset.reset=earliest): a committed offset that retention
            # deleted resumes at the log start instead of stopping the flow.
            .option("failOnDataLoss", "false")
        )
        for k, v in java_kafka_options(self.flow.source, source.client).items():
            reader = reader.option(f"kafka.{k}", v)
        reader = reader.option(
            "maxOffsetsPerTrigger", str(self.max_records_per_batch or self.flow.spark.max_records_per_batch)
        )
        # What a task's Python worker takes in at once (`mirror.spark.arrow`); the query's
        # session copies these when it starts.
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(CHUNK))
        spark.conf.set("spark.sql.execution.arrow.maxBytesPerBatch", str(int(self.flow.spark.max_bytes_per_chunk)))
        with ExitStack() as stack:
            if self.checkpoint is not None:
                location = str(self.checkpoint)
                # The group, not Spark's checkpoint, says where to start: a query resumed from a
                # checkpoint ignores startingOffsets, so a partition started again from the
                # beginning (`_starting_offsets`) needs the checkpoint gone too.
                if self._query_topics_changed(mappings) or self._restarted:
                    shutil.rmtree(location, ignore_errors=True)
                elif why := resume_problem(self.checkpoint, starting):
                    log.info(
                        "flow %s: not resuming the Spark checkpoint %s: %s; starting from the group's offsets",
                        self.flow.name,
                        location,
                        why,
                    )
                    shutil.rmtree(location, ignore_errors=True)
            else:
                location = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"mirror-spark-{self.flow.name}-"))
            writer = reader.load().writeStream.foreachBatch(self._on_batch).option("checkpointLocation", location)
            writer = (
                writer.trigger(availableNow=True)
                if self.until_caught_up
                else writer.trigger(processingTime=f"{max(0.1, self.flow.commit_interval):g} seconds")
            )
            query = writer.queryName(f"mirror-{self.flow.name}").start()
            try:
                next_refresh = time.monotonic() + self.flow.refresh_interval
                while query.isActive:
                    try:
                        query.awaitTermination(min(self.flow.refresh_interval, 1.0))
                    except Exception as failed:  # pyspark's StreamingQueryException: one line, not a JVM trace
                        raise MirrorError(
                            f"flow {self.flow.name}: the Spark query failed: {_first_line(str(failed))}"
                        ) from None
                    self._commit_progress(query)
                    if self.stop.is_set():
                        return False
                    if self.until_caught_up or time.monotonic() < next_refresh:
                        continue
                    next_refresh = time.monotonic() + self.flow.refresh_interval
                    self._read_limits(mappings)  # a limit changed meanwhile: the next batch's tasks see it
                    if (
                        self._topics_changed(mappings)
                        or self._targets_recreated(mappings)
                        or self._sources_recreated(mappings)
                    ):
                        log.info(
                            "flow %s: matched topics or their partitions changed; restarting the query", self.flow.name
                        )
                        return True
                exc = query.exception()
                if exc is not None:
                    raise MirrorError(f"flow {self.flow.name}: the Spark query failed: {_first_line(str(exc))}")
                self._commit_progress(query)
                return False
            finally:
                if query.isActive:
                    query.stop()

    def _query_topics_changed(self, mappings: list[TopicMapping]) -> bool:
        assert self.checkpoint is not None
        stamp = self.checkpoint.parent / "topics.json"
        topics = sorted([m.source, m.partitions] for m in mappings)  # a grown topic counts as a change
        before = json.loads(stamp.read_text()) if stamp.exists() else None
        stamp.write_text(json.dumps(topics))
        return before is not None and before != topics

    def _topics_changed(self, mappings: list[TopicMapping]) -> bool:
        try:
            now = match_topics(self.config, self.flow, self._source.topics())
        except MirrorError as exc:
            log.warning("flow %s: topic refresh failed: %s", self.flow.name, exc)
            return False
        return [(m.source, m.partitions) for m in now] != [(m.source, m.partitions) for m in mappings]

    def _sources_recreated(self, mappings: list[TopicMapping]) -> bool:
        """A source topic was deleted and created again (a new id) while the query ran:
        restarted, the query mirrors its partitions from the beginning (`_starting_offsets`).
        A deleted one is `_topics_changed`'s."""
        return self._ids_changed(
            "source",
            self._source,
            {m.source: self._source_ids[m.source] for m in mappings if m.source in self._source_ids},
            deleted_too=False,
        )

    def _targets_recreated(self, mappings: list[TopicMapping]) -> bool:
        """A target topic was deleted, or deleted and created again (a new id), while the query
        ran: restarted, the query starts its partitions from the beginning (`new_target`)."""
        return self._ids_changed(
            "target",
            self._target,
            {m.target: self._target_ids[m.target] for m in mappings if m.target in self._target_ids},
            deleted_too=True,
        )

    def _ids_changed(self, side: str, admin: Any, known: dict[str, str], *, deleted_too: bool) -> bool:
        if not known:
            return False
        try:
            now = admin.topic_ids(sorted(known))
        except MirrorError as exc:
            log.warning("flow %s: %s topic refresh failed: %s", self.flow.name, side, exc)
            return False
        changed = sorted(t for t, i in known.items() if now.get(t) != i and (deleted_too or t in now))
        if changed:
            log.warning(
                "flow %s: %s topics %s were deleted%s created again",
                self.flow.name,
                side,
                ", ".join(changed),
                " or" if deleted_too else " and",
            )
        return bool(changed)

    # ------------------------------------------------------------------ per batch

    def _on_batch(self, df: Any, batch_id: int) -> None:
        """Mirror one micro-batch: tasks produce, then rows are stored, then the group commits."""
        # The source ends now (after the batch was planned): a target copy naming an offset at
        # or past them is not of this topic's records (a recreated topic); see `replay_check`.
        t0 = time.monotonic()
        ends = self._source.end_offsets([(m.source, p) for m in self._mappings for p in range(m.partitions)])
        plan = replace(self._plan, source_ends=ends, limits=self._limits, settled=frozenset(self._settled))
        t1 = time.monotonic()
        results = results_of(df.selectExpr(*COLUMNS).mapInArrow(partial(mirror_arrow, plan), RESULT_SCHEMA).collect())
        t2 = time.monotonic()
        self._finish_batch(batch_id, results)
        # Their next batch starts where this one ended, and the target holds nothing past it.
        self._settled.update((r.topic, r.partition) for r in results)
        log.debug(
            "flow %s: batch %d: %d tasks, %d records; tasks %.0f ms, driver %.0f ms (source ends %.0f "
            "ms, rows stored and committed %.0f ms)",
            self.flow.name,
            batch_id,
            len(results),
            sum(r.produced for r in results),
            (t2 - t1) * 1000,
            (time.monotonic() - t2 + t1 - t0) * 1000,
            (t1 - t0) * 1000,
            (time.monotonic() - t2) * 1000,
        )

    def _finish_batch(self, batch_id: int, results: list[TaskResult]) -> None:
        """The driver's part of a batch once the tasks produced it: rows stored, then the commit."""
        batches = [
            AckBatch(
                self.flow.name,
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
            if r.warning:
                log.warning("flow %s: batch %d: %s", self.flow.name, batch_id, r.warning)
        self._recorder.on_acked(batches)
        if self.metrics is not None:
            self.metrics.on_acked(
                [
                    AckBatch(
                        b.flow,
                        b.source_topic,
                        b.partition,
                        b.target_topic,
                        b.first_offset,
                        b.next_offset,
                        count=r.produced,
                        bytes=r.bytes,
                        max_timestamp_ms=b.max_timestamp_ms,
                    )
                    for b, r in zip(batches, results)
                ]
            )
        self._store_rows(batch_id)  # invariant 1: rows durable before the group moves past them
        self.records += sum(r.produced for r in results)
        self.skipped += sum(r.skipped for r in results)
        if any(r.skipped for r in results):
            log.warning(
                "flow %s: batch %d: %d records were already on the target (a replayed batch); not produced again",
                self.flow.name,
                batch_id,
                sum(r.skipped for r in results),
            )
        self._commit({(r.topic, r.partition): r.next_offset for r in results})

    def _store_rows(self, batch_id: int) -> None:
        """Flush the recorder, retrying with backoff while the store fails (as `mirror run`
        holds commits back and carries on): the batch, and so the query, waits for the
        store instead of failing. The recorder keeps the rows and logs the outage and the
        recovery once each. A stop while the store still fails raises: no commit."""
        failures = 0
        while True:
            try:
                self._recorder.flush()
                return
            except OffsetStoreError:
                failures += 1
                if self.stop.is_set():
                    raise
                delay = restart_delay(failures, base=self.store_backoff, cap=STORE_BACKOFF_MAX)
                log.debug(
                    "flow %s: batch %d: offset store failure %d, retrying in %.1fs",
                    self.flow.name,
                    batch_id,
                    failures,
                    delay,
                )
                self.stop.wait(delay)  # a stop meanwhile: one last attempt, then raise above

    def _commit_progress(self, query: Any) -> None:
        """Commit the end offsets of the last completed batch.

        A batch's records may end before its offset range does (transaction markers, aborted
        records): the tasks only see records, so the range end comes from the query's
        progress, once the batch (rows stored included) is complete.
        """
        progress = query.lastProgress
        if not progress:
            return
        ends: dict[tuple[str, int], int] = {}
        for src in progress.get("sources", []):
            raw = src.get("endOffset")
            end = json.loads(raw) if isinstance(raw, str) else raw
            for topic, parts in (end or {}).items():
                for p, offset in parts.items():
                    ends[(topic, int(p))] = int(offset)
        self._commit(ends)

    def _commit(self, positions: Mapping[tuple[str, int], int]) -> None:
        with self._lock:
            ahead = {tp: o for tp, o in positions.items() if o > self._committed.get(tp, -1)}
            if not ahead:
                return
            self._source.alter_group_offsets(self.flow.group_id, ahead, metadata=self._tags(ahead))
            self._committed.update(ahead)


def new_target(created: bool, metadata: str | None, topic_id: str | None) -> bool:
    """Whether a source partition must be mirrored from the beginning into its target topic:
    the run created that topic, or the group's commit is tagged with another topic id (the
    target was deleted and created again since; an untagged commit is trusted)."""
    if created:
        return True
    if not metadata or not metadata.startswith(TARGET_TOPIC_ID) or topic_id is None:
        return False
    return metadata[len(TARGET_TOPIC_ID) :] != topic_id


def starting_offset(committed: int | None, low: int | None, high: int | None) -> tuple[int, str | None]:
    """Where a query starts a source partition: the group's committed offset, or -2 (Spark's
    "earliest") with the reason when there is none or it is outside the log [low, high].

    Like `mirror run` (librdkafka's auto.offset.reset=earliest). Spark's own source would
    not: with failOnDataLoss=false it starts an offset past the end (the topic was deleted
    and created again) at *latest*, silently skipping every record written meanwhile.
    """
    if committed is None or committed < 0:
        return -2, None  # never committed: from the beginning, nothing to report
    if low is None or high is None:
        return committed, None
    if committed > high:
        return -2, f"the group's committed offset {committed} is past the log end {high} (was the topic recreated?)"
    if committed < low:
        return -2, f"the group's committed offset {committed} is before the log start {low} (deleted by retention)"
    return committed, None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return text


TASK_ATTEMPTS = 4  # Spark's spark.task.maxFailures default on a cluster


def with_task_retries(master: str, attempts: int = TASK_ATTEMPTS) -> str:
    """`local` / `local[N]` / `local[*]` as `local[N,attempts]`: local mode gives a task one
    attempt whatever spark.task.maxFailures says, so one transient failure (a leader moving,
    a slow flush) would end the run where a cluster retries. Retries are safe: a retried task
    skips what the target already holds (`mirror.spark.task`). Other masters as given."""
    if master == "local":
        return f"local[1,{attempts}]"
    if master.startswith("local[") and master.endswith("]") and "," not in master:
        return f"{master[:-1]},{attempts}]"
    return master


UI_PORT = 4040  # Spark's own default; a busy port makes Spark try the next ones (spark.port.maxRetries)


def spark_session(
    master: str,
    app: str,
    conf: Mapping[str, str] | None = None,
    *,
    quiet: bool = True,
    submitted: bool = False,
    ui_port: int | None = UI_PORT,
) -> Any:
    """A SparkSession with the Kafka connector from the cache; executors run this Python.

    `submitted`: spark-submit started this driver and its command line already says the
    master, the jars and the executors' Python (`mirror.spark.submit`); none is set here,
    so the executors keep the package they were given instead of this interpreter's path.

    The Spark UI is on (`ui_port`; None turns it off): the jobs, stages, executors and the
    Structured Streaming tab are where a Spark engineer looks first. It listens where the
    driver binds (loopback for a local master or cluster).
    """
    import pyspark
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app)
        .config("spark.task.maxFailures", str(TASK_ATTEMPTS))
        .config("spark.redaction.regex", REDACT)  # the JAAS line and a client key never in a log or plan
        .config("spark.ui.enabled", "false" if ui_port is None else "true")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
    )
    if not submitted:
        builder = _direct(builder, master, connector_jars(pyspark.__version__))
    if ui_port is not None:
        builder = builder.config("spark.ui.port", str(ui_port))
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    # A speculative copy of a task would produce the same records alongside the original:
    # duplicates, and each one's contiguity check failing on the other's records.
    builder = builder.config("spark.speculation", "false")
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _direct(builder: Any, master: str, jars: list[str]) -> Any:
    """What spark-submit would otherwise say: the master, the jars and the executors' Python."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        builder.master(with_task_retries(master))
        .config("spark.jars", ",".join(jars))
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    )
    host = (
        urlparse(master.replace("spark://", "//").split(",")[0]).hostname
        if master.startswith("spark://")
        else "127.0.0.1"
    )
    if host in ("127.0.0.1", "localhost"):
        # Local mode, or a cluster on this host: the driver listens on loopback only (the
        # host name may resolve to an address nothing routes to).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    return builder


def submitted_master() -> str:
    """The master spark-submit was given, read from its JVM before any SparkContext connects."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # joins spark-submit's gateway (PYSPARK_GATEWAY_PORT)
    return str(SparkConf().get("spark.master", "local[*]"))


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
) -> SparkFlow:
    """`mirror spark run`'s core: checks, a session (unless given), the query; returns the finished run.
    `submitted`: under spark-submit (`mirror.cli.spark_app`), which set the master and the package.

    The query's checkpoint is `checkpoint`, else the flow's durable default (`default_checkpoint`)."""
    location = claim_checkpoint(checkpoint or default_checkpoint(config, flow), flow)
    with ExitStack() as stack:
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
        job.preflight()
        if spark is None:
            spark = spark_session(
                job.master, f"mirror-{flow.name}", conf, quiet=quiet, submitted=submitted, ui_port=ui_port
            )
            stack.callback(spark.stop)
        if run_metrics is not None:
            from mirror.spark.progress import listen

            stack.callback(
                spark.streams.removeListener, listen(spark, flow.name, f"mirror-{flow.name}", run_metrics.registry)
            )
        job.run(spark)
        return job
