"""Source gaps on real clusters: records the source deleted before `mirror run` copied them
are reported (log line, counter), recorded (failover names them skipped) or stop the flow."""

from __future__ import annotations

import json
import re
import signal
import socket
import urllib.request
from pathlib import Path

from confluent_kafka import Producer

from mirror.cli import main
from mirror.config import load
from mirror.kafka import Admin
from tests.integration.test_failover import produce
from tests.integration.test_offset_edges import _commit, _tick
from tests.support.kafkautil import create_topic, group_offsets, read_partition, wait_for
from tests.support.mirrorproc import MirrorProcess


def _flow(unique: str, topic: str, db: Path, policy: str = "skip") -> str:
    return f"""\
flows:
  - name: f-{unique}
    source: src
    target: dst
    consumer_group: mirror-{unique}
    refresh_interval: 1s
    commit_interval: 300ms
    on_source_gap: {policy}
    topics: {{include: ['{topic}']}}
    groups: ['app-{unique}']
    sync_group_offsets: false
offset_store:
  kind: sqlite
  path: {db}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _skipped(port: int, flow: str, topic: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    pattern = rf'mirror_source_records_skipped_total\{{flow="{flow}",reason="retention",topic="{topic}"\}} (\S+)'
    m = re.search(pattern, text) or re.search(
        rf'mirror_source_records_skipped_total\{{flow="{flow}",topic="{topic}",reason="retention"\}} (\S+)', text
    )
    return float(m.group(1)) if m else 0.0


def _sources(dst: str, target: str) -> list[int]:
    """The source offsets of the target's copies, in target order."""
    return [int((r.provenance() or {})["offset"]) for r in read_partition(dst, target, 0)]


def _plan(cfg: Path, unique: str, group: str, capsys) -> dict:
    capsys.readouterr()
    assert (
        main(["failover", "plan", "-c", str(cfg), "--flow", f"f-{unique}", "--group", group, "--translate", "--json"])
        == 0
    )
    return json.loads(capsys.readouterr().out)["partitions"][0]


def test_a_gap_at_start_is_reported_counted_and_named_skipped_by_failover(
    clusters, write_config, unique, tmp_path, capsys
) -> None:
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, target, app = f"gap-{unique}", f"src.gap-{unique}", f"app-{unique}"
    cfg = write_config(_flow(unique, topic, tmp_path / "offsets.db"))
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"a-%d" % i for i in range(100)])
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    # The mirror is stopped; 100 more arrive, and retention takes 100..149 before it is back.
    produce(src, topic, 0, [b"b-%d" % i for i in range(100, 200)])
    Admin("src", load(cfg).clusters["src"]).delete_records({(topic, 0): 150})
    _commit(src, app, {(topic, 0): 120})  # an application that stands inside the gap
    port = _free_port()
    with MirrorProcess(cfg, "--metrics-port", str(port)) as m:
        wait_for(lambda: len(_sources(dst, target)) == 150, 120, "the records after the gap", detail=m.output)
        wait_for(lambda: _skipped(port, f"f-{unique}", topic) == 50, 60, "the counter", detail=m.output)
        m.stop()
    lines = [x for x in m.output().splitlines() if "were never mirrored" in x]
    assert len(lines) == 1, m.output()
    assert f"flow f-{unique}: {topic}[0]: source records 100..149 (50) were never mirrored" in lines[0]
    assert "WARNING" in lines[0]
    assert _sources(dst, target) == [*range(100), *range(150, 200)]
    assert group_offsets(src, f"mirror-{unique}", topic, 1) == {0: 200}
    plan = _plan(cfg, unique, app, capsys)
    # The first copy after the gap (target offset 100); 120..149 never mirrored, not re-read.
    assert (plan["target_offset"], plan["skipped"], plan["may_reread"]) == (100, 30, 0)
    assert plan["unmirrored"] == 30


