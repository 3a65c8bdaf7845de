"""Scraping a real /metrics endpoint and reading samples with prometheus-client's own parser."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families


def scrape(port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> dict[str, list[tuple[dict[str, str], float]]]:
    """sample name -> [(labels, value)] from http://host:port/metrics."""
    body = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def total(samples: dict, name: str, **labels: str) -> float | None:
    """Sum of the samples of `name` whose labels include `labels`; None when there are none."""
    rows = [v for lab, v in samples.get(name, []) if all(lab.get(k) == w for k, w in labels.items())]
    return sum(rows) if rows else None


def poll(check: Callable[[], object], timeout: float, interval: float = 0.5, what: str = "condition") -> object:
    """Call `check` until it returns something truthy or the deadline passes."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
