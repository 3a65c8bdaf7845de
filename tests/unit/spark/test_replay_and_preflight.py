"""The Spark engine's pure pieces: replay detection from provenance headers, delta changes,
and the checks a run makes before Spark starts (no Spark, no Kafka)."""

from __future__ import annotations

import json

import pytest

from mirror.config import parse
from mirror.domain.route import HEADER_ORIGIN, Route
from mirror.errors import ExitCode, MirrorError, UsageError
from mirror.spark.checkpoint import claim_checkpoint
from mirror.spark.session import check_master, with_task_retries
from mirror.spark.task import delta_changes, origin_offset

R = Route("orders", 1, "nyc.orders", b"nyc/orders/1/")


def h(origin: str | None, *own: tuple[str, bytes | None]) -> list[tuple[str, bytes | None]]:
    return [*own, (HEADER_ORIGIN, origin.encode())] if origin else list(own)


def test_origin_offset_reads_only_this_routes_newest_hop():
    assert origin_offset(R, h("nyc/orders/1/42", ("a", b"x"))) == 42
    assert origin_offset(R, h("nyc/orders/2/42")) is None  # another partition's copy
    assert origin_offset(R, h("nyc/orders/1/7") + h("nyc/orders/1/9")) == 9
    assert origin_offset(R, [("a", None)]) is None
    assert origin_offset(Route("orders", 1, "orders", None), h("nyc/orders/1/3")) is None  # provenance off


def test_local_mode_gets_task_retries_and_other_masters_are_kept():
    assert with_task_retries("local[*]") == "local[*,4]"
    assert with_task_retries("local[2]") == "local[2,4]"
    assert with_task_retries("local") == "local[1,4]"
    assert with_task_retries("local[2,8]") == "local[2,8]"  # the user's own retries
    assert with_task_retries("spark://h:7077") == "spark://h:7077"  # spark.task.maxFailures applies


def test_delta_changes_keep_the_first_pair_and_every_change():
    assert delta_changes([(4, 11), (5, 12), (7, 13), (8, 14), (9, 16)]) == [(4, 11), (7, 13), (9, 16)]
    assert delta_changes([]) == []


def test_a_master_that_does_not_answer_is_one_clear_error():
    with pytest.raises(MirrorError, match="spark://127.0.0.1:9 does not answer") as info:
        check_master("spark://127.0.0.1:9", timeout=2)
    assert info.value.exit_code == ExitCode.FAILURE
    check_master("local[2]")  # nothing to reach


def _flow(name: str):
    text = f"""\
clusters:
  a: {{bootstrap: 127.0.0.1:9092}}
  b: {{bootstrap: 127.0.0.1:9093}}
flows:
  - {{name: {name}, source: a, target: b, topics: {{include: [x]}}}}
"""
    config = parse(text, env={})
    return config.flow(name)


def test_a_checkpoint_directory_belongs_to_one_flow(tmp_path):
    assert claim_checkpoint(tmp_path / "cp", _flow("one")) == tmp_path / "cp" / "query"
    assert json.loads((tmp_path / "cp" / "mirror-flow.json").read_text())["flow"] == "one"
    assert claim_checkpoint(tmp_path / "cp", _flow("one")) == tmp_path / "cp" / "query"  # its own again
    with pytest.raises(UsageError, match="belongs to .*'one'.*not flow 'two'"):
        claim_checkpoint(tmp_path / "cp", _flow("two"))


def test_a_pyspark_without_its_connector_jar_is_refused(tmp_path, monkeypatch):
    from mirror.spark import session

    monkeypatch.setattr(session, "CACHE", tmp_path)
    (tmp_path / "spark-4.2.0" / "jars").mkdir(parents=True)
    (tmp_path / "spark-4.2.0" / "jars" / "spark-sql-kafka-0-10_2.13-4.2.0.jar").write_bytes(b"")
    assert session.connector_jars("4.2.0") == [
        str(tmp_path / "spark-4.2.0" / "jars" / "spark-sql-kafka-0-10_2.13-4.2.0.jar")
    ]
    with pytest.raises(MirrorError, match="no Spark Kafka connector for pyspark 4.3.0") as info:
        session.connector_jars("4.3.0")
    assert "make setup" in str(info.value)


def test_a_task_sizes_producer_batches_below_the_target_topics_limit_as_mirror_run_does():
    from mirror.kafka.settings import BATCH_SIZE, batch_size_for
    from mirror.spark.task import TaskPlan

    config = parse(
        "clusters: {s: {bootstrap: 'h:1'}, d: {bootstrap: 'h:2'}}\nflows: "
        "[{name: f, source: s, target: d, topics: {include: [t]}}]\n",
        env={},
    )
    plan = TaskPlan(config.flow("f"), config.clusters["d"], limits={"s.small": 65536, "s.big": 10 * BATCH_SIZE})
    assert plan.producer_settings_for("s.small")["batch.size"] == batch_size_for(BATCH_SIZE, 65536) == 65536 - 1024
    assert plan.producer_settings_for("s.big")["batch.size"] == BATCH_SIZE
    assert plan.producer_settings_for("s.unknown")["batch.size"] == BATCH_SIZE


def test_a_tasks_producer_queue_is_bounded_unless_the_flow_sets_its_own():
    from mirror.spark.task import TASK_QUEUE_KB, TaskPlan

    def plan(producer: str) -> TaskPlan:
        config = parse(
            "clusters: {s: {bootstrap: 'h:1'}, d: {bootstrap: 'h:2'}}\nflows: "
            f"[{{name: f, source: s, target: d, topics: {{include: [t]}}{producer}}}]\n",
            env={},
        )
        return TaskPlan(config.flow("f"), config.clusters["d"])

    assert plan("").producer_settings_for("s.t")["queue.buffering.max.kbytes"] == TASK_QUEUE_KB == 4096
    own = plan(", producer: {queue.buffering.max.kbytes: 65536}")
    assert own.producer_settings_for("s.t")["queue.buffering.max.kbytes"] == 65536


def test_audit_trims_only_what_the_target_topics_retention_explains():
    from mirror.domain.offsetmap import OffsetSync
    from mirror.spark.audit import first_held, retention_cutoff

    now = 10_000_000
    assert retention_cutoff({"retention.ms": "3600000", "retention.bytes": "-1"}, now) == now - 3600_000
    assert (
        retention_cutoff({"retention.ms": "-1", "retention.bytes": "-1"}, now) is None
    )  # keeps everything: a gap is missing
    assert retention_cutoff({"retention.ms": "-1", "retention.bytes": "1000"}, now) == float(
        "inf"
    )  # size-based: any age
    # Copies at target offset = source + 5 from source 0, + 4 from source 100 (a marker): the
    # target's log start 50 holds the copy of source 45; 200 the copy of 196.
    syncs = [OffsetSync("t", 0, 0, 5), OffsetSync("t", 0, 100, 104)]
    assert first_held(syncs, 50, 0) == 45
    assert first_held(syncs, 200, 0) == 196
    assert first_held(syncs, 0, 7) == 7 and first_held([], 50, 7) == 7  # nothing trimmed / no map