def test_a_gap_while_running_is_reported_and_the_flow_mirrors_on(
    clusters, write_config, unique, tmp_path, capsys
) -> None:
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, target = f"gaprun-{unique}", f"src.gaprun-{unique}"
    cfg = write_config(_flow(unique, topic, tmp_path / "offsets.db"))
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"a-%d" % i for i in range(50)])
    with MirrorProcess(cfg) as m:
        wait_for(lambda: len(_sources(dst, target)) == 50, 120, "the first records", detail=m.output)
        m.signal(signal.SIGSTOP)  # paused: the source moves on without it
        try:
            produce(src, topic, 0, [b"b-%d" % i for i in range(50, 100)])
            Admin("src", load(cfg).clusters["src"]).delete_records({(topic, 0): 80})
        finally:
            m.signal(signal.SIGCONT)
        wait_for(lambda: len(_sources(dst, target)) == 70, 120, "the records after the gap", detail=m.output)
        wait_for(lambda: "were never mirrored" in m.output(), 30, "the warning", detail=m.output)
        m.stop()
    assert f"{topic}[0]: source records 50..79 (30) were never mirrored" in m.output()
    assert _sources(dst, target) == [*range(50), *range(80, 100)]
    _commit(src, f"app-{unique}", {(topic, 0): 60})
    plan = _plan(cfg, unique, f"app-{unique}", capsys)
    assert (plan["target_offset"], plan["skipped"], plan["may_reread"], plan["unmirrored"]) == (50, 20, 0, 20)


def test_on_source_gap_stop_stops_with_exit_4_and_copies_nothing_past_the_gap(
    clusters, write_config, unique, tmp_path, capsys
) -> None:
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, target = f"gapstop-{unique}", f"src.gapstop-{unique}"
    cfg = write_config(_flow(unique, topic, tmp_path / "offsets.db", policy="stop"))
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"a-%d" % i for i in range(40)])
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    produce(src, topic, 0, [b"b-%d" % i for i in range(40, 80)])
    Admin("src", load(cfg).clusters["src"]).delete_records({(topic, 0): 60})
    capsys.readouterr()
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{topic}[0]: source records 40..59 (20) were never mirrored" in err[0], err
    assert "on_source_gap: stop" in err[0]
    assert _sources(dst, target) == list(range(40))
    assert group_offsets(src, f"mirror-{unique}", topic, 1) == {0: 40}
    # Nothing past the gap was copied: a group inside it starts at the target's end, and
    # every record from the gap on is at risk (on the source only), none re-read.
    _commit(src, f"app-{unique}", {(topic, 0): 50})
    plan = _plan(cfg, unique, f"app-{unique}", capsys)
    assert (plan["target_offset"], plan["unmirrored"], plan["may_reread"]) == (40, 40, 0)


