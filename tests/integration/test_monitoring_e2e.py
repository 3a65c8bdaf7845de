"""Lag, status and canary against the real mirror (`mirror run`) on real clusters.

The issue's "Shown by": exact lag while the mirror is stopped, zero after it caught up;
canary latency with the mirror running, loss/lateness while it is stopped, duplicates.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import CollectorRegistry

from canary.prober import Prober
from mirror import config as cfg
from mirror import metrics as m
from mirror.cli import main
from mirror.kafka import Admin
from mirror.monitor import exporter as monitor
from tests.integration.test_lag_monitor import _produce, _topic
from tests.support.metrics import poll, scrape, total
from tests.support.mirrorproc import MirrorProcess as Mirror

pytestmark = pytest.mark.timeout(300)


def _flow_yaml(unique: str, topic: str, canary: str = "", extra: str = "") -> str:
    return f"""flows:
  - name: f-{unique}
    source: src
    target: dst
    consumer_group: mirror-{unique}
    refresh_interval: 1s
    commit_interval: 500ms
    topics: {{include: ["{topic}"]}}
offset_store: {{kind: sqlite, path: offsets-{unique}.db}}
canary: {{topic: {canary or "canary-" + unique}, interval: 1s, max_latency: 4s}}
{extra}"""


def _caught_up(path: Path) -> None:
    mp = Mirror(path, "--until-caught-up")
    try:
        rc = mp.wait(180)
        assert rc == 0, mp.output()
    finally:
        mp.stop()


def test_lag_is_exact_while_the_mirror_is_stopped_and_zero_after_catch_up(
    clusters, write_config, unique, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    topic = f"orders-{unique}"
    _topic(src, topic, 3)
    _produce(src, topic, {0: 10, 1: 10, 2: 10})
    path = write_config(_flow_yaml(unique, topic))
    config = cfg.load(path)
    flow = f"f-{unique}"
    _caught_up(path)  # the mirror ran, caught up and is stopped now

    _produce(src, topic, {0: 400, 1: 350, 2: 250}, ts_ms=int(time.time() * 1000))
    collector = monitor.build(config, deadline=8.0, interval=0.5)
    server = monitor.serve(collector, 0)
    try:
        port = server.server_port
        s = scrape(port)
        assert total(s, "mirror_replication_lag_records", flow=flow) == 1000
        age1 = max(v for lab, v in s["mirror_replication_lag_seconds"] if lab["flow"] == flow)
        # three observations (gathered every 0.5 s) spanning 3 x commit_interval, position still, nobody in the group:
        # STOP
        poll(lambda: total(scrape(port), "mirror_flow_status", flow=flow) == 3, timeout=30, what="status STOP")
        s = scrape(port)
        assert total(s, "mirror_replication_lag_records", flow=flow) == 1000
        age2 = max(v for lab, v in s["mirror_replication_lag_seconds"] if lab["flow"] == flow)
        assert age2 > age1

        _caught_up(path)
        s = poll(
            lambda: (lambda s: s if total(s, "mirror_replication_lag_records", flow=flow) == 0 else None)(scrape(port)),
            timeout=20,
            what="lag 0 gathered",
        )
        assert total(s, "mirror_replication_lag_seconds", flow=flow) == 0
        assert total(s, "mirror_flow_status", flow=flow) == 0
        assert total(s, "mirror_target_end_offset", flow=flow, topic=topic) == 1030
    finally:
        server.shutdown()
        collector.close()


def _value(registry: CollectorRegistry, name: str, flow: str) -> float:
    return registry.get_sample_value(name, {"flow": flow}) or 0.0


def test_canary_latency_loss_lateness_and_duplicates_through_the_mirror(
    clusters, write_config, unique, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    canary_topic = f"canary-{unique}"
    _topic(src, canary_topic, 3)  # probes go to EACH partition
    path = write_config(_flow_yaml(unique, f"none-{unique}", canary_topic))
    config = cfg.load(path)
    flow = f"f-{unique}"
    target = f"src.{canary_topic}"
    dst_admin = Admin("dst", config.clusters["dst"])

    mirror = Mirror(path)
    registry = CollectorRegistry()
    stop = threading.Event()
    prober = Prober(config, config.flows, metrics=m.CanaryMetrics(registry))
    runner = threading.Thread(target=prober.run, args=(stop,), daemon=True)
    try:
        poll(lambda: target in dst_admin.topics(), timeout=60, what=f"{target} created by the mirror")
        runner.start()
        # mirror running: probes arrive, none lost
        poll(lambda: _value(registry, "mirror_canary_received_total", flow) >= 9, timeout=60, what="9 probes received")
        assert _value(registry, "mirror_canary_lost_total", flow) == 0
        assert _value(registry, "mirror_canary_duplicated_total", flow) == 0
        count = registry.get_sample_value("mirror_canary_latency_seconds_count", {"flow": flow})
        lat_sum = registry.get_sample_value("mirror_canary_latency_seconds_sum", {"flow": flow})
        assert count >= 9 and 0 < lat_sum / count < config.canary.max_latency
        assert _value(registry, "mirror_canary_sent_total", flow) >= 9

        # mirror stopped longer than max_latency: probes are counted lost
        mirror.stop()
        received = _value(registry, "mirror_canary_received_total", flow)
        poll(lambda: _value(registry, "mirror_canary_lost_total", flow) >= 3, timeout=30, what="probes counted lost")
        # back up: the stranded probes arrive late, and are told apart from loss
        mirror = Mirror(path)
        poll(lambda: _value(registry, "mirror_canary_late_total", flow) >= 3, timeout=60, what="late probes")
        assert _value(registry, "mirror_canary_received_total", flow) > received

        # a record the mirror wrote twice (as after a SIGKILL before its commit): counted duplicated
        c = Consumer({"bootstrap.servers": dst, "group.id": f"dup-{unique}", "enable.auto.commit": False})
        end = c.get_watermark_offsets(TopicPartition(target, 0), timeout=10)[1]
        c.assign([TopicPartition(target, 0, end - 1)])
        msg = poll(lambda: c.poll(1.0), timeout=20, what="a mirrored probe")
        c.close()
        p = Producer({"bootstrap.servers": dst})
        p.produce(target, value=msg.value(), key=msg.key(), partition=0)
        assert p.flush(10) == 0
        poll(
            lambda: _value(registry, "mirror_canary_duplicated_total", flow) >= 1, timeout=20, what="duplicate counted"
        )
        stop.set()
        runner.join(30)

        # one round for scripts: all back, exit 0
        assert main(["canary", "once", "-c", str(path), "--json"]) == 0
        (r,) = json.loads(capsys.readouterr().out)["flows"]
        assert r["ok"] and r["sent"] == 3 and r["received"] == 3 and r["lost"] == 0
        assert r["latency_seconds"]["max"] < config.canary.max_latency
    finally:
        stop.set()
        if runner.is_alive():
            runner.join(30)
        mirror.stop()


def test_deleted_canary_topic_is_recreated_and_the_restart_is_not_loss(
    clusters, write_config, unique, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    canary_topic = f"canary-{unique}"
    _topic(src, canary_topic, 2)
    path = write_config(_flow_yaml(unique, f"none-{unique}", canary_topic))
    config = cfg.load(path)
    flow = f"f-{unique}"
    src_admin = Admin("src", config.clusters["src"])
    dst_admin = Admin("dst", config.clusters["dst"])
    mirror = Mirror(path)
    registry = CollectorRegistry()
    stop = threading.Event()
    prober = Prober(config, config.flows, metrics=m.CanaryMetrics(registry))
    runner = threading.Thread(target=prober.run, args=(stop,), daemon=True)
    try:
        poll(lambda: f"src.{canary_topic}" in dst_admin.topics(), timeout=60, what="target canary topic")
        runner.start()
        poll(
            lambda: _value(registry, "mirror_canary_received_total", flow) >= 4,
            timeout=60,
            what="probes before deletion",
        )
        src_admin.delete_topics([canary_topic])
        poll(
            lambda: _value(registry, "mirror_canary_runs_total", flow) >= 2,
            timeout=60,
            what="a new run after recreation",
        )
        assert canary_topic in src_admin.topics()  # recreated by the prober
        after = _value(registry, "mirror_canary_received_total", flow)
        poll(
            lambda: _value(registry, "mirror_canary_received_total", flow) >= after + 3,
            timeout=90,
            what="probes of the new run through the mirror",
        )
        assert _value(registry, "mirror_canary_lost_total", flow) == 0
    finally:
        stop.set()
        if runner.is_alive():
            runner.join(30)
        mirror.stop()


def test_mirror_run_metrics_port_counts_acked_records_and_client_figures(
    clusters, write_config, unique, tmp_path, monkeypatch
):
    from tests.support.prometheus import free_port

    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    topic = f"orders-{unique}"
    _topic(src, topic, 2)
    _produce(src, topic, {0: 300, 1: 200})  # key "i" + 10-byte value each
    key_bytes = sum(len(str(i)) for i in range(300)) + sum(len(str(i)) for i in range(200))
    path = write_config(_flow_yaml(unique, topic))
    port = free_port()
    mirror = Mirror(path, "--metrics-port", str(port))
    flow = f"f-{unique}"
    try:

        def counted() -> dict | None:
            try:
                s = scrape(port, timeout=5)
            except OSError:
                return None
            return s if total(s, "mirror_records_total", flow=flow, topic=topic) == 500 else None

        s = poll(counted, timeout=90, what=f"500 records counted\n{mirror.output()}")
        assert total(s, "mirror_bytes_total", flow=flow, topic=topic) == 500 * 10 + key_bytes
        # librdkafka statistics of the mirror's own clients (emitted every 15 s)
        s = poll(
            lambda: (lambda s: s if total(s, "mirror_client_rtt_avg_seconds", flow=flow, role="producer") else None)(
                scrape(port)
            ),
            timeout=60,
            interval=1,
            what="client statistics",
        )
        assert total(s, "mirror_client_batch_size_avg_bytes", flow=flow, role="producer") > 0
        assert total(s, "mirror_client_requests_in_flight", flow=flow, role="consumer") is not None
    finally:
        mirror.stop()


def test_sigkill_before_commit_shows_up_as_canary_duplicates(clusters, write_config, unique, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    canary_topic = f"canary-{unique}"
    _topic(src, canary_topic, 2)
    # Commits every 60 s only: a SIGKILL loses the commit, not the records already written. No
    # provenance headers: a restart cannot prove its copies there, so it copies them again
    # (with them, it skips what the target holds and the canary sees no duplicate to count).
    body = _flow_yaml(unique, f"none-{unique}", canary_topic).replace(
        "commit_interval: 500ms", "commit_interval: 60s\n    provenance_headers: false"
    )
    path = write_config(body)
    config = cfg.load(path)
    flow = f"f-{unique}"
    dst_admin = Admin("dst", config.clusters["dst"])
    mirror = Mirror(path)
    registry = CollectorRegistry()
    stop = threading.Event()
    prober = Prober(config, config.flows, metrics=m.CanaryMetrics(registry))
    runner = threading.Thread(target=prober.run, args=(stop,), daemon=True)
    try:
        poll(lambda: f"src.{canary_topic}" in dst_admin.topics(), timeout=60, what="target canary topic")
        runner.start()
        poll(lambda: _value(registry, "mirror_canary_received_total", flow) >= 6, timeout=60, what="probes received")
        assert _value(registry, "mirror_canary_duplicated_total", flow) == 0
        mirror.proc.kill()  # SIGKILL: no drain, no commit
        mirror.proc.wait(30)
        mirror.stop()
        mirror = Mirror(path)  # re-reads from the last commit: everything since the start
        poll(
            lambda: _value(registry, "mirror_canary_duplicated_total", flow) >= 6,
            timeout=90,
            what="re-mirrored probes counted duplicated",
        )
        # The restarted mirror waits for the killed member's session to expire, so probes
        # sent meanwhile may exceed max_latency: counted lost, then late when they arrive.
        # Nothing is truly missing: every lost probe turns up.
        poll(
            lambda: (
                _value(registry, "mirror_canary_late_total", flow) == _value(registry, "mirror_canary_lost_total", flow)
            ),
            timeout=60,
            what="every lost probe arrived late",
        )
    finally:
        stop.set()
        if runner.is_alive():
            runner.join(30)
        mirror.stop()
