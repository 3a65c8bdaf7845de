"""The canary prober counts unknown errors of its rounds and reads
(`mirror_unexpected_errors_total{where}`); fed failing fakes, no network."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry

from canary.prober import Prober
from mirror import config
from mirror.metrics import CanaryMetrics
from tests.unit.failing import TEXT, Broken, unexpected_errors


def test_the_canary_prober_counts_unknown_errors_of_rounds_and_reads():
    cfg = config.parse(TEXT, env={})
    registry = CollectorRegistry()
    prober = Prober(cfg, [], metrics=CanaryMetrics(registry))
    # One pass of each loop body `run` starts per flow: the invariant is that an error nobody
    # expected is counted (and the loop goes on) rather than ending the prober's thread.
    prober._round(Broken(threading.Event()))  # type: ignore[arg-type]
    stop = threading.Event()
    prober._read_loop(Broken(stop), stop)  # type: ignore[arg-type]
    assert unexpected_errors(registry, "canary_round") == 1.0
    assert unexpected_errors(registry, "canary_read") == 1.0
