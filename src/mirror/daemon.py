"""Assembles a mirror process: the flows' workers and what listens to them.

This is the one place that decides which listeners (offset map, metrics) a worker gets,
so the engine itself knows nothing of stores or Prometheus.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from .acks import AckListener
from .config import Config, FlowConfig
from .engine import Runner

log = logging.getLogger(__name__)


def run_flows(
    config: Config,
    flows: Sequence[FlowConfig],
    *,
    stop: threading.Event,
    until_caught_up: bool = False,
    metrics_port: int | None = None,
) -> None:
    def listeners(flow: FlowConfig) -> list[AckListener]:
        return []

    runner = Runner(config, flows, stop=stop, listeners=listeners, until_caught_up=until_caught_up)
    runner.run()
