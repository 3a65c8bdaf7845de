"""The executors' warm-up, driver side, without Spark: started only where the JVM writer will
run the batches, with the batch plan the writer's tasks get (so they find the same cached
producers), and never a failure of the run, whatever the JVM answers."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

import pytest

from mirror.spark.jvm import JvmWriter, batch_plan
from mirror.spark.warmup import Warmup
from tests.unit.spark.fakes import task_plan


class _Handle:
    """What `io.mirror.spark.Warmup.start` returns, as py4j shows it."""

    def __init__(self, ended: bool = True, outcome: str = "", fails: bool = False) -> None:
        self.ended, self._outcome, self.fails = ended, outcome, fails
        self.calls: list[str] = []

    def cancel(self) -> None:
        self.calls.append("cancel")
        if self.fails:
            raise ConnectionError("the gateway is gone")

    def waitFor(self, ms: int) -> bool:  # noqa: N802 (the Java name)
        self.calls.append(f"waitFor {ms}")
        return self.ended

    def outcome(self) -> str:
        return self._outcome


class _Session:
    """A SparkSession whose JVM has `io.mirror.spark.Warmup` (`start` answers `handle` or raises)."""

    def __init__(self, handle: Any = None, error: Exception | None = None) -> None:
        self.started: list[str] = []
        session = self

        class _Warmup:
            @staticmethod
            def start(jsession: object, spec: str) -> Any:
                session.started.append(spec)
                if error is not None:
                    raise error
                return handle

        leaf = type("io", (), {"mirror": type("m", (), {"spark": type("s", (), {"Warmup": _Warmup})})})
        self._jvm = type("J", (), {"io": leaf})()
        self._jsparkSession = object()


def _usable_writer(flow_settings: str = "") -> JvmWriter:
    writer = JvmWriter(task_plan(flow_settings), loadable=lambda jvm: True)
    return writer


def test_the_warm_up_gets_the_plan_the_writers_tasks_get() -> None:
    """Same producer settings and batch sizes per target topic: the first batch's tasks find
    the producers the warm-up created under the same cache key."""
    plan = replace(task_plan(), limits={"src.orders": 65536})
    writer = _usable_writer()
    session = _Session(_Handle())
    warmup = Warmup.start(session, writer, plan, ["orders"])
    assert warmup is not None
    (spec,) = session.started
    assert writer.settings is not None
    assert json.loads(spec) == json.loads(batch_plan(plan, writer.settings, ["orders"], ()))


def test_no_warm_up_where_the_python_tasks_produce() -> None:
    writer = JvmWriter(task_plan("exactly_once: true, "))
    session = _Session(_Handle())
    assert Warmup.start(session, writer, task_plan("exactly_once: true, "), ["orders"]) is None
    assert session.started == []


def test_a_warm_up_that_cannot_start_is_logged_and_the_run_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    session = _Session(error=RuntimeError("Py4JError: no such class"))
    with caplog.at_level(logging.INFO, logger="mirror.spark.warmup"):
        assert Warmup.start(session, _usable_writer(), task_plan(), ["orders"]) is None
    assert any("did not start" in r.message and "no such class" in r.message for r in caplog.records)


def test_closing_cancels_then_waits_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    done = _Handle()
    Warmup("f", done).close(timeout=2.0)
    assert done.calls == ["cancel", "waitFor 2000"]

    failed = _Handle(outcome="org.apache.spark.SparkException: Job 0 cancelled")
    still = _Handle(ended=False)
    gone = _Handle(fails=True)
    with caplog.at_level(logging.INFO, logger="mirror.spark.warmup"):
        for handle in (failed, still, gone):
            Warmup("f", handle).close(timeout=1.0)  # none raises
    messages = [r.message for r in caplog.records]
    assert "flow f: the executors' warm-up did not complete (org.apache.spark.SparkException: Job 0 cancelled)" in (
        messages
    )
    assert "flow f: the executors' warm-up still ran 1 s after its cancellation" in messages
