"""`mirror canary run` and `mirror canary once` as commands, without a mirror in between."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from mirror import config as cfg
from mirror.cli import main
from mirror.kafka import Admin
from tests.support.metrics import poll, scrape, total
from tests.support.prometheus import free_port

pytestmark = pytest.mark.timeout(180)


def _yaml(unique: str) -> str:
    return f"""flows:
  - name: c-{unique}
    source: src
    target: dst
    topics: {{include: ["none-{unique}"]}}
    refresh_interval: 1s  # probes are graded once a mirror could have seen the topic
canary: {{topic: canary-{unique}, interval: 1s, max_latency: 2s}}
"""


def test_once_without_a_mirror_reports_loss_and_exits_1(clusters, write_config, unique, capsys):
    path = write_config(_yaml(unique))
    rc = main(["canary", "once", "-c", str(path), "--json"])
    out = capsys.readouterr()
    assert rc == 1
    (r,) = json.loads(out.out)["flows"]
    # the canary topic was created on the source (one partition per broker) and probed
    assert f"canary-{unique}" in Admin("src", cfg.load(path).clusters["src"]).topics()
    assert r["sent"] == r["partitions"] == 1 and r["received"] == 0 and r["lost"] == 1 and not r["ok"]
    assert r["target_topic"] == f"src.canary-{unique}"
    assert "Error: canary probes lost" in out.err


def test_run_serves_canary_metrics_until_sigterm(clusters, write_config, unique, tmp_path):
    path = write_config(_yaml(unique))
    port = free_port()
    log = open(tmp_path / "canary.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mirror",
            "canary",
            "run",
            "-c",
            str(path),
            "--metrics-port",
            str(port),
            "--host",
            "127.0.0.1",
        ],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    flow = f"c-{unique}"
    try:

        def lost() -> float | None:
            try:
                return total(scrape(port, timeout=10), "mirror_canary_lost_total", flow=flow)
            except OSError:
                return None

        # nothing mirrors the canary here: every probe is lost after max_latency
        poll(lambda: (lost() or 0) >= 2, timeout=60, what="lost probes counted")
        s = scrape(port)
        assert total(s, "mirror_canary_sent_total", flow=flow) >= 2
        assert total(s, "mirror_canary_received_total", flow=flow) == 0
        assert total(s, "mirror_canary_max_latency_seconds", flow=flow) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
