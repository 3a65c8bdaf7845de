"""The JVM writer: a batch's records produced by Java producers on the executors (driver side).

`mirror.spark.task` moves every record from the JVM into a Python worker and back out through
librdkafka; the JVM writer (jvm/writer, `io.mirror.spark.MirrorWriter`, called through py4j)
copies them on the executors. Spark's Kafka source plans each batch (and logs and
checkpoints its offsets); the writer takes the batch's offset ranges from the running
query's execution of it and its tasks read them with their own cached Java consumers, built
from the source's executor parameters (security, read_committed, failOnDataLoss as Spark's
reader would use them), so a fetched record goes to the producer as it is, with no row in
between. It does what the Python tasks do for a batch that needs no skipping, and nothing
else: same route, partition, key, value, headers, CreateTime and provenance header, an
idempotent producer closed at its first error (gapless), and per task the offset map's
(source -> target) pairs from the acknowledged offsets. Where it cannot find the ranges
(not expected: a Spark whose plan differs) the batch goes to the Python tasks, said at INFO.

The skip-what-the-target-holds rule stays with the Python tasks: a JVM task declines its slice
wherever the target may hold part of it (a retried attempt, or a partition the plan does not
call settled, `TaskPlan.settled`, whose target's last record is not an earlier copy of that
partition: a settled one, whose earlier batch in the query completed or whose target was empty
before the run's first query, is produced without reading the tail), and fails it on any
produce error. The job still ends with every JVM task's sends finished, and the driver then
runs those partitions (only: the others are acknowledged whole) on the Python path, none of
them settled: each task reads the target's tail and skips only what it proves is there. A job
that failed fails the batch, as the Python tasks' job does (its killed tasks may still be sending).

Used only where it can do what the Python tasks do: not with `exactly_once`, not without the
class on the driver's classpath (a package built without it), and only for settings it can
translate to the Java client's names (anything else: the Python path, said once at INFO).
Pure but for `JvmWriter.write` (py4j), so the plan and the results are tested without Spark.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import reduce
from typing import Any

from mirror.errors import ConfigError
from mirror.kafka.settings import BATCH_SIZE, PRODUCER_DEFAULTS, batch_size_for
from mirror.spark.clients import java_kafka_options
from mirror.spark.gaps import without_deleted  # deleted records: reported as gaps (`BatchGaps`)
from mirror.spark.task import FLUSH_TIMEOUT, TaskPlan, TaskResult

log = logging.getLogger(__name__)

WRITER_CLASS = "io.mirror.spark.MirrorWriter"

INFINITE_MS = 2**31 - 1  # the Java client's largest delivery.timeout.ms
JAVA_REQUEST_TIMEOUT_MS = 30_000  # the Java producer's default request.timeout.ms
# librdkafka producer settings the Java client takes under the same name and meaning.
_SAME = {"acks", "compression.type", "client.id", "request.timeout.ms", "retry.backoff.ms"}
# librdkafka settings with no Java counterpart that the writer keeps true in its own way.
_KEPT = {
    # The broker's sequence check and the producer closed at the first error (`_WRITER_FIXED`).
    "enable.gapless.guarantee",
    # The Java producer's queue is bounded by bytes (buffer.memory), not by a record count.
    "queue.buffering.max.messages",
    # Off in the writer whatever is given: its producers' metadata requests never allow
    # auto-creation (Producers.java; the Java producer has no such setting) and its tail
    # reader sets the consumer's own; target topics are created by the driver (`ensure_targets`).
    "allow.auto.create.topics",
}
# Fixed for the writer: idempotence (the Java client's default of 5 requests in flight keeps
# order), so the broker refuses a failed batch's successors (out of sequence), and the
# producer is closed from the first error's callback (`Acks.java`), before it could send them
# again re-sequenced: what landed is a prefix of the slice (librdkafka's gapless guarantee).
_WRITER_FIXED = {"enable.idempotence": "true"}


class Untranslatable(ValueError):
    """A setting the Java client cannot be given faithfully: the batch goes the Python way."""


def java_producer_settings(settings: Mapping[str, Any]) -> dict[str, str]:
    """The Java producer settings for the librdkafka ones the Python tasks use (without
    batch.size, which is per target topic). Raises `Untranslatable` naming a key it cannot map."""
    out: dict[str, str] = dict(_WRITER_FIXED)
    linger = 0
    for key, value in settings.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if key == "enable.idempotence":
            continue  # always on (`_WRITER_FIXED`)
        if key in _SAME:
            out[key] = text
        elif key in ("linger.ms", "queue.buffering.max.ms"):
            linger = int(float(value))
            out["linger.ms"] = str(linger)
        elif key == "compression.codec":
            out["compression.type"] = text
        elif key == "message.timeout.ms":
            out["delivery.timeout.ms"] = str(INFINITE_MS if int(value) == 0 else int(value))
        elif key == "queue.buffering.max.kbytes":
            out["buffer.memory"] = str(int(value) * 1024)
        elif key == "message.max.bytes":
            out["max.request.size"] = str(int(value))
        elif key == "topic.metadata.propagation.max.ms":
            out["max.block.ms"] = str(int(value))  # how long send() waits for a new topic's metadata
        elif key == "batch.size" or key in _KEPT:
            continue
        else:
            raise Untranslatable(key)
    timeout = int(out.get("delivery.timeout.ms", 120_000))
    if timeout < linger + int(out.get("request.timeout.ms", JAVA_REQUEST_TIMEOUT_MS)):
        raise Untranslatable("message.timeout.ms")  # the Java client refuses it below linger + request timeout
    return out


def cluster_settings(name: str, bootstrap: str, client: Mapping[str, Any]) -> dict[str, str]:
    """Bootstrap and security for the Java client; other librdkafka client keys are refused."""
    for key in client:
        if not key.startswith(("security.", "sasl.", "ssl.")):
            raise Untranslatable(f"clusters.{name}.client.{key}")
    try:
        return {"bootstrap.servers": bootstrap, **java_kafka_options(name, client)}
    except ConfigError as exc:
        raise Untranslatable(exc.key or str(exc)) from None


@dataclass(frozen=True)
class WriterSettings:
    """What every batch's plan shares: the Java producer's and tail reader's settings."""

    producer: dict[str, str]
    consumer: dict[str, str]
    batch_size: int