def test_the_spark_engine_reports_a_gap_at_start_in_the_same_words_and_stops_on_it_when_told(
    clusters, write_config, unique, tmp_path, spark_local, capsys, caplog
) -> None:
    import pytest

    from mirror.errors import SourceGapError
    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, target, app = f"gapsp-{unique}", f"src.gapsp-{unique}", f"app-{unique}"
    db = tmp_path / "offsets.db"
    stop_cfg = write_config(_flow(unique, topic, db, policy="stop"))
    config = load(stop_cfg)
    flow = config.flow(f"f-{unique}")
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"a-%d" % i for i in range(100)])
    run_flow(config, flow, until_caught_up=True, spark=spark_local)
    produce(src, topic, 0, [b"b-%d" % i for i in range(100, 200)])
    Admin("src", config.clusters["src"]).delete_records({(topic, 0): 150})
    _commit(src, app, {(topic, 0): 120})

    with pytest.raises(SourceGapError) as stopped:
        run_flow(config, flow, until_caught_up=True, spark=spark_local)
    assert stopped.value.exit_code == 4
    assert f"{topic}[0]: source records 100..149 (50) were never mirrored" in str(stopped.value)
    assert _sources(dst, target) == list(range(100))
    assert group_offsets(src, f"mirror-{unique}", topic, 1) == {0: 100}

    skip_cfg = write_config(_flow(unique, topic, db))
    config = load(skip_cfg)
    caplog.clear()
    job = run_flow(config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local, metrics_port=0)
    gap_records = [r for r in caplog.records if "were never mirrored" in r.getMessage()]
    assert [r.levelname for r in gap_records] == ["WARNING"]
    lines = [r.getMessage() for r in gap_records]
    assert lines == [
        f"flow f-{unique}: {topic}[0]: source records 100..149 (50) were never mirrored: deleted at the source "
        "before they were copied (retention or delete-records); mirroring on from offset 150"
    ]
    samples = [s for s in job.metrics._m.skipped.collect()[0].samples if s.name.endswith("_total")]
    # Each paged reason's series starts at 0 (so an alert's increase() sees the first gap).
    assert {s.labels["reason"]: s.value for s in samples if s.labels["topic"] == topic} == {
        "retention": 50.0,
        "truncated": 0.0,
        "recreated": 0.0,
    }
    assert _sources(dst, target) == [*range(100), *range(150, 200)]
    plan = _plan(skip_cfg, unique, app, capsys)
    assert (plan["target_offset"], plan["skipped"], plan["may_reread"], plan["unmirrored"]) == (100, 30, 0, 30)


def test_the_audit_counts_a_skipped_range_apart_from_the_differences(
    clusters, write_config, unique, tmp_path, spark_local
) -> None:
    from mirror.spark.audit import audit

    src = clusters.bootstrap("src")
    topic = f"gapaudit-{unique}"
    cfg = write_config(_flow(unique, topic, tmp_path / "offsets.db"))
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"a-%d" % i for i in range(30)])
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    produce(src, topic, 0, [b"b-%d" % i for i in range(30, 60)])
    config = load(cfg)
    Admin("src", config.clusters["src"]).delete_records({(topic, 0): 45})
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    (part,) = [a for a in audit(spark_local, config, config.flow(f"f-{unique}")).partitions if a.source_topic == topic]
    assert (part.skipped, part.skipped_ranges, part.equal) == (15, [(30, 44)], True)
    assert (part.source_count, part.target_count, part.missing) == (15, 15, [])


def test_a_source_topic_created_again_while_the_flow_runs_is_reported_and_mirrored_from_its_beginning(
    clusters, write_config, unique, tmp_path
) -> None:
    from tests.support.kafkautil import delete_topic, topics

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, target = f"gaprec-{unique}", f"src.gaprec-{unique}"
    cfg = write_config(_flow(unique, topic, tmp_path / "offsets.db"))
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"old-%d" % i for i in range(20)])
    port = _free_port()
    with MirrorProcess(cfg, "--metrics-port", str(port)) as m:
        wait_for(lambda: len(_sources(dst, target)) == 20, 120, "the old topic's records", detail=m.output)
        delete_topic(src, topic)
        wait_for(lambda: topic not in topics(src), 60, "the topic gone")
        # The group revokes it, or loses it, or the topic watch drops it first ("rebalanced: -1 partitions").
        wait_for(
            lambda: (
                "revoked" in m.output() or "lost" in m.output() or re.search(r"rebalanced: -\d+ partitions", m.output())
            ),
            60,
            "the revoke",
            detail=m.output,
        )
        create_topic(src, topic, 1)
        produce(src, topic, 0, [b"new-%d" % i for i in range(30)])
        wait_for(lambda: len(_sources(dst, target)) == 50, 120, "the new topic's records", detail=m.output)
        wait_for(lambda: "was deleted and created again" in m.output(), 30, "the warning", detail=m.output)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        m.stop()
    assert f"source topic {topic} was deleted and created again" in m.output()
    assert re.search(rf'mirror_source_records_skipped_total\{{[^}}]*reason="recreated"[^}}]*topic="{topic}"', text)
    copies = read_partition(dst, target, 0)
    assert [r.value for r in copies] == [b"old-%d" % i for i in range(20)] + [b"new-%d" % i for i in range(30)]


