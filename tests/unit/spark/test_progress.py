"""Spark's query progress (its JSON form) into the Prometheus metrics (no Spark running)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from mirror.metrics import SparkMetrics
from mirror.spark.progress import observe_progress

# Trimmed from a real `StreamingQueryProgress.json` of a mirror query.
PROGRESS = {
    "name": "mirror-f",
    "batchId": 4,
    "batchDuration": 1500,
    "numInputRows": 1200,
    "inputRowsPerSecond": 800.0,
    "processedRowsPerSecond": 950.5,
    "sources": [
        {
            "description": "KafkaV2[Assign[t-0, t-1]]",
            "startOffset": {"t": {"0": 100, "1": 40}},
            "endOffset": {"t": {"0": 700, "1": 640}},
            "latestOffset": {"t": {"0": 1000, "1": 640}},
            "numInputRows": 1200,
        }
    ],
}


def sample(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


def test_a_batch_progress_becomes_duration_rows_rates_and_offsets_behind():
    reg = CollectorRegistry()
    m = SparkMetrics(reg)
    observe_progress(m, "f", PROGRESS)
    observe_progress(
        m, "f", {**PROGRESS, "batchDuration": 500, "numInputRows": 0, "inputRowsPerSecond": None, "sources": []}
    )
    assert sample(reg, "mirror_spark_batch_duration_seconds_count", flow="f") == 2
    assert sample(reg, "mirror_spark_batch_duration_seconds_sum", flow="f") == 2.0
    assert sample(reg, "mirror_spark_input_records_total", flow="f") == 1200
    assert (
        sample(reg, "mirror_spark_input_records_per_second", flow="f") == 800.0
    )  # a batch without input keeps the last rate
    assert sample(reg, "mirror_spark_processed_records_per_second", flow="f") == 950.5
    assert sample(reg, "mirror_spark_offsets_behind_latest", flow="f", topic="t", partition="0") == 300
    assert sample(reg, "mirror_spark_offsets_behind_latest", flow="f", topic="t", partition="1") == 0


def test_offsets_as_json_strings_are_read_too():
    """pyspark's `SourceProgress` objects carry the offsets as JSON text, not objects."""
    reg = CollectorRegistry()
    source = {**PROGRESS["sources"][0], "endOffset": '{"t":{"0":5}}', "latestOffset": '{"t":{"0":9}}'}
    observe_progress(SparkMetrics(reg), "f", {**PROGRESS, "sources": [source]})
    assert sample(reg, "mirror_spark_offsets_behind_latest", flow="f", topic="t", partition="0") == 4


def test_the_flow_state_follows_the_query_and_the_runs_own_states():
    """`mirror_flow_state` reads the run's `FlowStatus`: the query's start and end set it here,
    the run sets what `mirror run` reports beside them (retrying, stopping, caught_up)."""
    from types import SimpleNamespace

    from mirror.engine.status import FlowState, FlowStatus
    from mirror.spark.progress import FlowProgress

    reg = CollectorRegistry()
    status = FlowStatus("f")
    listener = FlowProgress("f", "mirror-f", SparkMetrics(reg), reg, status)

    def state() -> str:
        return next(s for s in FlowState if sample(reg, "mirror_flow_state", flow="f", state=s.value) == 1).value

    assert state() == "starting"
    listener.onQueryStarted(SimpleNamespace(name="other", id="q0"))  # another query of the session
    assert state() == "starting"
    listener.onQueryStarted(SimpleNamespace(name="mirror-f", id="q1"))
    assert state() == "running"
    status.set(FlowState.RETRYING, "batch held back: offset store write failed")  # as `Batches` does
    assert state() == "retrying"
    listener.onQueryTerminated(SimpleNamespace(id="q0", exception=None))
    assert state() == "retrying"
    listener.onQueryTerminated(SimpleNamespace(id="q1", exception="StreamingQueryException: boom\n\tat ..."))
    assert state() == "failed" and status.reason == "StreamingQueryException: boom"
