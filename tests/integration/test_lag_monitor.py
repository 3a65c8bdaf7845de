"""Lag math, `mirror lag` and the monitor's /metrics on real clusters.

These tests stand in for the mirror with a consumer group they commit themselves (the
mirror's group `flow.group_id`), so the lag arithmetic is proven against real offsets
and real record timestamps, independent of the engine.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from mirror import config as cfg
from mirror.cli import main
from mirror.devenv.common import port_free
from mirror.errors import MirrorError
from mirror.kafka import Admin
from mirror.monitor import exporter as monitor
from tests.support.metrics import poll, scrape, total

pytestmark = pytest.mark.timeout(240)


def _topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def _produce(bootstrap: str, topic: str, per_partition: dict[int, int], ts_ms: int | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for part, n in per_partition.items():
        for i in range(n):
            p.produce(topic, value=b"x" * 10, key=str(i).encode(), partition=part, timestamp=ts_ms or 0)
    assert p.flush(30) == 0


def commit(admin: Admin, group: str, offsets: dict) -> None:
    """Commit group offsets, retrying while a fresh cluster's coordinator settles."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return admin.alter_group_offsets(group, offsets)
        except MirrorError as exc:
            if time.monotonic() > deadline or "coordinator" not in str(exc).lower():
                raise
            time.sleep(0.5)


def _config(write_config, unique: str, extra_flow: str = "", extra_top: str = "") -> tuple:
    path = write_config(
        f"""flows:
  - name: lagtest-{unique}
    source: src
    target: dst
    topics: {{include: ["orders-{unique}"]}}
    consumer_group: mirror-test-{unique}
    groups: ["billing-{unique}"]
{extra_flow}offset_store: {{kind: sqlite, path: offsets-{unique}.db}}
canary: {{topic: canary-{unique}}}
{extra_top}"""
    )
    return path, cfg.load(path)