def test_the_spark_engine_reports_a_gap_that_opens_while_its_query_runs(
    clusters, write_config, unique, tmp_path, spark_local, capsys, caplog
) -> None:
    """Records deleted past the query's position between two batches: Spark's reader (or the
    JVM writer's) skips them; the driver reports them as at a query's start."""
    import threading

    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, target, app, group = f"gapsprun-{unique}", f"src.gapsprun-{unique}", f"app-{unique}", f"mirror-{unique}"
    # A trigger far apart: the records arrive and are deleted between two batches.
    body = _flow(unique, topic, tmp_path / "offsets.db").replace("commit_interval: 300ms", "commit_interval: 20s")
    cfg = write_config(body)
    config = load(cfg)
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"a-%d" % i for i in range(50)])
    stop, box = threading.Event(), {}

    def run() -> None:
        try:
            box["job"] = run_flow(config, config.flow(f"f-{unique}"), spark=spark_local, stop=stop, metrics_port=0)
        except BaseException as exc:  # noqa: BLE001 - raised on the test's thread below
            box["error"] = exc

    caplog.clear()
    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: "error" in box or group_offsets(src, group, topic, 1) == {0: 50}, 120, "the first batch")
        assert "error" not in box, box.get("error")
        # Deleted inside an open transaction: no batch can read them first (a trigger that fell
        # between a plain produce and the deletion copied them, under load in wave 4's run).
        txn = Producer({"bootstrap.servers": src, "transactional.id": f"gap-{unique}"})
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(50, 100):
            txn.produce(topic, value=b"b-%d" % i, key=b"b-%d" % i, partition=0)
        assert txn.flush(30) == 0
        Admin("src", config.clusters["src"]).delete_records({(topic, 0): 80})
        txn.commit_transaction(30)  # 80..99 visible; its marker is offset 100
        wait_for(lambda: "error" in box or group_offsets(src, group, topic, 1) == {0: 101}, 120, "the next batch")
        assert "error" not in box, box.get("error")
    finally:
        stop.set()
        runner.join(120)
    assert not runner.is_alive() and "error" not in box, box.get("error")
    gap_records = [r for r in caplog.records if "were never mirrored" in r.getMessage() or "deleted" in r.getMessage()]
    assert [(r.levelname, r.getMessage()) for r in gap_records] == [
        (
            "WARNING",
            f"flow f-{unique}: {topic}[0]: source records 50..79 (30) were never mirrored: deleted at the source "
            "before they were copied (retention or delete-records); mirroring on from offset 80",
        )
    ]
    samples = [s for s in box["job"].metrics._m.skipped.collect()[0].samples if s.name.endswith("_total")]
    assert {s.labels["reason"]: s.value for s in samples if s.labels["topic"] == topic} == {
        "retention": 30.0,
        "truncated": 0.0,
        "recreated": 0.0,
    }
    assert _sources(dst, target) == [*range(50), *range(80, 100)]
    _commit(src, app, {(topic, 0): 60})
    plan = _plan(cfg, unique, app, capsys)
    assert (plan["target_offset"], plan["skipped"], plan["may_reread"], plan["unmirrored"]) == (50, 20, 0, 20)


