"""The Spark driver where `mirror run` carries on: an offset store that fails for a while
holds the batch's commit back and is retried. In-memory fakes of our own ports (the store,
the source Admin); no Spark."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from mirror.config import SqliteStoreConfig, parse
from mirror.domain.topics import TopicMapping
from mirror.engine.status import FlowState, FlowStatus
from mirror.errors import OffsetStoreError
from mirror.run.recorder import OffsetMapRecorder
from mirror.spark.batches import Batches
from mirror.spark.commits import GroupCommits
from mirror.spark.task import TaskPlan, TaskResult
from mirror.store import open_store

CONFIG = """\
clusters:
  src: {bootstrap: 127.0.0.1:9092}
  dst: {bootstrap: 127.0.0.1:9093}
flows:
  - {name: f, source: src, target: dst, topics: {include: [orders]}}
"""


class FlakyStore:
    """A real SQLite store whose writes fail `failures` times first (Cassandra restarting)."""

    def __init__(self, inner: Any, failures: int, log: list[str]) -> None:
        self.inner, self.failures, self.log = inner, failures, log

    def write_syncs(self, *a: Any, **k: Any) -> None:
        if self.failures > 0:
            self.failures -= 1
            self.log.append("store failed")
            raise OffsetStoreError("offset store write failed: timed out")
        self.inner.write_syncs(*a, **k)
        self.log.append("rows stored")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class RecordedStatus(FlowStatus):
    def __init__(self, flow: str) -> None:
        super().__init__(flow)
        self.changes: list[str] = []

    def set(self, state: FlowState, reason: str) -> None:
        if state != self.state:
            self.changes.append(state.value)
        super().set(state, reason)


class SourceAdmin:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.commits: list[dict[tuple[str, int], int]] = []

    def alter_group_offsets(self, group: str, offsets: dict[tuple[str, int], int], metadata: Any = None) -> None:
        self.log.append("group committed")
        self.commits.append(dict(offsets))


class TargetAdmin:
    def topic_ids(self, topics: Any) -> dict[str, str]:
        return {t: "id-1" for t in topics}


def flow_with(
    tmp_path: Path, failures: int, stop: threading.Event | None = None
) -> tuple[Batches, SourceAdmin, list[str]]:
    config = parse(CONFIG, env={})
    flow = config.flow("f")
    events: list[str] = []
    store = FlakyStore(open_store(SqliteStoreConfig(path=str(tmp_path / "o.db"))), failures, events)
    recorder = OffsetMapRecorder(store, "f", registry=None)
    source = SourceAdmin(events)
    commits = GroupCommits("f", flow.group_id, source, TargetAdmin())
    commits.use([TopicMapping("orders", "src.orders", 1)], {})
    plan = TaskPlan(flow, config.clusters["dst"])
    job = Batches("f", source, plan, recorder, commits, stop=stop, status=RecordedStatus("f"))
    job.store_backoff = 0.001
    return job, source, events


def result() -> TaskResult:
    return TaskResult("orders", 0, "src.orders", 0, 100, produced=100, bytes=1000, max_timestamp_ms=5, syncs=[(0, 0)])


def test_an_offset_store_that_fails_for_a_while_delays_the_commit_instead_of_killing_the_run(tmp_path: Path) -> None:
    job, source, events = flow_with(tmp_path, failures=3)
    assert isinstance(job.status, RecordedStatus)
    job.finish(0, [result()], {})
    assert job.status.changes == ["retrying", "running"]  # as `mirror run` reports a commit held back
    # retried with backoff until the rows are stored, and only then the group commit (invariant 1)
    assert events == ["store failed"] * 3 + ["rows stored", "group committed"]
    assert source.commits == [{("orders", 0): 100}]
    assert job.records == 100


def test_a_stop_while_the_store_fails_ends_the_batch_without_a_commit(tmp_path: Path) -> None:
    stop = threading.Event()
    job, source, events = flow_with(tmp_path, failures=10**6, stop=stop)
    job.store_backoff = 0.05
    threading.Timer(0.2, stop.set).start()
    with pytest.raises(OffsetStoreError):
        job.finish(0, [result()], {})
    assert source.commits == [] and "group committed" not in events


def test_a_batch_commits_its_whole_offset_range_once_its_rows_are_stored(tmp_path: Path) -> None:
    """The batch's records end at 100, its range (Spark's offset log) at 103: transaction
    markers or aborted records. Spark records the batch complete once the handler returns, so
    the group must stand at 103 by then, or a driver dying next cannot resume the checkpoint.
    A partition of the range without records moves too."""
    job, source, events = flow_with(tmp_path, failures=0)
    job.finish(4, [result()], {("orders", 0): 103, ("orders", 1): 7})
    assert events == ["rows stored", "group committed"]
    assert source.commits == [{("orders", 0): 103, ("orders", 1): 7}]
