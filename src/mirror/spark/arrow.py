"""A batch's tasks as Spark runs them (executor side): Kafka rows in as Arrow record batches
(`DataFrame.mapInArrow`), one `TaskResult` out per source partition.

Arrow moves the rows from the JVM to the Python worker in columnar batches instead of
pickling them one by one, and the task produces each batch before Spark sends the next, so
a Python worker holds one Arrow batch (Spark's `spark.sql.execution.arrow.maxRecordsPerBatch`
and `maxBytesPerBatch`, set per flow by the job) and the producer's queue, whatever the
backlog. The mirroring itself is `mirror.spark.task`'s, which knows nothing of Arrow or Spark.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from typing import Any

from mirror.spark.exactly_once import mirror_exactly_once
from mirror.spark.task import SourceRow, TaskPlan, TaskResult, mirror_chunks

# The columns the job selects, in `SourceRow`'s order.
COLUMNS = ["topic", "partition", "offset", "unix_millis(timestamp) AS ts", "key", "value", "headers"]
RESULT_SCHEMA = "result binary"  # one row per task: its pickled TaskResult


def mirror_arrow(plan: TaskPlan, batches: Iterable[Any]) -> Iterator[Any]:
    """`mapInArrow`'s function: mirror this task's Kafka partition slice, one result row out.

    A task that is not its partition's first attempt says so (`retried`): a failed attempt
    may have produced part of the slice, so the target's tail is read (`mirror_chunks`).
    With `exactly_once` the attempt number does not matter: every attempt fences the ones
    before it and writes what the target's committed progress lacks (`mirror_exactly_once`).
    """
    import pyarrow as pa
    from pyspark import TaskContext

    ctx = TaskContext.get()
    # A batch's job is one stage (Kafka scan, this function, collect): no shuffle, so no
    # stage is attempted twice, and a task's attempt number says whether it ran before.
    retried = ctx is not None and ctx.attemptNumber() > 0
    chunks = (rows_of(b) for b in batches)
    results = (
        mirror_exactly_once(plan, chunks) if plan.flow.exactly_once else mirror_chunks(plan, chunks, retried=retried)
    )
    for result in results:
        yield pa.RecordBatch.from_pydict({"result": [pickle.dumps(result)]})


def rows_of(batch: Any) -> list[SourceRow]:
    """An Arrow record batch of `COLUMNS` as row tuples; headers as (key, value) pairs.

    Through numpy: `to_pylist` builds each value through an Arrow scalar, tens of times
    slower per binary value than `to_numpy(zero_copy_only=False)`.
    """
    n = batch.num_rows
    cols: list[Any] = [_values(batch.column(i)) for i in range(6)]
    cols.append(_headers(batch.column(6), n))
    return list(zip(*cols, strict=True))


def _values(array: Any) -> list[Any]:
    return array.to_numpy(zero_copy_only=False).tolist()  # type: ignore[no-any-return]


def _headers(array: Any, n: int) -> list[Any]:
    """Each row's headers as [(key, value)], or None when it has none."""
    if array.null_count == n:
        return [None] * n
    bounds = _values(array.offsets)
    pairs = array.flatten()  # the struct values of the rows in this (maybe sliced) batch
    keys, values = _values(pairs.field("key")), _values(pairs.field("value"))
    base = bounds[0]
    valid = _values(array.is_valid())
    return [
        list(zip(keys[a - base : b - base], values[a - base : b - base], strict=True)) or None if ok else None
        for a, b, ok in zip(bounds, bounds[1:], valid, strict=False)
    ]


def results_of(rows: Iterable[Any]) -> list[TaskResult]:
    """The driver's side: the collected result rows back as `TaskResult`s."""
    return [pickle.loads(row[0]) for row in rows]
