"""A real Prometheus scrapes `mirror monitor`'s exporter and the lag alerts fire.

The rules are the ones in configs/alerts.yaml with their windows shrunk from minutes to
seconds (the expressions themselves are untouched), so the test takes seconds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mirror import config as cfg
from mirror.monitor import exporter as monitor
from tests.integration.test_lag_monitor import _produce, _topic
from tests.support.metrics import poll
from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[2]

SHRINK = {"10m": "20s", "30s": "1s", "300": "5", "2m": "0s", "1m": "0s", "5m": "0s"}


def shrunk_rules(names: set[str]) -> dict:
    doc = yaml.safe_load((ROOT / "configs/alerts.yaml").read_text())
    rules = [r for g in doc["groups"] for r in g["rules"] if r["alert"] in names]
    assert {r["alert"] for r in rules} == names
    for r in rules:
        r["expr"] = re.sub(
            r"\[(\d+[smh]):(\d+[smh])\]", lambda mm: f"[{SHRINK[mm.group(1)]}:{SHRINK[mm.group(2)]}]", r["expr"]
        )
        r["expr"] = re.sub(r"> 300\b", "> 5", r["expr"])
        if "for" in r:
            r["for"] = SHRINK[r["for"]]
    return {"groups": [{"name": "mirror-test", "rules": rules}]}


def test_prometheus_fires_lag_alerts_when_the_mirror_is_stopped(clusters, write_config, unique, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    topic = f"orders-{unique}"
    _topic(src, topic, 2)
    path = write_config(
        f"""flows:
  - name: alert-{unique}
    source: src
    target: dst
    topics: {{include: ["{topic}"]}}
    commit_interval: 500ms
  - name: idle-{unique}
    source: dst
    target: src
    topics: {{include: ["nothing-{unique}"]}}
canary: {{topic: canary-{unique}}}
"""
    )
    config = cfg.load(path)
    # No mirror runs for this flow: 200 records wait, getting older every second.
    _produce(src, topic, {0: 100, 1: 100})
    rules = shrunk_rules({"MirrorLagGrowing", "MirrorFlowStopped"})
    assert (
        rules["groups"][0]["rules"][0]["expr"]
        .strip()
        .startswith("delta(max by (flow) (mirror_replication_lag_seconds)[20s:1s]) > 5")
    )
    collector = monitor.build(config, deadline=5.0, interval=1.0)  # gathered as often as Prometheus scrapes here
    server = monitor.serve(collector, 0)
    prom = PrometheusServer(tmp_path / "prom", [f"127.0.0.1:{server.server_port}"], rules)
    try:

        def firing() -> dict[str, set[str]]:
            out: dict[str, set[str]] = {}
            for a in prom.alerts():
                if a["state"] == "firing":
                    out.setdefault(a["labels"]["alertname"], set()).add(a["labels"]["flow"])
            return out

        got = poll(
            lambda: (lambda f: f if {"MirrorLagGrowing", "MirrorFlowStopped"} <= f.keys() else None)(firing()),
            timeout=120,
            what="lag alerts firing",
        )
        assert got["MirrorLagGrowing"] == {f"alert-{unique}"}  # the idle flow never alerts
        assert got["MirrorFlowStopped"] == {f"alert-{unique}"}
        # what Prometheus stored is what the exporter computed: exactly the 200 waiting records
        res = prom.api(f'query?query=sum(mirror_replication_lag_records{{flow="alert-{unique}"}})')["result"]
        assert float(res[0]["value"][1]) == 200
        res = prom.api(f'query?query=mirror_flow_status{{flow="alert-{unique}"}}')["result"]
        assert float(res[0]["value"][1]) == 3  # STOP: records waiting, no mirror in the group
    finally:
        prom.close()
        server.shutdown()
        collector.close()