def writer_settings(plan: TaskPlan) -> WriterSettings:
    """The Java settings for `plan`'s flow; raises `Untranslatable` (or says why not, as a
    ValueError) when the JVM writer cannot mirror it as the Python tasks would."""
    if plan.flow.exactly_once:
        raise Untranslatable("exactly_once (the transactional writer is Python's)")
    if not plan.flow.provenance_headers:
        # Nothing on the target can be skipped then, and a JVM task's failure is not its own
        # (one producer per executor, closed at any task's first error): the partitions it
        # leaves would be produced twice. A Python task's retry duplicates only its own slice.
        raise Untranslatable("provenance_headers: false (the Python tasks fail one partition at a time)")
    target = cluster_settings(plan.flow.target, plan.target.bootstrap, plan.target.client)
    settings = plan.producer_settings
    if "queue.buffering.max.kbytes" not in plan.flow.producer:
        # The Python tasks' small queue bounds each Python worker's memory; the writer's
        # producer is one per executor, shared by its running tasks, and a 1 MiB batch takes
        # 1 MiB of it however little it holds: `mirror run`'s queue, so send() does not wait
        # for buffers (bench/README.md, "Records/s: the tail micro-batch and the queue").
        settings = {**settings, "queue.buffering.max.kbytes": PRODUCER_DEFAULTS["queue.buffering.max.kbytes"]}
    producer = {**target, **java_producer_settings(settings)}
    return WriterSettings(producer, dict(target), int(settings.get("batch.size", BATCH_SIZE)))


def query_name(flow: str) -> str:
    """The name of `flow`'s streaming query: the JVM writer finds a batch's offset ranges in the
    running query of that name (`MirrorWriter.write`)."""
    return f"mirror-{flow}"


