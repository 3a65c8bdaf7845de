"""A flow's controls on real clusters: where it starts (`start_from`) and how fast it reads
(`max_bytes_per_second`), with nothing lost or copied twice when the cap is lifted."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from mirror.cli import main
from mirror.config import load as load_config
from mirror.kafka import Admin
from mirror.monitor.gather import FlowProbe
from tests.support.kafkautil import create_topic, end_offsets, group_offsets, producer, read_topic, wait_for
from tests.support.metrics import scrape, total
from tests.support.mirrorproc import MirrorProcess
from tests.support.prometheus import free_port


def flow_yaml(unique: str, topic: str, extra: str = "") -> str:
    return f"""\
flows:
  - name: f-{unique}
    source: src
    target: dst
    consumer_group: mirror-{unique}
    refresh_interval: 1s
    commit_interval: 500ms
    topics: {{include: ["{topic}"]}}
{extra}offset_store: {{kind: sqlite, path: offsets-{unique}.db}}
"""


def produce(
    bootstrap: str, topic: str, numbers: range, partitions: int, *, size: int = 16, ts: int | None = None
) -> None:
    p = producer(bootstrap)
    for i in numbers:
        while True:
            try:
                kw = {"timestamp": ts} if ts is not None else {}
                p.produce(topic, key=b"k%d" % i, value=b"%d:" % i + b"x" * size, partition=i % partitions, **kw)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0


def numbers(records: dict) -> list[int]:
    return sorted(int(r.value.split(b":")[0]) for recs in records.values() for r in recs)


def test_start_from_latest_copies_only_records_written_after_the_flow_started(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t = f"late-{unique}"
    create_topic(src, t, 2)
    produce(src, t, range(0, 100), 2)
    cfg = write_config(flow_yaml(unique, t, "    start_from: latest\n"))
    with MirrorProcess(cfg) as m:
        # The start is committed as soon as it is chosen: the end of each partition as assigned.
        wait_for(
            lambda: group_offsets(src, f"mirror-{unique}", t, 2) == {0: 50, 1: 50},
            120,
            "the start committed",
            detail=m.output,
        )
        produce(src, t, range(100, 200), 2)
        wait_for(
            lambda: sum(end_offsets(dst, f"src.{t}", 2).values()) >= 100,
            120,
            "the new records mirrored",
            detail=m.output,
        )
        m.stop()
    # A restart never chooses again: records written while it was stopped are mirrored.
    produce(src, t, range(200, 220), 2)
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    assert numbers(read_topic(dst, f"src.{t}", 2)) == list(range(100, 220))


def test_start_from_a_relative_time_starts_at_the_first_record_that_recent(clusters, write_config, unique, capsys):
    """And the records before the start are a miss for a group that has not read them, in
    `mirror lag` and in a failover plan."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t = f"recent-{unique}"
    create_topic(src, t, 1)
    now = int(time.time() * 1000)
    produce(src, t, range(0, 40), 1, ts=now - 3 * 3_600_000)  # 3 h old: before the start
    produce(src, t, range(40, 70), 1, ts=now - 30 * 60_000)  # 30 min old: copied
    produce(src, t, range(70, 80), 1)
    cfg = write_config(flow_yaml(unique, t, f'    start_from: -1h\n    groups: ["app-{unique}"]\n'))
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    assert numbers(read_topic(dst, f"src.{t}", 1)) == list(range(40, 80))
    assert group_offsets(src, f"mirror-{unique}", t, 1) == {0: 80}

    config = load_config(cfg)
    Admin("src", config.clusters["src"]).alter_group_offsets(f"app-{unique}", {(t, 0): 10})
    capsys.readouterr()
    assert main(["lag", "-c", str(cfg), "--json"]) == 0
    [group] = json.loads(capsys.readouterr().out)["flows"][0]["groups"]
    assert group["unmirrored"] == 30  # 10..39: never mirrored, not read by the group
    args = ["failover", "plan", "-c", str(cfg), "--flow", f"f-{unique}", "--group", f"app-{unique}"]
    assert main([*args, "--translate", "--json"]) == 0
    [part] = json.loads(capsys.readouterr().out)["partitions"]
    assert (part["target_offset"], part["unmirrored"]) == (0, 30)


def _target_bytes(dst: str, topic: str, record_bytes: int) -> int:
    return sum(end_offsets(dst, topic, 1).values()) * record_bytes


