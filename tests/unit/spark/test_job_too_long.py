"""Review of truth-config: `mirror spark run` and a selected topic whose target name Kafka
would refuse. `match_topics` leaves it out for every caller; `mirror run` says so in one
ERROR line (`TargetWatch._report_unmirrorable`), the Spark engine says nothing at all."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from mirror.config import parse
from mirror.domain.naming import MAX_TOPIC_NAME
from mirror.engine.targets import SyncResult
from mirror.spark import job as job_module
from mirror.spark.job import SparkFlow

CONFIG = """\
clusters:
  src: {bootstrap: 127.0.0.1:9092}
  dst: {bootstrap: 127.0.0.1:9093}
flows:
  - {name: f, source: src, target: dst, topics: {include: ["o.*"]}}
"""

LONG = "o" + "x" * (MAX_TOPIC_NAME - 4)  # "src." + it is 1 over the limit


class Topics:
    """Our Admin port, the two calls `SparkFlow._refresh` makes of it besides ensure_targets."""

    def __init__(self, topics: dict[str, int]) -> None:
        self._topics = topics

    def topics(self) -> dict[str, int]:
        return dict(self._topics)

    def max_message_bytes(self, topics: Any) -> dict[str, int]:
        return {t: 1_048_588 for t in topics}


def test_the_spark_engine_says_which_selected_topic_it_cannot_mirror(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len("src." + LONG) == MAX_TOPIC_NAME + 1
    config = parse(CONFIG, env={})
    flow = SparkFlow(config, config.flow("f"))
    flow._source = Topics({"orders": 1, LONG: 1})  # type: ignore[assignment]
    flow._target = Topics({})  # type: ignore[assignment]
    flow._batches = SimpleNamespace(limits={})  # type: ignore[assignment]
    flow._starts = SimpleNamespace(created=set())  # type: ignore[assignment]
    monkeypatch.setattr(job_module, "ensure_targets", lambda *a, **k: SyncResult((), ()))
    caplog.set_level(logging.INFO)
    mappings = flow._refresh()
    assert [m.source for m in mappings] == ["orders"]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(LONG in m for m in errors), errors
