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
import struct
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
        yield _result_batch(pickle.dumps(result))


def _result_batch(blob: bytes) -> Any:
    """One result row, built from buffers: `pa.array` would import pandas into the worker."""
    import pyarrow as pa

    offsets = pa.py_buffer(struct.pack("<ii", 0, len(blob)))
    return pa.RecordBatch.from_arrays(
        [pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(blob)])], ["result"]
    )


def rows_of(batch: Any) -> list[SourceRow]:
    """An Arrow record batch of `COLUMNS` as row tuples; headers as (key, value) pairs.

    Read from the arrays' buffers: `to_pylist` builds each value through an Arrow scalar
    (tens of times slower per binary value), and `to_numpy` imports pandas into the Python
    worker (tens of MB of its RSS, for nothing a task uses).
    """
    n = batch.num_rows
    cols: list[Any] = [_binaries(batch.column(0), text=True)]
    cols += [_ints(batch.column(i)) for i in (1, 2, 3)]
    cols += [_binaries(batch.column(4)), _binaries(batch.column(5))]
    cols.append(_headers(batch.column(6), n))
    return list(zip(*cols, strict=True))


def _ints(array: Any) -> list[int]:
    """A never-null integer column (partition, offset, timestamp)."""
    import numpy as np

    if array.null_count:
        return array.to_pylist()  # type: ignore[no-any-return]
    width = array.type.bit_width // 8
    data = array.buffers()[1]
    return np.frombuffer(data, f"<i{width}", len(array), array.offset * width).tolist()  # type: ignore[no-any-return]


def _valid(array: Any) -> list[bool] | None:
    """Which values are not null (None: all of them)."""
    import numpy as np

    if array.null_count == 0:
        return None
    bits = np.unpackbits(np.frombuffer(array.buffers()[0], np.uint8), bitorder="little")
    return bits[array.offset : array.offset + len(array)].astype(bool).tolist()  # type: ignore[no-any-return]


def _binaries(array: Any, *, text: bool = False) -> list[Any]:
    """A binary (or, `text`, string) column's values, None where null; large types too."""
    import numpy as np
    import pyarrow as pa

    n = len(array)
    _, offsets, data = array.buffers()
    large = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
    size = 8 if large else 4
    bounds = np.frombuffer(offsets, f"<i{size}", n + 1, array.offset * size).tolist()
    raw = data.to_pybytes() if data is not None else b""
    values: list[Any] = [raw[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    if text:
        values = [v.decode() for v in values]
    valid = _valid(array)
    if valid is not None:
        values = [v if ok else None for v, ok in zip(values, valid, strict=True)]
    return values


def _headers(array: Any, n: int) -> list[Any]:
    """Each row's headers as [(key, value)], or None when it has none."""
    if array.null_count == n:
        return [None] * n
    bounds = _ints(array.offsets)
    pairs = array.flatten()  # the struct values of the rows in this (maybe sliced) batch
    keys, values = _binaries(pairs.field("key"), text=True), _binaries(pairs.field("value"))
    base = bounds[0]
    valid = _valid(array) or [True] * n
    return [
        list(zip(keys[a - base : b - base], values[a - base : b - base], strict=True)) or None if ok else None
        for a, b, ok in zip(bounds, bounds[1:], valid, strict=False)
    ]


def results_of(rows: Iterable[Any]) -> list[TaskResult]:
    """The driver's side: the collected result rows back as `TaskResult`s."""
    return [pickle.loads(row[0]) for row in rows]
