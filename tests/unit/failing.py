"""A port that fails with an error no handler knows, for the long-running loops' tests."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry

from mirror import config

TEXT = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: [".*"]}, groups: ["app-.*"], checkpoint_interval: 0.01}
"""


def unexpected_errors(registry: CollectorRegistry, where: str) -> float | None:
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
