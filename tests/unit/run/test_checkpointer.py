"""The group checkpointer counts an unknown error (`mirror_unexpected_errors_total{where}`)
and carries on; fed failing fakes, no network."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry

from mirror import config
from mirror.metrics import MirrorMetrics
from mirror.run.checkpointer import GroupCheckpointer

TEXT = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: [".*"]}, groups: ["app-.*"], checkpoint_interval: 0.01}
"""


def _value(registry: CollectorRegistry, where: str) -> float | None:
    return registry.get_sample_value("mirror_unexpected_errors_total", {"where": where})


class Broken:
    """Whatever is asked, fails with an error no handler knows; stops the loop after `times`."""

    def __init__(self, stop: threading.Event, times: int = 1) -> None:
        self.stop, self.left = stop, times
        self.flow = config.parse(TEXT, env={}).flows[0]

    def _fail(self, *args: object, **kwargs: object) -> None:
        self.left -= 1
        if self.left <= 0:
            self.stop.set()
        raise RuntimeError("a bug")

    topics = poll = send_round = _fail


def test_the_checkpointer_counts_an_unknown_error_and_carries_on():
    cfg = config.parse(TEXT, env={})
    registry = CollectorRegistry()
    stop = threading.Event()
    broken = Broken(stop, times=2)
    cp = GroupCheckpointer(cfg, cfg.flows[0], store=None, source=broken, target=broken, metrics=MirrorMetrics(registry))  # type: ignore[arg-type]
    assert _value(registry, "checkpointer") is None
    cp.run(stop)  # two ticks fail, the loop goes on after the first
    assert _value(registry, "checkpointer") == 2.0
    assert cp.last_error == "unexpected error"
