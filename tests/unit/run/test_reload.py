"""A config reload's plan (which flows start, stop, restart, stay) and how a refused file changes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from mirror import config
from mirror.config import Config, FlowConfig
from mirror.errors import AuthorizationFailed, ConfigError
from mirror.metrics import ReloadMetrics
from mirror.run.reload import Reloader, plan_reload

BASE = """\
clusters:
  nyc: {{bootstrap: "a:1"}}
  sf: {{bootstrap: "b:1"{sf_extra}}}
  la: {{bootstrap: "c:1"}}
  tok: {{bootstrap: "d:1"}}
canary: {{topic: {canary}}}
offset_store: {{kind: sqlite, path: {store}}}
flows:
{flows}
"""


def cfg(*flows: str, sf_extra: str = "", canary: str = "mirror-canary", store: str = "/tmp/o.db") -> Config:
    lines = "\n".join(f"  - {f}" for f in flows)
    return config.parse(BASE.format(flows=lines, sf_extra=sf_extra, canary=canary, store=store), env={})


A = "{name: a, source: nyc, target: sf, topics: {include: [a]}}"
B = "{name: b, source: nyc, target: la, topics: {include: [b]}}"
B2 = "{name: b, source: nyc, target: la, topics: {include: [b, bb]}}"
C = "{name: c, source: sf, target: tok, topics: {include: [c]}}"
D = "{name: d, source: la, target: tok, topics: {include: [d]}}"


def plan(old: Config, new: Config, names: Sequence[str] = ()):
    return plan_reload(old, [f.name for f in old.select_flows(names)], new, new.select_flows(names))


def test_added_removed_changed_and_kept_flows():
    p = plan(cfg(A, B), cfg(A, B2, C))
    assert (p.added, p.removed, p.changed, p.kept) == (("c",), (), ("b",), ("a",))
    p = plan(cfg(A, B, C), cfg(B))
    assert (p.added, p.removed, p.changed, p.kept) == ((), ("a", "c"), (), ("b",))
    assert plan(cfg(A, B), cfg(A, B)).empty


def test_a_cluster_change_restarts_only_the_flows_that_use_it():
    # a writes to sf, c reads from it; b and d never touch it.
    p = plan(cfg(A, B, C, D), cfg(A, B, C, D, sf_extra=", timeout: 5s"))
    assert (p.changed, p.kept) == (("a", "c"), ("b", "d"))


def test_the_canary_topic_is_every_flows():
    assert plan(cfg(A, B), cfg(A, B, canary="other")).changed == ("a", "b")


def test_the_offset_store_and_metrics_need_a_restart_and_restart_no_flow():
    p = plan(cfg(A), cfg(A, store="/tmp/p.db"))
    assert p.needs_restart == ("offset_store",) and p.empty


def test_flow_selection_limits_the_plan_to_the_named_flows():
    p = plan(cfg(A, B), cfg(A, B2, C), names=["a", "b"])
    assert (p.added, p.changed, p.kept) == ((), ("b",), ("a",))


class Flows:
    """In-memory `FlowControl`: what the reloader asked, in order."""

    def __init__(self, refuse: Exception | None = None) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.refuse = refuse

    def check(self, config: Config, flows: Sequence[FlowConfig]) -> None:
        if self.refuse is not None:
            raise self.refuse

    def start(self, config: Config, flows: Sequence[FlowConfig]) -> None:
        self.calls.append(("start", [f.name for f in flows]))

    def stop(self, names: Sequence[str]) -> None:
        self.calls.append(("stop", list(names)))


def reloader(files: list[Config | Exception], flows: Flows, registry: CollectorRegistry, start: Config):
    def load(_path: str | Path) -> Config:
        item = files.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    clock = iter(range(100, 200))
    return Reloader(
        "mirror.yaml", start, (), flows, metrics=ReloadMetrics(registry), loader=load, clock=lambda: next(clock)
    )


def sample(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(name)


def test_a_reload_stops_removed_and_changed_flows_before_starting_new_ones():
    registry, flows = CollectorRegistry(), Flows()
    r = reloader([cfg(A, B2, C)], flows, registry, cfg(A, B))
    assert sample(registry, "mirror_config_reload_last_success_timestamp_seconds") == 100  # the load at start
    p = r.reload()
    assert p is not None and p.kept == ("a",)
    assert flows.calls == [("stop", ["b"]), ("start", ["b", "c"])]
    assert r.running == ["a", "b", "c"]
    assert sample(registry, "mirror_config_reload_successful") == 1
    assert sample(registry, "mirror_config_reload_last_success_timestamp_seconds") == 101
    assert sample(registry, "mirror_config_reload_failures_total") == 0


def test_a_refused_file_changes_nothing_and_is_counted(caplog):
    registry, flows = CollectorRegistry(), Flows()
    broken = config.ConfigProblems(
        [ConfigError("flows[1].source", "no cluster named 'x'"), ConfigError("flows[2].name", "duplicate")]
    )
    start = cfg(A, B)
    r = reloader([broken, cfg(A)], flows, registry, start)
    assert r.reload() is None
    assert flows.calls == [] and r.config is start and r.running == ["a", "b"]
    assert sample(registry, "mirror_config_reload_successful") == 0
    assert sample(registry, "mirror_config_reload_failures_total") == 1
    assert sample(registry, "mirror_config_reload_last_success_timestamp_seconds") == 100
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "flows[1].source: no cluster named 'x'" in logged and "flows[2].name: duplicate" in logged
    # The next good file is applied, from the file that was running (not the refused one).
    assert r.reload() is not None
    assert flows.calls == [("stop", ["b"]), ("start", [])]
    assert sample(registry, "mirror_config_reload_successful") == 1


def test_a_flow_that_cannot_start_refuses_the_whole_file():
    registry = CollectorRegistry()
    flows = Flows(refuse=AuthorizationFailed("Read on topic c refused"))
    r = reloader([cfg(A, C)], flows, registry, cfg(A))
    assert r.reload() is None
    assert flows.calls == []
    assert sample(registry, "mirror_config_reload_failures_total") == 1


def test_an_unknown_flow_name_refuses_the_file():
    registry, flows = CollectorRegistry(), Flows()
    start = cfg(A, B)
    r = Reloader("m.yaml", start, ["b"], flows, metrics=ReloadMetrics(registry), loader=lambda _p: cfg(A))
    assert r.reload() is None and flows.calls == []
    with pytest.raises(ConfigError):
        cfg(A).select_flows(["b"])


# --- review (flow-b): defects found, tests failing until fixed


def test_a_client_setting_librdkafka_refuses_is_a_refused_reload_not_a_crash():
    """A typo in a cluster's `client:` settings passes the loader; the reload's check then makes
    an AdminClient, which raises KafkaException (not a MirrorError) at construction, before
    any request. Reloader.reload catches only MirrorError, so the running daemon dies with a
    traceback (exit 1) instead of refusing the file and carrying on."""
    from mirror.run.flowset import FlowSet

    registry = CollectorRegistry()
    flowset = FlowSet(store=None, run_metrics=None, listeners=lambda f: [])
    start = cfg(A, B)
    # c is new and reads from sf, whose settings now hold a property librdkafka does not know
    # (a, which writes to sf, changes too); c is checked first, so no request is ever sent.
    new = cfg(C, A, B, sf_extra=', client: {"no.such.property": "x"}')
    r = Reloader("m.yaml", start, (), flowset, metrics=ReloadMetrics(registry), loader=lambda _p: new)
    assert r.reload() is None  # today: KafkaException escapes
    assert r.running == ["a", "b"]
    assert sample(registry, "mirror_config_reload_failures_total") == 1


def test_a_canary_setting_no_worker_reads_restarts_no_flow():
    """The module's rule: a flow is changed when anything that reaches its worker differs, and
    for the canary that is its topic. The whole CanaryConfig is compared, so a new probe
    interval (read by `mirror canary run` only) drains and restarts every flow."""
    p = plan(cfg(A, B), cfg(A, B, canary="mirror-canary, interval: 20s"))
    assert p.changed == () and p.kept == ("a", "b")


def test_a_target_client_setting_librdkafka_refuses_is_refused_before_its_flow_stops(monkeypatch):
    """The reload's check makes an Admin of each starting flow's source only. A setting of a
    cluster that is only a target passes it: the changed flow is drained and stopped, and
    its new worker dies in `open()` (KafkaException, a traceback), which then ends the
    whole process, although the docs say everything is checked before anything stops."""
    from mirror.run import flowset as flowset_module

    # The source answers and holds its topics (no request leaves this test): only the
    # target's settings are in question.
    monkeypatch.setattr(flowset_module, "check_literal_topics", lambda config, flows: None)
    monkeypatch.setattr(flowset_module, "ensure_canary_topics", lambda config, flows: None)
    registry = CollectorRegistry()
    flowset = flowset_module.FlowSet(store=None, run_metrics=None, listeners=lambda f: [])
    new = cfg(A, sf_extra=', client: {"no.such.property": "x"}')  # sf is only a's target
    r = Reloader("m.yaml", cfg(A), (), flowset, metrics=ReloadMetrics(registry), loader=lambda _p: new)
    try:
        assert r.reload() is None  # today: applied; a's new worker fails at once
        assert sample(registry, "mirror_config_reload_failures_total") == 1
    finally:
        flowset.stop_all()


def test_a_clusters_datacenter_label_restarts_no_flow():
    """Only `mirror failover` reads the label; every other cluster setting restarts its flows."""
    p = plan(cfg(A, C), cfg(A, C, sf_extra=", datacenter: west"))
    assert p.changed == () and p.kept == ("a", "c")
