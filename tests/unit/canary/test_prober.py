"""The canary prober counts unknown errors of its rounds and reads
(`mirror_unexpected_errors_total{where}`); fed failing fakes, no network."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry

from canary.prober import Prober
from mirror import config
from mirror.metrics import CanaryMetrics

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


def test_the_canary_prober_counts_unknown_errors_of_rounds_and_reads():
    cfg = config.parse(TEXT, env={})
    registry = CollectorRegistry()
    prober = Prober(cfg, [], metrics=CanaryMetrics(registry))
    prober._round(Broken(threading.Event()))  # type: ignore[arg-type]
    stop = threading.Event()
    prober._read_loop(Broken(stop), stop)  # type: ignore[arg-type]
    assert _value(registry, "canary_round") == 1.0
    assert _value(registry, "canary_read") == 1.0
