"""The group checkpointer counts an unknown error (`mirror_unexpected_errors_total{where}`)
and carries on; fed failing fakes, no network."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry

from mirror import config
from mirror.metrics import MirrorMetrics
from mirror.run.checkpointer import GroupCheckpointer
from tests.unit.failing import TEXT, Broken, unexpected_errors


def test_the_checkpointer_counts_an_unknown_error_and_carries_on():
    cfg = config.parse(TEXT, env={})
    registry = CollectorRegistry()
    stop = threading.Event()
    broken = Broken(stop, times=2)
    cp = GroupCheckpointer(cfg, cfg.flows[0], store=None, source=broken, target=broken, metrics=MirrorMetrics(registry))  # type: ignore[arg-type]
    assert unexpected_errors(registry, "checkpointer") is None
    cp.run(stop, first_after=0)  # two ticks fail, the loop goes on after the first
    assert unexpected_errors(registry, "checkpointer") == 2.0
    assert cp.last_error == "unexpected error"
