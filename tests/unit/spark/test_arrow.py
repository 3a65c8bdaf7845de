"""Spark's Kafka rows as Arrow record batches become the task's row tuples (no Spark here:
pyarrow builds the batch `mapInArrow` would hand the task)."""

from __future__ import annotations

import pickle

import pyarrow as pa

from mirror.config import parse
from mirror.spark.arrow import _result_batch, results_of, rows_of
from mirror.spark.task import TaskResult


def test_a_batch_of_kafka_rows_becomes_row_tuples_with_headers_as_pairs() -> None:
    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(["t", "t"]),
            pa.array([3, 3], pa.int32()),
            pa.array([7, 8], pa.int64()),
            pa.array([1000, 1001], pa.int64()),
            pa.array([b"k", None], pa.binary()),
            pa.array([None, b"v"], pa.binary()),
            pa.array([[{"key": "h", "value": b"1"}, {"key": "n", "value": None}], None], headers),
        ],
        names=["topic", "partition", "offset", "ts", "key", "value", "headers"],
    )
    assert rows_of(batch) == [
        ("t", 3, 7, 1000, b"k", None, [("h", b"1"), ("n", None)]),
        ("t", 3, 8, 1001, None, b"v", None),
    ]


def test_a_sliced_batch_and_large_types_read_only_their_rows() -> None:
    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(["a", "tt", "tt", "tt"], pa.large_string()),
            pa.array([0, 5, 5, 5], pa.int32()),
            pa.array([1, 20, 21, 22], pa.int64()),
            pa.array([9, 2000, 2001, 2002], pa.int64()),
            pa.array([b"x", None, b"k2", b""], pa.large_binary()),
            pa.array([b"y", b"v1", None, b"v3"], pa.binary()),
            pa.array(
                [[{"key": "z", "value": b"0"}], None, [{"key": "h", "value": None}], [{"key": "a", "value": b"b"}]],
                headers,
            ),
        ],
        names=["topic", "partition", "offset", "ts", "key", "value", "headers"],
    ).slice(1)
    assert rows_of(batch) == [
        ("tt", 5, 20, 2000, None, b"v1", None),
        ("tt", 5, 21, 2001, b"k2", None, [("h", None)]),
        ("tt", 5, 22, 2002, b"", b"v3", [("a", b"b")]),
    ]


def test_results_come_back_to_the_driver_as_they_left_the_task() -> None:
    result = TaskResult("t", 1, "src.t", 5, 9, produced=4, syncs=[(5, 0)])
    assert results_of([(pickle.dumps(result),)]) == [result]
    (row,) = _result_batch(pickle.dumps(result)).column(0).to_pylist()  # the task's side
    assert results_of([(row,)]) == [result]


def test_a_flows_spark_batch_bounds_have_defaults_and_take_sizes() -> None:
    base = (
        "clusters: {a: {bootstrap: '127.0.0.1:1'}, b: {bootstrap: '127.0.0.1:2'}}\nflows:\n  - "
        "{name: f, source: a, target: b, topics: {include: [x]}%s}\n"
    )
    default = parse(base % "", env={}).flow("f").spark
    assert (default.max_records_per_batch, default.max_bytes_per_chunk) == (500_000, 8 * 1024 * 1024)
    set_ = parse(base % ", spark: {max_records_per_batch: 1000, max_bytes_per_chunk: 4MiB}", env={}).flow("f").spark
    assert (set_.max_records_per_batch, set_.max_bytes_per_chunk) == (1000, 4 * 1024 * 1024)
