"""The canary pages on loss only: not at a fresh start, not for a slow mirror.

One real Prometheus scrapes the canary (the page and ticket rules of configs/alerts.yaml
with their windows shrunk to seconds). Three phases on one flow:

1. `mirror run` and `mirror canary run` start together on a fresh canary topic, the
   mirror's first topic refresh before the prober's first probe and the next one 60 s
   later (the deliberately late refresh): nothing lost, nothing missing, probes received,
   the page expression 0.
2. The mirror stopped for longer than `max_latency`, then restarted: probes late, none
   missing, no page.
3. Probes really dropped (the target's canary records deleted with the delete-records
   call before the prober read them): missing counted, and the page fires.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.parse

import pytest
from prometheus_client import CollectorRegistry

from canary.prober import FlowProber
from mirror import config as cfg
from mirror import metrics as m
from mirror.kafka import Admin
from tests.integration.test_alerts_prometheus import shrunk_rules
from tests.support.metrics import poll, scrape, total
from tests.support.mirrorproc import MirrorProcess
from tests.support.prometheus import PrometheusServer, free_port

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

PAGE = "MirrorCanaryLoss"
TICKET = "MirrorCanaryLate"


def test_canary_pages_on_missing_probes_only(clusters, write_config, unique, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    flow = f"canary-{unique}"
    path = write_config(
        f"""flows:
  - name: {flow}
    source: src
    target: dst
    topics: {{include: ["nothing-{unique}"]}}
    refresh_interval: 60s  # a late refresh: probes of the first minute wait for the route and must not count as lost
    commit_interval: 500ms
canary: {{topic: probe-{unique}, interval: 500ms, max_latency: 4s}}
offset_store: {{kind: sqlite, path: {tmp_path / 'offsets.db'}}}
"""
    )
    config = cfg.load(path)
    canary_port, inproc_port = free_port(), free_port()
    rules = shrunk_rules({PAGE, TICKET})
    registry = CollectorRegistry()
    inproc_server = m.serve(inproc_port, "127.0.0.1", registry)
    prom = PrometheusServer(tmp_path / "prom", [f"127.0.0.1:{canary_port}", f"127.0.0.1:{inproc_port}"], rules)
    canary_log = open(tmp_path / "canary.log", "wb")
    # 1. Both processes on a canary topic that does not exist yet, in the unlucky order: the
    # mirror's first topic refresh happens before the prober creates the topic (the next
    # refresh is a minute away). Which process looks first used to decide the outcome.
    mirror = MirrorProcess(path, log=tmp_path / "mirror-1.log")
    poll(lambda: "running (started)" in mirror.output() or not mirror.alive(), timeout=60, what="the mirror started")
    assert mirror.alive(), mirror.output()[-2000:]
    canary = subprocess.Popen([sys.executable, "-m", "mirror", "-v", "canary", "run", "-c", str(path), "--metrics-port", str(canary_port), "--host", "127.0.0.1"],
                              cwd=tmp_path, stdout=canary_log, stderr=subprocess.STDOUT)
    prober: FlowProber | None = None
    try:
        def counts() -> dict[str, float]:
            try:
                s = scrape(canary_port, timeout=10)
            except OSError:
                return {}
            return {k: total(s, f"mirror_canary_{k}_total", flow=flow) or 0.0 for k in ("sent", "received", "lost", "late", "missing")}

        poll(lambda: counts().get("received", 0) >= 10, timeout=90, what="10 probes received through the mirror")
        c = counts()
        assert c["lost"] == 0 and c["missing"] == 0 and c["late"] == 0, c
        assert c["received"] > 0

        def expr(q: str) -> float:
            res = prom.api(f"query?query={urllib.parse.quote(q)}")["result"]
            return sum(float(r["value"][1]) for r in res)

        poll(lambda: expr(f'mirror_canary_received_total{{flow="{flow}"}}') >= 10, timeout=30, what="Prometheus scraped the canary")
        assert expr(f'sum by (flow) (increase(mirror_canary_missing_total{{flow="{flow}"}}[20s]))') == 0
        assert not [a for a in prom.alerts() if a["labels"]["alertname"] == PAGE]

        # 2. The mirror stopped for longer than max_latency (4 s), then restarted: late, not missing.
        mirror.stop()
        assert mirror.proc.returncode == 0, mirror.output()[-2000:]
        poll(lambda: counts().get("lost", 0) >= 2, timeout=30, what="probes not seen within max_latency while the mirror is down")
        mirror = MirrorProcess(path, log=tmp_path / "mirror-2.log")
        poll(lambda: counts().get("late", 0) >= 2, timeout=60, what="the held-back probes arriving late")
        received_before = counts()["received"]
        poll(lambda: counts()["received"] >= received_before + 3, timeout=30, what="probes flowing again")
        time.sleep(5)  # past max_latency: a probe overtaken in the catch-up would be missing by now
        c = counts()
        assert c["late"] >= 2 and c["missing"] == 0, c
        assert not [a for a in prom.alerts() if a["labels"]["alertname"] == PAGE]
        assert poll(lambda: [a for a in prom.alerts() if a["labels"]["alertname"] == TICKET and a["state"] == "firing"], timeout=30, what="the late ticket")

        # 3. Probes really dropped: an in-process prober sends, the mirror copies, the copies
        # are deleted on the target before the prober reads them, later probes overtake them.
        canary.send_signal(signal.SIGTERM)
        assert canary.wait(30) == 0
        dst = Admin("dst", config.clusters["dst"])
        target_topic = f"src.probe-{unique}"
        prober = FlowProber(config, config.flow(flow), metrics=m.CanaryMetrics(registry))
        prober.ledger.assume_route()  # the route was shown in phase 1
        start = dst.watermarks([(target_topic, 0)], committed_only=False)[(target_topic, 0)].high
        for _ in range(3):
            prober.send_round()
        poll(lambda: dst.watermarks([(target_topic, 0)], committed_only=False)[(target_topic, 0)].high >= start + 3, timeout=30, what="the 3 probes mirrored")
        end = dst.watermarks([(target_topic, 0)], committed_only=False)[(target_topic, 0)].high
        dst.delete_records({(target_topic, 0): end})
        # The reader stands where it stood before the 3 probes (it is only assigned now: an
        # assigned consumer would have prefetched them already) and finds them deleted.
        prober._reader.add({(target_topic, 0): start})
        deadline = time.monotonic() + 60
        while prober.ledger.counts.missing < 3 and time.monotonic() < deadline:
            prober.send_round()
            for _ in range(4):
                prober.poll(timeout=0.25)
        assert prober.ledger.counts.missing == 3, prober.ledger.counts
        assert prober.ledger.counts.received >= 1  # later probes did arrive: these were overtaken
        firing = poll(lambda: [a for a in prom.alerts() if a["labels"]["alertname"] == PAGE and a["state"] == "firing"], timeout=60, what="the loss page firing")
        assert {a["labels"]["flow"] for a in firing} == {flow}
    finally:
        if prober is not None:
            prober.close()
        if canary.poll() is None:
            canary.kill()
            canary.wait(10)
        canary_log.close()
        mirror.stop()
        prom.close()
        inproc_server.shutdown()
