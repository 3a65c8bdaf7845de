"""The data path under faults: brokers with Kafka's defaults (auto-create on), hostile topic
settings, added partitions, zombie workers, fatal records under restarts, a dead offset store.

Every test runs on the session's real clusters, which run with Kafka's own defaults.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions

from mirror.cli import main
from tests.integration.test_mirror_datapath import assert_same, flow_yaml, produce_numbered
from tests.support.kafkautil import (
    create_topic,
    delete_topic,
    end_offsets,
    group_offsets,
    producer,
    read_partition,
    read_topic,
    topics,
    wait_for,
)
from tests.support.mirrorproc import MirrorProcess


def store_yaml(path: Path) -> str:
    return f"offset_store:\n  kind: sqlite\n  path: {path}\n"


def topic_configs(bootstrap: str, topic: str, keys: tuple[str, ...]) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    got = admin.describe_configs([res])[res].result(30)
    return {k: got[k].value for k in keys}


def firsts_in_order(target: list, source: list) -> None:
    """Every source record on the target, and their first copies in source order."""
    firsts, seen = [], set()
    for r in target:
        if r.value not in seen:
            seen.add(r.value)
            firsts.append(r.value)
    assert firsts == [r.value for r in source]


# ---------------------------------------------------------------------------- 1: target topic deleted


def _delete_mid_stream(clusters, write_config, unique: str, *args: str) -> None:
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"gone{len(args)}-{unique}", 3
    create_topic(src, t, n, {"retention.ms": "86400000", "cleanup.policy": "delete"})
    produce_numbered(src, t, 9000, n)
    # A refresh slower than the producer's reaction to the deletion, as in production (30 s):
    # whatever the producer does in between must not decide how the topic comes back.
    body = flow_yaml(unique, f'["{t}"]').replace("refresh_interval: 1s", "refresh_interval: 8s")
    cfg = write_config(body + store_yaml(cfg_dir(write_config) / f"o-{unique}.db"))
    with MirrorProcess(cfg, *args) as m:
        wait_for(
            lambda: f"src.{t}" in topics(dst) and sum(end_offsets(dst, f"src.{t}", n).values()) == 9000,
            90,
            "the first records",
            detail=m.output,
        )
        delete_topic(dst, f"src.{t}")
        produce_numbered(src, t, 3000, n, start=9000)
        wait_for(
            lambda: f"src.{t}" in topics(dst) and sum(end_offsets(dst, f"src.{t}", n).values()) >= 12000,
            120,
            "the topic to be refilled",
            detail=m.output,
        )
        wait_for(
            lambda: group_offsets(src, f"mirror-{unique}", t, n) == end_offsets(src, t, n),
            60,
            "the commits",
            detail=m.output,
        )
        m.signal(signal.SIGTERM)
        assert m.wait(60) == 0, m.output()
    assert topics(dst)[f"src.{t}"] == n
    assert topic_configs(dst, f"src.{t}", ("retention.ms", "cleanup.policy")) == {
        "retention.ms": "86400000",
        "cleanup.policy": "delete",
    }
    assert_same(read_topic(src, t, n), read_topic(dst, f"src.{t}", n))  # every record exactly once, in order


def cfg_dir(write_config) -> Path:
    return Path(write_config("flows: []\n")).parent


def test_target_deleted_mid_stream_one_worker(clusters, write_config, unique):
    _delete_mid_stream(clusters, write_config, unique)


@pytest.mark.slow
def test_target_deleted_mid_stream_two_workers(clusters, write_config, unique):
    _delete_mid_stream(clusters, write_config, unique, "--workers", "2")


def test_target_deleted_while_stopped(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"gonestop-{unique}", 3
    create_topic(src, t, n)
    produce_numbered(src, t, 3000, n)
    cfg = write_config(flow_yaml(unique, f'["{t}"]') + store_yaml(cfg_dir(write_config) / f"o-{unique}.db"))
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    delete_topic(dst, f"src.{t}")
    wait_for(lambda: f"src.{t}" not in topics(dst), 30, "the deletion")
    produce_numbered(src, t, 300, n, start=3000)
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    assert topics(dst)[f"src.{t}"] == n
    assert_same(read_topic(src, t, n), read_topic(dst, f"src.{t}", n))


# ---------------------------------------------------------------------------- 2: max.message.bytes


def test_small_max_message_bytes_and_records_at_the_limit(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t = f"small-{unique}"
    create_topic(src, t, 2, {"max.message.bytes": "65536"})
    p = Producer({"bootstrap.servers": src, "linger.ms": 5, "batch.size": 60000, "enable.idempotence": True})
    for i in range(50_000):
        while True:
            try:
                p.produce(t, key=b"%d" % i, value=os.urandom(1024), partition=i % 2)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0
    # Records exactly at the source limit: the largest single-record batch the broker takes.
    edge = f"edge-{unique}"
    create_topic(src, edge, 1, {"max.message.bytes": "16384"})
    one = Producer({"bootstrap.servers": src, "linger.ms": 0, "enable.idempotence": False, "retries": 0})
    size, lo, hi = None, 15000, 16384
    while lo <= hi:  # binary search on the broker's own verdict
        mid = (lo + hi) // 2
        out: list = []
        one.produce(edge, value=os.urandom(mid), on_delivery=lambda e, m, out=out: out.append(e))
        one.flush(30)
        if out[0] is None:
            size, lo = mid, mid + 1
        else:
            hi = mid - 1
    assert size is not None
    for _ in range(3):
        one.produce(edge, value=os.urandom(size))
    assert one.flush(30) == 0
    refused: list = []  # one byte more is refused: `size` is the limit
    one.produce(edge, value=os.urandom(size + 1), on_delivery=lambda e, m: refused.append(e))
    one.flush(30)
    assert refused[0] is not None
    cfg = write_config(flow_yaml(unique, f'["{t}", "{edge}"]'))
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    assert int(topic_configs(dst, f"src.{t}", ("max.message.bytes",))["max.message.bytes"]) >= 65536
    assert_same(read_topic(src, t, 2), read_topic(dst, f"src.{t}", 2))
    assert_same(read_topic(src, edge, 1), read_topic(dst, f"src.{edge}", 1))


# ---------------------------------------------------------------------------- 3: partitions added


def test_partitions_added_while_records_arrive(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t = f"addp-{unique}"
    create_topic(src, t, 2)
    # The source consumer learns of new partitions within a second, while the mirror's
    # producer may still hold the old count (its metadata refresh is minutes away).
    # The flow's own refresh is slow (as in production, 30 s), so the consumer is assigned the
    # new partitions before the target grows: the path point 3 is about.
    body = flow_yaml(
        unique,
        f'["{t}"]',
        extra="    consumer: {topic.metadata.refresh.interval.ms: 1000}\n    sync_topic_configs: false\n",
    )
    cfg = write_config(body.replace("refresh_interval: 1s", "refresh_interval: 30s"))
    stop = threading.Event()
    parts = [2]
    sent = [0]

    def produce_forever() -> None:
        p, known = producer(src), parts[0]
        i = 0
        while not stop.is_set():
            if parts[0] != known:  # a new producer knows the new partitions at once
                assert p.flush(30) == 0
                p, known = producer(src), parts[0]
            try:
                p.produce(t, key=b"k%d" % i, value=b"%d" % i, partition=i % known)
                i += 1
            except BufferError:
                p.poll(0.05)
            if i % 200 == 0:
                p.poll(0.01)
        assert p.flush(30) == 0
        sent[0] = i

    with MirrorProcess(cfg) as m:
        wait_for(lambda: f"src.{t}" in topics(dst), 60, "the target", detail=m.output)
        th = threading.Thread(target=produce_forever, daemon=True)
        th.start()
        wait_for(lambda: sum(end_offsets(dst, f"src.{t}", 2).values()) > 0, 60, "records mirrored", detail=m.output)
        admin = AdminClient({"bootstrap.servers": src})
        admin.create_partitions([NewPartitions(t, 4)])[t].result(30)
        wait_for(lambda: topics(src)[t] == 4, 30, "the new partitions")
        parts[0] = 4
        # The flow's refresh (30 s) grows the target only after this: the consumer is given
        # the new partitions (within its 1 s metadata refresh) while the target has 2.
        new = lambda: min(end_offsets(src, t, 4)[p] for p in (2, 3))  # noqa: E731
        wait_for(lambda: new() >= 500, 60, "records in the new partitions")
        stop.set()
        th.join(60)
        want = end_offsets(src, t, 4)
        assert want[2] > 0 and want[3] > 0, "nothing produced to the new partitions; the test proves nothing"
        wait_for(
            lambda: m.alive() and topics(dst).get(f"src.{t}") == 4 and end_offsets(dst, f"src.{t}", 4) == want,
            120,
            "every partition mirrored",
            detail=m.output,
        )
        m.signal(signal.SIGTERM)
        assert m.wait(60) == 0, m.output()
        out = m.output()
    assert "is not known to the producer yet" in out, (
        "the target grew before the new partitions were assigned: the test proves nothing\n" + out[-3000:]
    )
    assert_same(read_topic(src, t, 4), read_topic(dst, f"src.{t}", 4))


# ---------------------------------------------------------------------------- 4: zombie worker


def test_frozen_worker_is_fenced(clusters, write_config, unique, tmp_path, capsys):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"zomb-{unique}", 4
    create_topic(src, t, n)
    db = tmp_path / "offsets.db"
    # linger.ms keeps records queued in the frozen worker's producer: sent late, on SIGCONT.
    # The broker's smallest session timeout (6 s, heartbeats every 2 s): the group expels the
    # frozen worker, and it fences itself on waking, sooner than with the 10 s default.
    cfg = write_config(
        flow_yaml(
            unique,
            f'["{t}"]',
            extra=(
                "    producer: {linger.ms: 800}\n    consumer: {session.timeout.ms: 6000}\n"
                f"    groups: [app-{unique}]\n"
            ),
        )
        + store_yaml(db)
    )
    stop = threading.Event()

    def produce_forever() -> None:
        p = producer(src)
        i = 0
        while not stop.is_set():
            try:
                p.produce(t, key=b"k%d" % i, value=b"%d:" % i + b"z" * 100, partition=i % n)
                i += 1
            except BufferError:
                p.poll(0.05)
            if i % 100 == 0:
                p.poll(0.02)  # ~ a few thousand records/s
        assert p.flush(30) == 0

    from mirror.config import ClusterConfig
    from mirror.kafka import Admin

    admin = Admin("src", ClusterConfig(bootstrap=src))
    a, b = MirrorProcess(cfg), MirrorProcess(cfg)
    th = threading.Thread(target=produce_forever, daemon=True)
    try:
        logs = lambda: f"\n--- a:\n{a.output()[-3000:]}\n--- b:\n{b.output()[-3000:]}"
        wait_for(lambda: admin.group_members(f"mirror-{unique}") == 2, 60, "both workers in the group", detail=logs)
        th.start()
        # The lifecycle lines: "... started: N topics matched, P partitions assigned" and
        # "... rebalanced: +-K partitions, P assigned (...)".
        held = r"[1-9]\d* partitions assigned|rebalanced: \S+ partitions, [1-9]\d* assigned"
        owns = lambda m: re.search(held, m.output()) is not None  # noqa: E731
        wait_for(lambda: owns(a) and owns(b), 60, "both workers to own partitions", detail=logs)
        wait_for(
            lambda: f"src.{t}" in topics(dst) and sum(end_offsets(dst, f"src.{t}", n).values()) > 4000,
            60,
            "records flowing",
            detail=logs,
        )
        a.signal(signal.SIGSTOP)  # frozen with records queued and in flight
        try:
            wait_for(
                lambda: admin.group_members(f"mirror-{unique}") == 1,
                60,
                "the frozen worker to be expelled",
                detail=logs,
            )
            landed = sum(end_offsets(dst, f"src.{t}", n).values())
            wait_for(  # b mirrors a's partitions for a while
                lambda: sum(end_offsets(dst, f"src.{t}", n).values()) > landed + 2000, 60, "b mirroring", detail=logs
            )
        finally:
            a.signal(signal.SIGCONT)
        zombie = r"did not run for|lost [1-9]\d* partitions"  # the frozen worker woke up and learned it
        wait_for(lambda: re.search(zombie, a.output()) is not None, 60, "the woken worker to stand down", detail=logs)
        stop.set()
        th.join(60)
        want = end_offsets(src, t, n)
        wait_for(lambda: group_offsets(src, f"mirror-{unique}", t, n) == want, 120, "everything committed", detail=logs)
        a.signal(signal.SIGTERM)
        b.signal(signal.SIGTERM)
        assert a.wait(60) == 0 and b.wait(60) == 0, logs()
        # The scenario happened: the frozen worker woke up a zombie, and either fenced itself
        # or was told by the group first (on_lost) that its partitions had moved.
        assert re.search(r"did not run for|lost [1-9]\d* partitions", a.output()), logs()
    finally:
        stop.set()
        a.close()
        b.close()
    from mirror.domain.offsetmap import translate
    from mirror.store.sqlite import SqliteStore

    store = SqliteStore(db)
    source = read_topic(src, t, n)
    target = read_topic(dst, f"src.{t}", n)
    checked = 0
    dups = {p: len(target[p]) - len(source[p]) for p in range(n)}
    with capsys.disabled():
        print("duplicates per partition:", dups, "rows:", {p: len(store.syncs(f"f-{unique}", t, p)) for p in range(n)})
    floors: dict[int, list[int]] = {}
    for p in range(n):
        firsts_in_order(target[p], source[p])
        # For every source position P: the translated target position T must not pass any
        # record at or after P (each has a copy at T or later): re-reading, never skipping.
        rows = store.syncs(f"f-{unique}", t, p)
        last_copy: dict[int, int] = {}
        for r in target[p]:
            last_copy[int(r.provenance()["offset"])] = r.offset
        end = want[p]
        suffix_min = [0] * (end + 1)
        suffix_min[end] = target[p][-1].offset + 1
        for s in range(end - 1, -1, -1):
            suffix_min[s] = min(suffix_min[s + 1], last_copy[s])
        for pos in range(end + 1):
            tr = translate(rows, pos, target[p][-1].offset + 1).target_offset
            assert tr <= suffix_min[pos], (
                f"partition {p}: position {pos} translates to {tr}, past a copy of a record at or after it (rows "
                f"{rows})"
            )
            checked += 1
        floors[p] = suffix_min
    assert checked > 1000
    # `failover plan --translate` for a group at the newest row of each partition (where a
    # zombie's late copy would have moved the delta): never past a record it has not read.
    group = f"app-{unique}"
    at = {p: (store.syncs(f"f-{unique}", t, p)[-1].source_offset or want[p] // 2) for p in range(n)}
    store.close()
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": src, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(t, p, o) for p, o in at.items()], asynchronous=False)
    c.close()
    capsys.readouterr()
    assert (
        main(["failover", "plan", "-c", str(cfg), "--flow", f"f-{unique}", "--group", group, "--translate", "--json"])
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    for row in plan["partitions"]:
        p = row["partition"]
        assert row["source_offset"] == at[p]
        assert row["target_offset"] <= floors[p][at[p]], row


# ---------------------------------------------------------------------------- 5: a poison record under the supervisor


@pytest.mark.slow
def test_poison_record_under_supervisor_backs_off_and_healthy_partitions_match(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"poison-{unique}", 4
    create_topic(src, t, n)
    create_topic(dst, f"src.{t}", n, {"max.message.bytes": "20000"})
    produce_numbered(src, t, 40_000, n, size=200)
    poison_at = end_offsets(src, t, n)[0]
    p = producer(src)
    p.produce(t, value=os.urandom(100_000), partition=0)  # never fits the target
    assert p.flush(30) == 0
    produce_numbered(src, t, 4000, n, start=40_000, size=200)
    cfg = write_config(flow_yaml(unique, f'["{t}"]'))
    with MirrorProcess(cfg, "--workers", "2") as m:
        healthy = [1, 2, 3]
        want = end_offsets(src, t, n)
        wait_for(
            lambda: all(end_offsets(dst, f"src.{t}", n)[q] >= want[q] for q in healthy),
            120,
            "the healthy partitions",
            detail=lambda: (
                f"target {end_offsets(dst, f'src.{t}', n)}, committed {group_offsets(src, f'mirror-{unique}', t, n)}, "
                f"source {want}\n" + m.output()
            ),
        )
        wait_for(
            lambda: len(re.findall(r"restarting it in ([\d.]+)s", m.output())) >= 4,
            120,
            "four restarts",
            detail=m.output,
        )
        m.signal(signal.SIGTERM)
        m.wait(60)
        out = m.output()
    delays = [float(x) for x in re.findall(r"restarting it in ([\d.]+)s", out)]
    assert max(delays) > min(delays), f"no backoff: {delays}"
    got = end_offsets(dst, f"src.{t}", n)
    assert {q: got[q] for q in healthy} == {q: want[q] for q in healthy}, (
        "duplicates on healthy partitions\n" + out[-6000:]
    )
    assert f"cannot mirror {t}[0]@{poison_at}" in out, out[-3000:]
    # The poisoned partition holds exactly what came before the poison record, once each,
    # however many restarts the supervisor made.
    assert got[0] == poison_at, f"partition 0: {got[0]} on the target, {poison_at} before the poison"


# ---------------------------------------------------------------------------- 9: offset store unreachable


def test_unreachable_offset_store_holds_reading_back(clusters, write_config, unique, tmp_path):
    from mirror.config import load as load_config
    from mirror.engine.worker import FlowWorker
    from mirror.run.recorder import OffsetMapRecorder
    from mirror.store.sqlite import SqliteStore

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t = f"txs-{unique}"
    create_topic(src, t, 1)
    db = tmp_path / "offsets.db"
    cfg = load_config(write_config(flow_yaml(unique, f'["{t}"]') + store_yaml(db)))
    flow = cfg.flows[0]
    store = SqliteStore(db)
    store._db.execute("PRAGMA busy_timeout=50")  # a locked store answers at once, not in 30 s
    recorder = OffsetMapRecorder(store, flow.name, registry=None)
    recorder.max_pending = 40  # rows held before reading pauses (default 10,000)
    stop = threading.Event()
    worker = FlowWorker(cfg, flow, stop=stop, listeners=[recorder])
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    lock = sqlite3.connect(str(db), isolation_level=None)
    th = threading.Thread(target=run, daemon=True)
    th.start()
    try:
        wait_for(lambda: worker.state.value == "running", 30, "the worker")
        lock.execute("BEGIN EXCLUSIVE")  # the store stops answering
        # Every transaction adds a commit marker: a gap, so one offset-map row each.
        p = Producer({"bootstrap.servers": src, "transactional.id": f"tx-{unique}", "linger.ms": 0})
        p.init_transactions(30)
        for i in range(300):
            p.begin_transaction()
            p.produce(t, value=b"%d" % i)
            p.commit_transaction(30)
        peak = 0
        wait_for(lambda: recorder.pending >= 40, 60, "rows to pile up while the store is locked")
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            peak = max(peak, recorder.pending)
            time.sleep(0.05)
        # Bounded: the cap, plus what was already in flight when reading paused (one commit
        # interval's acknowledgements at most); without the cap it reaches one row per
        # transaction (300).
        assert 40 <= peak < 100, f"{peak} offset-map rows pending"
        time.sleep(2)
        assert recorder.pending == peak, "rows still growing while the store is away"
        assert len(read_partition(dst, f"src.{t}", 0)) < 300, "reading was not held back"
        lock.execute("ROLLBACK")  # the store answers again
        wait_for(
            lambda: group_offsets(src, f"mirror-{unique}", t, 1) == end_offsets(src, t, 1), 60, "everything committed"
        )
    finally:
        stop.set()
        th.join(60)
        lock.close()
    assert not errors, errors
    assert [r.value for r in read_partition(dst, f"src.{t}", 0)] == [b"%d" % i for i in range(300)]
    assert len(store.syncs(flow.name, t, 0)) >= 290  # one row per transaction marker
    store.close()


# -------------------------------------------------------------------------- 10: a record larger than the producer queue


def test_record_larger_than_the_producer_queue_fails_clearly(clusters, write_config, unique):
    src = clusters.bootstrap("src")
    t = f"huge-{unique}"
    create_topic(src, t, 1)
    p = producer(src)
    for i in range(5):
        p.produce(t, value=b"small-%d" % i)
    p.produce(t, value=os.urandom(300_000))  # offset 5
    assert p.flush(30) == 0
    cfg = write_config(flow_yaml(unique, f'["{t}"]', extra="    producer: {queue.buffering.max.kbytes: 128}\n"))
    with MirrorProcess(cfg, "--until-caught-up") as m:
        try:
            rc = m.wait(60)
        except Exception:
            raise AssertionError("the mirror stalled silently:\n" + m.output()[-2000:]) from None
        out = m.output()
    assert rc == 1, out
    assert f"cannot mirror {t}[0]@5" in out, out
    # Everything before the huge record is mirrored and committed, nothing past it.
    assert group_offsets(src, f"mirror-{unique}", t, 1)[0] == 5
    assert [r.value for r in read_partition(clusters.bootstrap("dst"), f"src.{t}", 0)] == [
        b"small-%d" % i for i in range(5)
    ]