def test_a_source_topic_created_again_while_the_flow_was_stopped_is_reported_and_mirrored_from_its_beginning(
    clusters, write_config, unique, tmp_path
) -> None:
    """Kafka drops the group's offsets with the topic: only the offset store remembers the
    flow mirrored it. The old topic's records the flow had not copied are counted from the
    source end the store last saw."""
    from tests.support.kafkautil import delete_topic, topics

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, target, group = f"gaprecst-{unique}", f"src.gaprecst-{unique}", f"mirror-{unique}"
    cfg = write_config(_flow(unique, topic, tmp_path / "offsets.db"))
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"old-%d" % i for i in range(20)])
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    produce(src, topic, 0, [b"old-%d" % i for i in range(20, 30)])  # never copied: the flow is stopped
    _tick(cfg)  # the store sees the source end, 30, as a running checkpointer would
    delete_topic(src, topic)
    wait_for(lambda: topic not in topics(src), 60, "the topic gone")
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"new-%d" % i for i in range(15)])
    wait_for(lambda: group_offsets(src, group, topic, 1) == {0: -1001}, 60, "the group's offsets gone")
    port = _free_port()
    with MirrorProcess(cfg, "--metrics-port", str(port)) as m:
        wait_for(lambda: len(read_partition(dst, target, 0)) == 35, 120, "the new topic's records", detail=m.output)
        wait_for(lambda: group_offsets(src, group, topic, 1) == {0: 15}, 60, "the commit", detail=m.output)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        m.stop()
    lines = [x for x in m.output().splitlines() if "was deleted and created again" in x]
    assert len(lines) == 1 and "WARNING" in lines[0], m.output()
    assert (
        f"flow f-{unique}: source topic {topic} was deleted and created again while the flow was stopped; records "
        "of the old topic not yet copied were never mirrored (10 by the offset store's last look); mirroring the "
        "new one from its beginning"
    ) in lines[0]
    counter = re.search(
        rf'mirror_source_records_skipped_total\{{flow="f-{unique}",reason="recreated",topic="{topic}"\}} (\S+)', text
    ) or re.search(
        rf'mirror_source_records_skipped_total\{{flow="f-{unique}",topic="{topic}",reason="recreated"\}} (\S+)', text
    )
    assert counter is not None and float(counter.group(1)) == 10.0, text
    copies = read_partition(dst, target, 0)
    assert [r.value for r in copies] == [b"old-%d" % i for i in range(20)] + [b"new-%d" % i for i in range(15)]


def test_the_spark_engine_reports_a_source_topic_created_again_while_no_run_was(
    clusters, write_config, unique, tmp_path, spark_local, caplog
) -> None:
    """The same offset-store check as `mirror run`, on the Spark driver, at a query's start."""
    from mirror.spark.job import run_flow
    from tests.support.kafkautil import delete_topic, topics

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, target = f"gaprecsp-{unique}", f"src.gaprecsp-{unique}"
    cfg = write_config(_flow(unique, topic, tmp_path / "offsets.db"))
    config = load(cfg)
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"old-%d" % i for i in range(20)])
    run_flow(config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local)
    produce(src, topic, 0, [b"old-%d" % i for i in range(20, 30)])  # never copied: no run is
    _tick(cfg)  # the store sees the source end, 30
    delete_topic(src, topic)
    wait_for(lambda: topic not in topics(src), 60, "the topic gone")
    wait_for(lambda: create_topic(src, topic, 1) is None, 30, "the topic created again")
    produce(src, topic, 0, [b"new-%d" % i for i in range(15)])
    caplog.clear()
    job = run_flow(config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local, metrics_port=0)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if "created again" in r.getMessage()]
    assert lines == [
        (
            "WARNING",
            f"flow f-{unique}: source topic {topic} was deleted and created again while the flow was stopped; "
            "records of the old topic not yet copied were never mirrored (10 by the offset store's last look); "
            "mirroring the new one from its beginning",
        )
    ]
    samples = [s for s in job.metrics._m.skipped.collect()[0].samples if s.name.endswith("_total")]
    assert {s.labels["reason"]: s.value for s in samples if s.labels["topic"] == topic}["recreated"] == 10.0
    copies = read_partition(dst, target, 0)
    assert [r.value for r in copies] == [b"old-%d" % i for i in range(20)] + [b"new-%d" % i for i in range(15)]
