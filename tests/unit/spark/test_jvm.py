"""The JVM writer's driver side without Spark: which flows may use it, the Java client settings
it gets, the batch plan the Java tasks read (routes and provenance as `route()` makes them), and
their answer turned into `TaskResult`s."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace

import pytest

from mirror.domain.route import route
from mirror.kafka.settings import PRODUCER_DEFAULTS
from mirror.spark.jvm import (
    INFINITE_MS,
    JvmWriter,
    Untranslatable,
    batch_plan,
    cluster_settings,
    java_producer_settings,
    results_of,
    writer_settings,
)
from mirror.spark.task import TaskResult
from tests.unit.spark.fakes import task_plan


def test_the_python_tasks_producer_defaults_translate_to_the_java_client() -> None:
    got = java_producer_settings({**PRODUCER_DEFAULTS, "client.id": "mirror-spark-f"})
    assert got == {
        "enable.idempotence": "true",
        "acks": "all",
        "delivery.timeout.ms": str(INFINITE_MS),  # librdkafka's message.timeout.ms 0: never expire
        "linger.ms": "10",
        "compression.type": "lz4",
        "buffer.memory": str(16384 * 1024),
        "max.request.size": "1000000000",
        "max.block.ms": "300000",
        "client.id": "mirror-spark-f",
    }
    assert "batch.size" not in got  # per target topic, in the batch plan


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"queue.buffering.backpressure.threshold": 10}, "queue.buffering.backpressure.threshold"),
        ({"message.timeout.ms": 5000}, "message.timeout.ms"),  # below linger + request timeout: Java refuses
    ],
)
def test_a_producer_setting_without_a_faithful_java_equivalent_is_named(settings: dict[str, int], key: str) -> None:
    with pytest.raises(Untranslatable, match=key):
        java_producer_settings(settings)


def test_cluster_security_translates_and_other_client_keys_do_not() -> None:
    sasl = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "p",
    }
    got = cluster_settings("dst", "127.0.0.1:9093", sasl)
    assert got["bootstrap.servers"] == "127.0.0.1:9093" and got["security.protocol"] == "SASL_PLAINTEXT"
    assert got["sasl.jaas.config"].endswith('required username="u" password="p";')
    with pytest.raises(Untranslatable, match="clusters.dst.client.socket.timeout.ms"):
        cluster_settings("dst", "127.0.0.1:9093", {"socket.timeout.ms": 1000})
    with pytest.raises(Untranslatable, match="sasl.oauthbearer.config"):
        cluster_settings("dst", "127.0.0.1:9093", {"sasl.oauthbearer.config": "x"})


def test_exactly_once_and_untranslatable_flows_stay_on_the_python_path(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(Untranslatable, match="exactly_once"):
        writer_settings(task_plan("exactly_once: true, "))
    writer = JvmWriter(task_plan("producer: {queue.buffering.backpressure.threshold: 10}, "))
    with caplog.at_level(logging.INFO, logger="mirror.spark.jvm"):
        assert not writer.usable(spark_jvm=None)  # decided before asking the JVM
        assert not writer.usable(spark_jvm=None)
    assert [r.message for r in caplog.records if "not used" in r.message] == [
        "flow f: the JVM writer is not used (queue.buffering.backpressure.threshold has no faithful Java client "
        "equivalent here); Python tasks produce every batch"
    ]


def test_a_batch_asking_while_the_warm_up_checks_the_class_gets_the_answer() -> None:
    """Review (spark-first3): the warm-up (the driver's main thread, right after the query's
    start) and batch 0 (Spark's stream thread, through foreachBatch) both ask `usable`. The
    one asking while the other's class check is under way must get that check's answer, not
    "usable" by default: with the class not on the driver's classpath it would call the
    writer (a py4j JavaPackage, not callable) and fail the batch, so the query and the run."""
    answers: list[bool] = []
    batch = threading.Thread(target=lambda: answers.append(writer.usable(spark_jvm=None)))

    def loadable(_jvm: object) -> bool:
        batch.start()  # batch 0 asks while this check waits for the JVM's answer
        batch.join(timeout=0.5)  # bounded: it must wait for the answer, so this times out
        return False

    writer = JvmWriter(task_plan(), loadable=loadable)
    assert not writer.usable(spark_jvm=None)
    batch.join(timeout=10)
    assert answers == [False]


def test_a_flow_without_provenance_headers_stays_on_the_python_path() -> None:
    # Nothing can be skipped then, so a partition the JVM writer leaves half-sent (its shared
    # producer closed by another task's error) would be produced twice; a Python task
    # duplicates only its own slice on a retry.
    with pytest.raises(Untranslatable, match="provenance_headers"):
        writer_settings(task_plan("provenance_headers: false, "))


def test_the_writers_producer_queue_is_an_executors_not_a_python_workers() -> None:
    """The Python tasks' 4 MiB queue (`TASK_QUEUE_KB`) bounds each Python worker's memory; the
    JVM writer's producer is one per executor, shared by its running tasks, and with 1 MiB
    batches 4 MiB held four of them: tasks blocked in send() waiting for buffers. It gets
    `mirror run`'s queue; a flow's own setting still wins."""
    default = writer_settings(task_plan())
    assert default.producer["buffer.memory"] == str(PRODUCER_DEFAULTS["queue.buffering.max.kbytes"] * 1024)
    own = writer_settings(task_plan("producer: {queue.buffering.max.kbytes: 2048}, "))
    assert own.producer["buffer.memory"] == str(2048 * 1024)


def test_the_batch_plan_routes_and_stamps_provenance_as_route_does() -> None:
    plan = replace(task_plan("rename: identity, "), limits={"orders": 65536}, settled=frozenset())
    spec = json.loads(batch_plan(plan, writer_settings(plan), ["orders", "orders"], [("orders", 2)]))
    for p in range(3):
        r = route(plan.flow, "orders", p)
        assert spec["targets"]["orders"] == r.target_topic
        assert r.origin is not None and (spec["origins"]["orders"] + f"{p}/").encode() == r.origin
    assert spec["batch_sizes"] == {"orders": 65536 - 1024}  # fits the topic's max.message.bytes
    assert spec["batch_size"] == PRODUCER_DEFAULTS["batch.size"]
    assert spec["settled"] == [["orders", 2]]
    assert spec["producer"]["bootstrap.servers"] == "127.0.0.1:9093"


def test_the_writers_answer_becomes_task_results_or_the_reasons_to_fall_back() -> None:
    answer = [
        {
            "topic": "orders",
            "partition": 0,
            "first": 10,
            "target": "src.orders",
            "next": 20,
            "produced": 9,
            "bytes": 90,
            "max_ts": 1700,
            "placed": True,
            "syncs": [[10, 0], [15, 4]],
            "warning": "orders-0 offsets 10 to 11 were deleted before they were read",
        },
    ]
    results, problems = results_of(answer)
    assert problems == []
    assert results == [
        TaskResult(
            "orders",
            0,
            "src.orders",
            10,
            20,
            9,
            0,
            90,
            1700,
            [(10, 0), (15, 4)],
            True,
            "orders-0 offsets 10 to 11 were deleted before they were read",
        )
    ]
    declined = [
        {"topic": "orders", "partition": 1, "first": 5, "declined": "a retried task"},
        {"topic": "orders", "partition": 2, "first": 7, "failed": "RecordTooLargeException"},
    ]
    assert results_of(declined) == (
        [],
        ["orders[1] declined: a retried task", "orders[2] failed: RecordTooLargeException"],
    )


class _FailedJob:
    """What py4j gives the driver for a batch whose JVM job failed (a stage aborted after a
    task failed on every attempt, or the query's jobs cancelled): `write` raises."""

    def __init__(self) -> None:
        fails = type("W", (), {"write": staticmethod(self._raise)})
        self.sparkSession = type("S", (), {"_jvm": type("J", (), {"io": _Chain(fails)})})()

    @staticmethod
    def _raise(*_: object) -> None:
        raise RuntimeError("Job aborted due to stage failure: Task 1 in stage 3.0 failed 4 times")

    _jdf = None


class _Chain:
    """`jvm.io.mirror.spark.MirrorWriter` ending at `leaf`."""

    def __init__(self, leaf: object) -> None:
        self.leaf = leaf

    def __getattr__(self, name: str) -> object:
        return self.leaf if name == "MirrorWriter" else self


def test_a_failed_jvm_job_fails_the_batch_as_a_failed_python_job_does() -> None:
    """Review (JVM writer) F3: a job that failed ends without waiting for its other tasks: Spark
    kills them, but a JVM task may still be sending its slice. The Python tasks must not run
    the batch meanwhile (their copies would interleave with its records on the target); the
    batch fails, as it does when the Python tasks' own job fails, and the restarted query's
    first batch reads what the target holds."""
    writer = JvmWriter(task_plan(""), loadable=lambda jvm: True)
    ran: list[object] = []

    def python(df: object, plan: object) -> list[TaskResult]:
        ran.append(df)
        return []

    with pytest.raises(RuntimeError, match="stage failure"):
        writer.run(_FailedJob(), task_plan(""), ["orders"], 7, python)
    assert ran == []


class _Answering:
    """A batch whose JVM writer answers `answer` (recording what it was asked)."""

    def __init__(self, answer: dict[str, object]) -> None:
        self.asked: list[tuple[object, ...]] = []
        writer = type("W", (), {"write": staticmethod(lambda *a: self.asked.append(a) or json.dumps(answer))})
        self.sparkSession = type("S", (), {"_jvm": type("J", (), {"io": _Chain(writer)})})()

    _jdf = "jdf"


def test_a_batch_whose_ranges_the_writer_cannot_find_goes_whole_to_the_python_tasks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The JVM writer reads the offset ranges Spark planned for the batch from the running
    query (named in the plan, checked by batch id); where it cannot find them it produced
    nothing, so the whole batch goes the Python way with its plan unchanged (settled
    partitions stay settled: nothing was written to their targets)."""
    writer = JvmWriter(task_plan(""), loadable=lambda jvm: True)
    plan = replace(task_plan(""), settled=frozenset({("orders", 1)}))
    batch = _Answering({"unread": "no running query mirror-f executing batch 7"})
    ran: list[tuple[object, object]] = []

    def python(df: object, p: object) -> list[TaskResult]:
        ran.append((df, p))
        return [TaskResult("orders", 1, "src.orders", 0, 5, produced=5)]

    with caplog.at_level(logging.INFO, logger="mirror.spark.jvm"):
        path, results = writer.run(batch, plan, ["orders"], 7, python)
    assert (path, [r.produced for r in results]) == ("python", [5])
    assert ran == [(batch, plan)]
    _, spec, batch_id = batch.asked[0]
    assert (json.loads(str(spec))["query"], batch_id) == ("mirror-f", 7)
    assert "cannot read the batch (no running query mirror-f executing batch 7)" in caplog.text


def test_a_batch_the_writer_produced_whole_takes_the_jvm_path() -> None:
    writer = JvmWriter(task_plan(""), loadable=lambda jvm: True)
    task = {"topic": "orders", "partition": 0, "first": 3, "target": "src.orders", "next": 9, "produced": 6}
    done = {**task, "bytes": 60, "max_ts": 5, "placed": True, "syncs": [[3, 0]]}
    path, results = writer.run(_Answering({"tasks": [done]}), task_plan(""), ["orders"], 0, lambda *_: [])
    assert path == "jvm"
    assert results == [TaskResult("orders", 0, "src.orders", 3, 9, 6, 0, 60, 5, [(3, 0)], True)]


def test_a_range_retention_deleted_whole_is_named_in_a_warning_and_left_to_no_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Review (direct read) D1: a task whose range retention deleted whole (Spark's source
    with failOnDataLoss false skips it too) produced nothing; its answer carries only the
    warning. The driver logs it, and the partition is neither a result nor left to the
    Python tasks (nothing of it is left to read)."""
    writer = JvmWriter(task_plan(""), loadable=lambda jvm: True)
    done = {
        "topic": "orders",
        "partition": 0,
        "first": 3,
        "target": "src.orders",
        "next": 9,
        "produced": 6,
        "bytes": 60,
        "max_ts": 5,
        "placed": True,
        "syncs": [[3, 0]],
    }
    lost = {"topic": "orders", "partition": 1, "first": 0, "warning": "orders-1 offsets 0 to 100 were deleted"}
    ran: list[object] = []

    def python(df: object, p: object) -> list[TaskResult]:
        ran.append(df)
        return []

    with caplog.at_level(logging.WARNING, logger="mirror.spark.jvm"):
        path, results = writer.run(_Answering({"tasks": [done, lost]}), task_plan(""), ["orders"], 4, python)
    assert (path, ran) == ("jvm", [])
    assert results == [TaskResult("orders", 0, "src.orders", 3, 9, 6, 0, 60, 5, [(3, 0)], True)]
    assert "batch 4: orders-1 offsets 0 to 100 were deleted" in caplog.text