def batch_plan(
    plan: TaskPlan, settings: WriterSettings, topics: Iterable[str], settled: Iterable[tuple[str, int]]
) -> str:
    """One batch's plan for `MirrorWriter.write`, as JSON: routes and provenance per source
    topic (as `mirror.domain.route.route` makes them), batch sizes per target topic (as
    `TaskPlan.producer_settings_for`), and the partitions settled in this query."""
    from mirror.domain.naming import target_topic

    flow = plan.flow
    targets = {t: target_topic(t, flow.source, flow.rename) for t in sorted(set(topics))}
    return json.dumps(
        {
            "flow": flow.name,
            "query": query_name(flow.name),
            "producer": settings.producer,
            "consumer": {**settings.consumer, "client.id": f"mirror-spark-{flow.name}-tail"},
            "targets": targets,
            # Route.origin is "cluster/topic/partition/": the writer appends "partition/offset".
            "origins": {t: f"{flow.source}/{t}/" for t in targets},  # provenance on (`writer_settings`)
            "batch_size": settings.batch_size,
            "batch_sizes": {
                target: batch_size_for(settings.batch_size, plan.limits.get(target)) for target in targets.values()
            },
            "settled": sorted([t, p] for t, p in settled),
            "ack_timeout_ms": int(FLUSH_TIMEOUT * 1000),
        }
    )


def results_of(tasks: Iterable[Mapping[str, Any]]) -> tuple[list[TaskResult], list[str]]:
    """The writer's answer as `TaskResult`s, and why any task declined or failed (then the
    results are not used: the batch goes the Python way). A task that produced nothing
    answers only when it has a warning (`warnings_of`): no result."""
    results: list[TaskResult] = []
    problems: list[str] = []
    for row in tasks:
        where = f"{row['topic']}[{row['partition']}]"
        if "declined" in row:
            problems.append(f"{where} declined: {row['declined']}")
        elif "failed" in row:
            problems.append(f"{where} failed: {row['failed']}")
        elif "next" in row:
            results.append(
                TaskResult(
                    row["topic"],
                    row["partition"],
                    row["target"],
                    row["first"],
                    row["next"],
                    produced=row["produced"],
                    bytes=row["bytes"],
                    max_timestamp_ms=row["max_ts"],
                    syncs=[(s, t) for s, t in row["syncs"]],
                    placed=row["placed"],
                    warning=row.get("warning"),
                )
            )
    return results, problems


def _left(tasks: Iterable[Mapping[str, Any]]) -> set[tuple[str, int]]:
    """The partitions whose task declined or failed: the Python tasks produce them."""
    return {(r["topic"], r["partition"]) for r in tasks if "declined" in r or "failed" in r}


def warnings_of(tasks: Iterable[Mapping[str, Any]]) -> list[str]:
    """The warnings of tasks that produced nothing (their range's records were deleted before
    they were read): no result carries them to `Batches.finish`, which logs the others."""
    return [w for r in tasks if "warning" in r and "next" not in r if (w := without_deleted(r["warning"]))]