def test_a_capped_flow_reads_at_its_cap_is_behind_not_stalled_and_catches_up_once_lifted(
    clusters, write_config, unique, capsys
):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t = f"capped-{unique}"
    create_topic(src, t, 1)
    size = 1000  # key "k%d" + value "%d:" + size bytes: fixed width below
    count = 60_000  # ~60 MiB: far more than the 20 s measured at 1 MiB/s
    produce(src, t, range(1_000_000, 1_000_000 + count), 1, size=size)
    record_bytes = len(b"k1000000") + len(b"1000000:") + size
    cap = 1 << 20
    port = free_port()
    body = flow_yaml(unique, t, f"    max_bytes_per_second: {cap}\n")
    cfg = write_config(body)
    with MirrorProcess(cfg, "--metrics-port", str(port)) as m:
        wait_for(
            lambda: _target_bytes(dst, f"src.{t}", record_bytes) > 2 * cap, 120, "copies arriving", detail=m.output
        )
        # The rate over 20 s (and more if the machine is slow to answer), from the target's end offsets.
        t0, b0 = time.monotonic(), _target_bytes(dst, f"src.{t}", record_bytes)
        config = load_config(cfg)
        flow = config.flows[0]
        probe = FlowProbe(config, flow, lambda name: Admin(name, config.clusters[name]), None, time.monotonic, 10.0)
        statuses = []
        try:
            while time.monotonic() - t0 < 20:
                lag = probe.gather()
                statuses.append((lag.status, lag.partitions[0].reason))
                time.sleep(max(0.0, 2.0 - (time.monotonic() - t0) % 2.0))
        finally:
            probe.close()
        t1, b1 = time.monotonic(), _target_bytes(dst, f"src.{t}", record_bytes)
        rate = (b1 - b0) / (t1 - t0)
        with capsys.disabled():
            print(f"\ncapped at {cap} B/s: {rate:.0f} B/s over {t1 - t0:.1f}s ({rate / cap:.3f} x the cap)")
        assert abs(rate - cap) <= 0.15 * cap, f"read {rate / cap:.2f} x the cap over {t1 - t0:.1f}s"
        samples = scrape(port)
        assert total(samples, "mirror_flow_max_bytes_per_second", flow=f"f-{unique}") == cap
        assert (total(samples, "mirror_flow_throttled_seconds_total", flow=f"f-{unique}") or 0) > 5
        # Throttled and behind, but moving: never STALL or STOP.
        assert statuses and all(s in ("OK", "WARN") for s, _ in statuses), statuses
        assert any("behind" in reason for _, reason in statuses[3:]), statuses
        # The cap lifted in the file and reloaded (SIGHUP, as runbooks/throttle-a-flow.md does):
        # the flow catches up without a restart of the process, nothing lost or copied twice.
        cfg.write_text(cfg.read_text().replace(f"    max_bytes_per_second: {cap}\n", ""))
        m.signal(signal.SIGHUP)
        wait_for(
            lambda: _target_bytes(dst, f"src.{t}", record_bytes) >= count * record_bytes,
            180,
            "the flow caught up once the cap was lifted",
            detail=m.output,
        )
        samples = scrape(port)
        assert total(samples, "mirror_config_reload_successful") == 1
        assert total(samples, "mirror_flow_max_bytes_per_second", flow=f"f-{unique}") in (None, 0)
        m.stop()
    assert numbers(read_topic(dst, f"src.{t}", 1)) == list(range(1_000_000, 1_000_000 + count))


def test_mirror_drill_runs_the_throttle_runbook(clusters, write_config, unique, tmp_path):
    src = clusters.bootstrap("src")
    t = f"drilled-{unique}"
    create_topic(src, t, 1)
    produce(src, t, range(0, 50), 1)
    cfg = write_config(flow_yaml(unique, t, f'    groups: ["app-{unique}"]\n    max_bytes_per_second: 64KiB\n'))
    runbook = str(Path(__file__).resolve().parents[2] / "runbooks" / "throttle-a-flow.md")
    with MirrorProcess(cfg) as m:
        report = tmp_path / "report"
        args = ["drill", runbook, "-c", str(cfg), "--flow", f"f-{unique}", "--group", f"app-{unique}", "--topic", t]
        rc = main([*args, "--yes", "--out", str(report)])
        assert rc == 0, m.output() + (report / "report.md").read_text()
        m.stop()


def test_start_from_latest_copies_a_topic_created_while_the_flow_runs_whole(clusters, write_config, unique):
    """`latest` is the flow's start: a topic that appears later loses nothing written before
    the flow noticed it."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    old, new = f"nt-{unique}-a", f"nt-{unique}-b"
    create_topic(src, old, 1)
    produce(src, old, range(0, 30), 1)
    cfg = write_config(flow_yaml(unique, f"nt-{unique}-.*", "    start_from: latest\n"))
    with MirrorProcess(cfg) as m:
        wait_for(
            lambda: group_offsets(src, f"mirror-{unique}", old, 1) == {0: 30},
            120,
            "the start committed",
            detail=m.output,
        )
        create_topic(src, new, 2)
        produce(src, new, range(100, 140), 2)  # at once: before the flow's next refresh sees the topic
        produce(src, old, range(30, 40), 1)
        wait_for(
            lambda: sum(end_offsets(dst, f"src.{new}", 2).values()) >= 40,
            120,
            "the new topic mirrored",
            detail=m.output,
        )
        m.stop()
    assert numbers(read_topic(dst, f"src.{new}", 2)) == list(range(100, 140))
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    assert numbers(read_topic(dst, f"src.{old}", 1)) == list(range(30, 40))
