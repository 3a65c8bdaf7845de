"""The monitor's text, rendered once per gather, and which gathers a scrape serves (no clusters)."""

from __future__ import annotations

import socket

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mirror.domain.lag import FlowLag, GroupLag, GroupPartitionLag, PartitionLag
from mirror.errors import ExitCode, MirrorError
from mirror.monitor.exporter import Gathered, pick, render, serve, text


def _lag(flow: str, lag_records: int) -> FlowLag:
    parts = [
        PartitionLag(
            "orders", "nyc.orders", 0, 0, 100, 100 - lag_records, 90, lag_records, 12.5, "record", status="STOP"
        ),
        PartitionLag('we"ird\\topic', 'nyc.we"ird\\topic', 1, 0, 7, 7, None, 0, None, "caught-up"),
    ]
    group = GroupLag(
        "billing",
        [GroupPartitionLag("orders", 0, 60, 100, 40)],
        [GroupPartitionLag("nyc.orders", 0, 50, 90, None)],
        10,
        0,
        30.0,
    )
    return FlowLag(flow, "nyc", "sf", 1000.0, parts, [group], False, status="STOP")


def _samples(body: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_rendered_text_is_what_prometheus_parses_one_header_per_family_across_flows() -> None:
    served = {name: Gathered(lag, 90.0, render(lag)) for name, lag in (("a", _lag("a", 30)), ("b", _lag("b", 5)))}
    body = text(served, now=100.0)
    assert body.count("# TYPE mirror_replication_lag_records gauge") == 1
    s = _samples(body)
    lag = {(lab["flow"], lab["topic"]): v for lab, v in s["mirror_replication_lag_records"]}
    assert lag == {("a", "orders"): 30, ("a", 'we"ird\\topic'): 0, ("b", "orders"): 5, ("b", 'we"ird\\topic'): 0}
    assert [v for lab, v in s["mirror_replication_lag_seconds"] if lab["flow"] == "a"] == [
        12.5
    ]  # unknown seconds: no sample
    assert {lab["flow"]: v for lab, v in s["mirror_flow_status"]} == {"a": 3, "b": 3}
    assert [v for lab, v in s["mirror_target_end_offset"] if lab["flow"] == "a"] == [90]  # no target topic: no sample
    assert {(lab["flow"], lab["cluster"]): v for lab, v in s["mirror_group_lag_records"]} == {
        ("a", "nyc"): 40,
        ("b", "nyc"): 40,
    }
    assert [v for lab, v in s["mirror_group_unmirrored_records"] if lab["flow"] == "b"] == [10]
    assert [v for lab, v in s["mirror_group_checkpoint_age_seconds"] if lab["flow"] == "b"] == [30.0]
    assert {lab["flow"]: v for lab, v in s["mirror_monitor_flow_up"]} == {"a": 1, "b": 1}
    assert {lab["flow"]: v for lab, v in s["mirror_monitor_gather_age_seconds"]} == {"a": 10.0, "b": 10.0}


def test_a_scrape_serves_fresh_gathers_and_leaves_out_failed_stale_and_missing_ones() -> None:
    ok, failed, old = _lag("ok", 1), None, _lag("old", 1)
    gathered = {
        "ok": Gathered(ok, 95.0, render(ok)),
        "failed": Gathered(failed, 99.0, {}),
        "old": Gathered(old, 40.0, render(old)),
    }
    served, left_out = pick(gathered, ["ok", "failed", "old", "new"], now=100.0, stale_after=53.0)
    assert list(served) == ["ok"]
    assert left_out == {"old": "stale", "new": "timeout"}  # a failed gather was counted when it failed
    s = _samples(text(served, now=100.0))
    assert {lab["flow"] for lab, _ in s["mirror_replication_lag_records"]} == {"ok"}
    assert {lab["flow"] for lab, _ in s["mirror_monitor_flow_up"]} == {"ok"}


def test_a_monitor_port_in_use_is_one_line_naming_it() -> None:
    """`mirror monitor --port P` with P taken: one line, exit 1, as `mirror run`'s exporter."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MirrorError) as failed:
            serve(None, port, "127.0.0.1")  # type: ignore[arg-type]  # never reached: the bind fails first
    assert failed.value.exit_code == ExitCode.FAILURE and f"127.0.0.1:{port}" in str(failed.value)


def test_every_flow_s_error_counters_are_exported_at_zero_before_the_first_error() -> None:
    """An alert on `increase(mirror_monitor_errors_total[5m])` cannot see a flow's first
    failures if the series is born at 1 (increase starts from its first sample), and a panel
    over it stays empty while all is well: each flow's series start at 0."""
    from prometheus_client import CollectorRegistry

    from mirror import metrics as m
    from mirror.config import parse
    from mirror.monitor.exporter import MonitorCollector

    config = parse(
        "clusters:\n  a: {bootstrap: '127.0.0.1:1'}\n  b: {bootstrap: '127.0.0.1:2'}\n"
        "flows:\n  - {name: one, source: a, target: b, topics: {include: [x]}}\n"
        "  - {name: two, source: b, target: a, topics: {include: [y]}}\n",
        env={},
    )
    registry = CollectorRegistry()
    MonitorCollector(config, metrics=m.MonitorMetrics(registry), registry=registry)
    zeros = {
        (s.labels["flow"], s.labels["reason"])
        for fam in registry.collect()
        for s in fam.samples
        if s.name == "mirror_monitor_errors_total" and s.value == 0
    }
    assert zeros == {(f, r) for f in ("one", "two") for r in m.MONITOR_ERROR_REASONS}