class JvmWriter:
    """The driver's handle on the JVM writer for one flow: decides once whether it can be
    used, and runs a batch through it (None: the batch must go the Python way)."""

    def __init__(self, plan: TaskPlan, loadable: Callable[[Any], bool] | None = None) -> None:
        self.flow = plan.flow.name
        # Whether the driver JVM can load the writer's class (tests answer without a JVM).
        self._loadable = loadable or _loadable
        self.settings: WriterSettings | None = None
        self.unusable: str | None = None
        try:
            self.settings = writer_settings(plan)
        except Untranslatable as exc:
            self.unusable = f"{exc} has no faithful Java client equivalent here"
        self._checked = False
        # The warm-up (the driver's main thread) and foreachBatch (Spark's stream thread) may
        # ask at once: the one asking during the other's class check waits for its answer.
        self._checking = threading.Lock()

    def usable(self, spark_jvm: Any) -> bool:
        """Whether batches go the JVM way; the first call also checks the class is loadable
        (said once at INFO when it is not, or when the settings rule it out)."""
        with self._checking:
            if not self._checked:
                if self.unusable is None and not self._loadable(spark_jvm):
                    self.unusable = f"{WRITER_CLASS} is not on the driver's classpath (run `make setup`)"
                self._checked = True
                if self.unusable is not None:
                    log.info(
                        "flow %s: the JVM writer is not used (%s); Python tasks produce every batch",
                        self.flow,
                        self.unusable,
                    )
            return self.unusable is None

    def run(
        self,
        df: Any,
        plan: TaskPlan,
        topics: Iterable[str],
        batch_id: int,
        python: Callable[[Any, TaskPlan], list[TaskResult]],
    ) -> tuple[str, list[TaskResult]]:
        """Mirror the batch `df`: the JVM way where it may, else `python(df, plan)`. Returns the
        path taken ("jvm"; "python"; "python*": the JVM writer left partitions to the Python
        tasks, run with those partitions not settled, so each reads what the target holds) and
        the results.

        Only the partitions the JVM writer left go to the Python tasks: those it produced are
        acknowledged whole, and producing them again would duplicate them wherever the Python
        tasks cannot skip (provenance headers off)."""
        if not self.usable(df.sparkSession._jvm):
            return "python", python(df, plan)
        written = self.write(df, plan, topics, batch_id)
        if written is None:
            return "python", python(df, plan)
        results, left = written
        if not left:
            return "jvm", results
        rest = df.where(_partitions_in(left))
        return "python*", results + python(rest, replace(plan, settled=plan.settled - left))

    def write(
        self, df: Any, plan: TaskPlan, topics: Iterable[str], batch_id: int
    ) -> tuple[list[TaskResult], set[tuple[str, int]]] | None:
        """Read and produce batch `batch_id` (`df`) on the executors' Java clients: the results
        of the tasks that produced their slice and the partitions of those that declined or
        failed (logged once at INFO; the caller gives them to the Python path). None when the
        writer cannot find the batch's offset ranges in the running query (said at INFO; it
        produced nothing, and the whole batch goes the Python way).

        A job that failed raises (py4j's Py4JJavaError), as the Python tasks' job does: it
        ended without waiting for its other tasks, which Spark kills but which may still be
        sending, so no Python task may produce these partitions now (the query fails, and the
        restarted query's first batch reads what the target holds)."""
        assert self.settings is not None
        spec = batch_plan(plan, self.settings, topics, plan.settled)
        answer = json.loads(str(_writer_class(df.sparkSession._jvm).write(df._jdf, spec, batch_id)))
        if "unread" in answer:
            log.info(
                "flow %s: batch %d: the JVM writer cannot read the batch (%s); Python tasks produce it",
                self.flow,
                batch_id,
                answer["unread"],
            )
            return None
        for warning in warnings_of(answer["tasks"]):
            log.warning("flow %s: batch %d: %s", self.flow, batch_id, warning)
        results, problems = results_of(answer["tasks"])
        if not problems:
            return results, set()
        log.info(
            "flow %s: batch %d: the JVM writer left part of the batch to the Python tasks (%d task(s): %s); they "
            "read what the target holds",
            self.flow,
            batch_id,
            len(problems),
            problems[0],
        )
        return results, _left(answer["tasks"])


def _partitions_in(parts: Iterable[tuple[str, int]]) -> Any:
    """A filter keeping the rows of `parts` (one Kafka partition per Spark partition still)."""
    from pyspark.sql import functions as F

    return reduce(lambda a, b: a | b, [(F.col("topic") == t) & (F.col("partition") == p) for t, p in sorted(parts)])


def describe_paths(paths: Mapping[str, int]) -> str:
    """The run's batches by path, for its closing line."""
    python = paths.get("python", 0) + paths.get("python*", 0)
    return f"batches by the JVM writer: {paths.get('jvm', 0)}, by Python tasks: {python}"


def _loadable(spark_jvm: Any) -> bool:
    from py4j.java_gateway import JavaClass

    return isinstance(_writer_class(spark_jvm), JavaClass)


def _writer_class(spark_jvm: Any) -> Any:
    return reduce(getattr, WRITER_CLASS.split("."), spark_jvm)
