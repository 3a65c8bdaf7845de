"""bench/spark_driver.py reads `Batches.on_batch`'s own per-batch DEBUG line: the line is made
here by the real handler (its tasks' job replaced by an in-memory fake of the JVM writer, the
store and the group commit by fakes of our own ports), so a change of its wording shows here."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from bench.spark_driver import _BatchLines
from mirror.spark.batches import Batches
from mirror.spark.task import TaskResult
from tests.unit.spark.fakes import task_plan


class Source:
    def request_end_offsets(self, parts: Any) -> Future[dict[Any, int]]:
        done: Future[dict[Any, int]] = Future()
        done.set_result({p: 100 for p in parts})
        return done


class Writer:
    """The JVM writer's `run`: every partition produced on the JVM path."""

    def __init__(self, results: list[TaskResult]) -> None:
        self.results = results

    def run(self, df: Any, plan: Any, topics: Any, batch_id: int, python: Any) -> tuple[str, list[TaskResult]]:
        return "jvm", self.results


class Recorder:
    def on_acked(self, batches: Any) -> None:
        pass

    def flush(self) -> None:
        pass


class Commits:
    """The group commits of `mirror.spark.commits.GroupCommits`: `positions` where the group
    stands (the query started it there), `committed` every commit made."""

    def __init__(self) -> None:
        self.positions: dict[Any, int] = {}
        self.committed: list[dict[Any, int]] = []

    def commit(self, positions: dict[Any, int]) -> None:
        self.committed.append(positions)
        self.positions = {**self.positions, **positions}


def _result(partition: int, records: int) -> TaskResult:
    return TaskResult(
        "orders", partition, "src.orders", 0, records, produced=records, bytes=records, max_timestamp_ms=5, syncs=[]
    )


def test_the_per_batch_line_of_the_real_handler_is_read(tmp_path: Path) -> None:
    commits = Commits()
    handler = Batches("f", Source(), task_plan(), Recorder(), commits)  # type: ignore[arg-type]
    handler.jvm = Writer([_result(0, 70), _result(1, 30)])  # type: ignore[assignment]
    checkpoint = tmp_path / "query"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n{"orders": {"0": 70, "1": 30}}\n')
    handler.start_query([], checkpoint)
    lines = _BatchLines()
    logger = logging.getLogger("mirror.spark.batches")
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    try:
        handler.on_batch(None, 3)
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)

    assert commits.committed  # the batch went through the handler's whole path
    assert len(lines.batches) == 1
    (batch,) = lines.batches
    assert {k: batch[k] for k in ("batch", "tasks", "records")} == {"batch": 3, "tasks": 2, "records": 100}
    assert batch["path"] == "jvm"
    assert batch["tasks_ms"] >= 0 and batch["driver_ms"] >= 0