def test_lag_records_seconds_and_group_readiness(clusters, write_config, unique, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    topic = f"orders-{unique}"
    _topic(src, topic, 3)
    old = int(time.time() * 1000) - 120_000  # two minutes old
    _produce(src, topic, {0: 400, 1: 350, 2: 250}, ts_ms=old)
    path, config = _config(write_config, unique)
    flow = config.flows[0]
    admin = Admin("src", config.clusters["src"])
    # the "mirror" has acked 100 records of partition 0 and all of partition 2; never touched 1
    commit(admin, flow.group_id, {(topic, 0): 100, (topic, 2): 250})
    # a consumer group of the flow: read 300 of partition 0
    commit(admin, f"billing-{unique}", {(topic, 0): 300})

    assert main(["lag", "-c", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (fl,) = doc["flows"]
    parts = {(p["source_topic"], p["partition"]): p for p in fl["partitions"]}
    assert parts[(topic, 0)]["lag_records"] == 300
    assert parts[(topic, 1)]["lag_records"] == 350 and parts[(topic, 1)]["position"] is None
    assert parts[(topic, 2)]["lag_records"] == 0 and parts[(topic, 2)]["lag_seconds"] == 0
    assert fl["lag_records"] == 650
    for key in [(topic, 0), (topic, 1)]:
        assert parts[key]["lag_basis"] == "record"
        assert 115 <= parts[key]["lag_seconds"] <= 200, parts[key]
    assert parts[(topic, 0)]["target_end"] is None  # never mirrored: no target topic
    (g,) = fl["groups"]
    assert g["group"] == f"billing-{unique}"
    assert g["source_lag"] == 100  # 300 of 400 read
    assert g["unmirrored"] == 100  # 300..399: not read, not on the target
    assert g["target_members"] == 0

    # human output names the same numbers
    assert main(["lag", "-c", str(path)]) == 0
    text = capsys.readouterr().out
    assert f"flow lagtest-{unique}: src -> dst" in text and "lag 650 records" in text


def test_lag_seconds_falls_back_to_the_oldest_existing_record(
    clusters, write_config, unique, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    topic = f"orders-{unique}"
    _topic(src, topic, 1)
    now = int(time.time() * 1000)
    _produce(src, topic, {0: 10}, ts_ms=now - 600_000)  # ten minutes old, about to expire
    _produce(src, topic, {0: 10}, ts_ms=now - 60_000)  # one minute old
    path, config = _config(write_config, unique)
    admin = Admin("src", config.clusters["src"])
    commit(admin, config.flows[0].group_id, {(topic, 0): 5})
    admin.delete_records({(topic, 0): 10})  # retention took the first ten, 5..9 were never mirrored
    assert main(["lag", "-c", str(path), "--json"]) == 0
    (p,) = json.loads(capsys.readouterr().out)["flows"][0]["partitions"]
    assert p["lag_records"] == 10  # only what still exists
    assert 55 <= p["lag_seconds"] <= 120 and p["lag_basis"] == "record"
    assert p["status"] == "ERR"  # records expired before they were mirrored


def test_monitor_metrics_sum_to_exact_lag_and_recover(clusters, write_config, unique, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    topic = f"orders-{unique}"
    _topic(src, topic, 4)
    _produce(src, topic, {0: 250, 1: 250, 2: 250, 3: 250}, ts_ms=int(time.time() * 1000) - 30_000)
    _path, config = _config(write_config, unique)
    flow = config.flows[0]
    collector = monitor.build(config, deadline=10.0, interval=0.5)
    server = monitor.serve(collector, 0)
    try:
        port = server.server_port
        s1 = scrape(port)  # the first scrape waits for the first gather
        assert total(s1, "mirror_replication_lag_records", flow=flow.name) == 1000
        age1 = max(v for lab, v in s1["mirror_replication_lag_seconds"] if lab["flow"] == flow.name)
        assert age1 >= 29
        # the next gathers, in the background: nothing mirrored, the oldest waiting record only gets older
        s2 = poll(
            lambda: (
                lambda s: (
                    s
                    if max(v for lab, v in s["mirror_replication_lag_seconds"] if lab["flow"] == flow.name) > age1
                    else None
                )
            )(scrape(port)),
            timeout=20,
            what="a newer gather",
        )
        assert total(s2, "mirror_monitor_flow_up", flow=flow.name) == 1
        assert 0 <= total(s2, "mirror_monitor_gather_age_seconds", flow=flow.name) < 10
        # the mirror catches up: commits the end of every partition
        commit(Admin("src", config.clusters["src"]), flow.group_id, {(topic, p): 250 for p in range(4)})
        s3 = poll(
            lambda: (lambda s: s if total(s, "mirror_replication_lag_records", flow=flow.name) == 0 else None)(
                scrape(port)
            ),
            timeout=20,
            what="lag 0",
        )
        assert total(s3, "mirror_replication_lag_seconds", flow=flow.name) == 0
        assert total(s3, "mirror_flow_status", flow=flow.name) == 0
    finally:
        server.shutdown()
        collector.close()


def test_a_scrape_serves_the_newest_gather_at_once_and_leaves_a_stale_one_out(
    clusters, write_config, unique, tmp_path, monkeypatch
):
    """Gathers run on their interval, not per scrape: scrapes in between are served at once
    from the newest gather; one older than `stale_after` is left out and counted."""
    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    topic = f"orders-{unique}"
    _topic(src, topic, 2)
    _produce(src, topic, {0: 3, 1: 4})
    _path, config = _config(write_config, unique)
    flow = config.flows[0].name
    collector = monitor.build(
        config, deadline=10.0, interval=600, stale_after=4.0
    )  # one gather, then none for 10 minutes
    server = monitor.serve(collector, 0)
    try:
        port = server.server_port
        assert total(scrape(port), "mirror_replication_lag_records", flow=flow) == 7
        gathers = total(scrape(port), "mirror_monitor_gather_seconds_count", flow=flow)
        for _ in range(3):
            started = time.monotonic()
            s = scrape(port)
            assert time.monotonic() - started < 1.0
            assert total(s, "mirror_replication_lag_records", flow=flow) == 7
        assert total(s, "mirror_monitor_gather_seconds_count", flow=flow) == gathers == 1  # scrapes gathered nothing
        s = poll(
            lambda: (lambda s: s if total(s, "mirror_replication_lag_records", flow=flow) is None else None)(
                scrape(port)
            ),
            timeout=15,
            what="the gather gone stale",
        )
        assert total(s, "mirror_monitor_flow_up", flow=flow) is None
        assert total(s, "mirror_monitor_errors_total", flow=flow, reason="stale") >= 1
    finally:
        server.shutdown()
        collector.close()


def test_dead_cluster_never_hangs_the_scrape(clusters, write_config, unique, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    _topic(src, f"orders-{unique}", 1)
    dead = next(p for p in range(47000, 48000) if port_free(p))
    path = write_config(
        f"""  ghost:
    bootstrap: 127.0.0.1:{dead}
    timeout: 2s
flows:
  - name: live-{unique}
    source: src
    target: dst
    topics: {{include: ["orders-{unique}"]}}
  - name: dead-{unique}
    source: ghost
    target: dst
    topics: {{include: [".*"]}}
canary: {{topic: canary-{unique}}}
"""
    )
    config = cfg.load(path)
    collector = monitor.build(config, deadline=4.0, interval=0.5)
    server = monitor.serve(collector, 0)
    try:
        for _ in range(2):
            started = time.monotonic()
            s = scrape(server.server_port, timeout=20)
            assert time.monotonic() - started < 5  # at most the first gathers' wait
            assert total(s, "mirror_replication_lag_records", flow=f"live-{unique}") == 0
            assert total(s, "mirror_flow_status", flow=f"live-{unique}") == 0
            assert total(s, "mirror_replication_lag_records", flow=f"dead-{unique}") is None
            assert total(s, "mirror_flow_status", flow=f"dead-{unique}") is None
        # every failed gather is counted, and the flow's thread goes on trying
        poll(
            lambda: (total(scrape(server.server_port), "mirror_monitor_errors_total", flow=f"dead-{unique}") or 0) >= 2,
            timeout=30,
            what="two failed gathers",
        )
    finally:
        server.shutdown()
        collector.close()


def test_checkpoint_age_and_group_lag_on_metrics(clusters, write_config, unique, tmp_path, monkeypatch):
    from mirror.domain.offsetmap import Checkpoint
    from mirror.store import open_store

    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    topic = f"orders-{unique}"
    _topic(src, topic, 1)
    _produce(src, topic, {0: 50})
    _path, config = _config(write_config, unique)
    flow = config.flows[0]
    group = f"billing-{unique}"
    commit(Admin("src", config.clusters["src"]), group, {(topic, 0): 20})
    store = open_store(config.offset_store)
    store.write_checkpoints(flow.name, [Checkpoint(group, topic, 0, 20, 20, int(time.time() * 1000) - 120_000)])
    collector = monitor.build(config, deadline=10.0, store=store)
    server = monitor.serve(collector, 0)
    try:
        s = scrape(server.server_port)
        age = total(s, "mirror_group_checkpoint_age_seconds", flow=flow.name, group=group)
        assert 119 <= age <= 180
        assert total(s, "mirror_group_lag_records", flow=flow.name, group=group, cluster="src") == 30
        assert total(s, "mirror_group_unmirrored_records", flow=flow.name, group=group) == 30  # no mirror ever ran
    finally:
        server.shutdown()
        collector.close()
        store.close()


def test_monitor_command_serves_until_sigterm(clusters, write_config, unique, tmp_path):
    import signal
    import subprocess
    import sys

    from tests.support.prometheus import free_port

    src = clusters.bootstrap("src")
    topic = f"orders-{unique}"
    _topic(src, topic, 2)
    _produce(src, topic, {0: 7, 1: 5})
    path, _config_ = _config(write_config, unique)
    port = free_port()
    log = open(tmp_path / "monitor.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mirror", "monitor", "-c", str(path), "--port", str(port), "--host", "127.0.0.1"],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def lag() -> float | None:
            try:
                return total(scrape(port, timeout=15), "mirror_replication_lag_records", flow=f"lagtest-{unique}")
            except OSError:
                return None

        assert poll(lag, timeout=60, what="monitor answering") == 12
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()


def test_lag_watch_refreshes_and_judges_a_stopped_mirror(clusters, write_config, unique, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    topic = f"orders-{unique}"
    _topic(src, topic, 1)
    _produce(src, topic, {0: 30})
    path, config = _config(write_config, unique)
    commit(Admin("src", config.clusters["src"]), config.flows[0].group_id, {(topic, 0): 10})
    # commit_interval 1s by default: "not moving" needs 3 observations over >= 3 s
    assert main(["lag", "-c", str(path), "--watch", "--interval", "0.7", "--count", "7", "--json"]) == 0
    rounds = [json.loads(line)["flows"][0] for line in capsys.readouterr().out.splitlines()]
    assert len(rounds) == 7
    assert all(r["lag_records"] == 20 for r in rounds)
    assert rounds[0]["status"] == "OK" and rounds[0]["partitions"][0]["reason"].startswith("behind; not enough")
    assert rounds[-1]["status"] == "STOP" and rounds[-1]["mirror_active"] is False
    ages = [r["lag_seconds"] for r in rounds]
    assert ages == sorted(ages) and ages[-1] > ages[0]


def test_source_cluster_going_down_mid_run_leaves_series_out_then_recovers(
    clusters, write_config, unique, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    src = clusters.bootstrap("src")
    topic = f"orders-{unique}"
    _topic(src, topic, 1)
    _produce(src, topic, {0: 25})
    _path, config = _config(write_config, unique)
    flow = config.flows[0].name
    collector = monitor.build(config, deadline=4.0, interval=0.5)
    server = monitor.serve(collector, 0)
    try:
        port = server.server_port
        assert total(scrape(port), "mirror_replication_lag_records", flow=flow) == 25
        clusters.stop("src")
        try:
            # the next gather fails (bounded by the 4 s timeout, not librdkafka's retries): left out
            started = time.monotonic()
            s = poll(
                lambda: (lambda s: s if total(s, "mirror_replication_lag_records", flow=flow) is None else None)(
                    scrape(port, timeout=30)
                ),
                timeout=30,
                what="series left out",
            )
            assert time.monotonic() - started < 12
            for _ in range(2):
                started = time.monotonic()
                s = scrape(port, timeout=30)
                assert time.monotonic() - started < 1.0  # served at once, whatever the cluster does
                assert total(s, "mirror_replication_lag_records", flow=flow) is None
                assert total(s, "mirror_flow_status", flow=flow) is None
                assert total(s, "mirror_monitor_flow_up", flow=flow) is None
            assert total(s, "mirror_monitor_errors_total", flow=flow, reason="unreachable") >= 1
        finally:
            clusters.start("src")
        poll(
            lambda: total(scrape(port, timeout=30), "mirror_replication_lag_records", flow=flow) == 25,
            timeout=90,
            what="lag back after the cluster returned",
        )
    finally:
        server.shutdown()
        collector.close()
