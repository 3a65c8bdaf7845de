"""The data path on real clusters: records arrive exactly as they were, and nothing is lost."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from confluent_kafka import KafkaException, Producer

from mirror.cli import main
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
from tests.support.metrics import scrape
from tests.support.mirrorproc import MirrorProcess, children
from tests.support.prometheus import free_port


def flow_yaml(unique: str, include: str, *, exclude: str = "[]", extra: str = "") -> str:
    return f"""\
flows:
  - name: f-{unique}
    source: src
    target: dst
    consumer_group: mirror-{unique}
    refresh_interval: 1s
    commit_interval: 500ms
    topics: {{include: {include}, exclude: {exclude}}}
{extra}"""


def produce_numbered(
    bootstrap: str, topic: str, count: int, partitions: int, *, start: int = 0, size: int = 64
) -> None:
    p = producer(bootstrap, **{"compression.type": "lz4"})
    for i in range(start, start + count):
        while True:
            try:
                p.produce(topic, key=b"k%d" % i, value=b"%d:" % i + b"x" * size, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.1)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def assert_same(src: dict, dst: dict) -> None:
    for p, recs in src.items():
        got = [r.content() for r in dst[p]]
        want = [r.content() for r in recs]
        assert len(got) == len(want), f"partition {p}: {len(got)} records on the target, {len(want)} on the source"
        assert got == want, f"partition {p}: content or order differs"


def test_records_arrive_exactly_as_they_were(clusters, write_config, unique):
    """100k+ records, several topics and partitions, keys, null values, headers, timestamps, compression."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    layout = {f"ord-{unique}": 4, f"ord-{unique}.eu": 3, f"pay-{unique}": 2}
    for t, n in layout.items():
        create_topic(src, t, n)
    base_ts = 1_600_000_000_000
    for codec, (t, n) in zip(["zstd", "gzip", "snappy"], layout.items()):
        p = Producer({"bootstrap.servers": src, "linger.ms": 20, "compression.type": codec})
        for i in range(40_000):
            value = None if i % 101 == 0 else (b"%d-" % i) * (1 + i % 7)  # tombstones and varied sizes
            key = None if i % 13 == 0 else b"key-%d" % (i % 500)
            headers = [("trace", b"%d" % i), ("dup", b"a"), ("dup", b"b")] if i % 3 else None
            if i % 17 == 0:
                headers = [("null-header", None)]
            p.produce(t, key=key, value=value, partition=i % n, timestamp=base_ts + i * 7, headers=headers)
            if i % 10000 == 0:
                p.poll(0)
        assert p.flush(60) == 0
    cfg = write_config(flow_yaml(unique, f'["(ord|pay)-{unique}.*"]'))
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0

    for t, n in layout.items():
        source = read_topic(src, t, n)
        target = read_topic(dst, f"src.{t}", n)
        assert sum(map(len, source.values())) == 40_000
        assert_same(source, target)
        # provenance: origin cluster, topic, partition and offset of every record
        for p, recs in target.items():
            for s, d in zip(source[p][:50], recs[:50]):
                assert d.provenance() == {"cluster": "src", "topic": t, "partition": str(p), "offset": str(s.offset)}
    # the mirror committed exactly the source end offsets
    t0, n0 = next(iter(layout.items()))
    assert group_offsets(src, f"mirror-{unique}", t0, n0) == end_offsets(src, t0, n0)


def test_provenance_headers_can_be_switched_off(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t = f"plain-{unique}"
    create_topic(src, t, 1)
    p = producer(src)
    p.produce(t, key=b"k", value=b"v", headers=[("own", b"1")])
    p.flush(30)
    cfg = write_config(flow_yaml(unique, f'["{t}"]', extra="    provenance_headers: false\n"))
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    [rec] = read_partition(dst, f"src.{t}", 0)
    assert rec.headers == (("own", b"1"),)


def test_aborted_transactions_never_reach_the_target(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t = f"txn-{unique}"
    create_topic(src, t, 2)
    p = Producer({"bootstrap.servers": src, "transactional.id": f"tx-{unique}"})
    p.init_transactions(30)
    for batch in range(6):
        p.begin_transaction()
        for i in range(50):
            p.produce(t, value=b"b%d-%d" % (batch, i), partition=i % 2)
        p.flush(30)
        try:
            if batch % 2 == 0:
                p.commit_transaction(30)
            else:
                p.abort_transaction(30)
        except KafkaException as exc:
            # The test's own producer, not the mirror: librdkafka 2.16 against Kafka 4.1 once
            # failed a commit with a fatal INVALID_TXN_STATE. A new producer with the same id
            # aborts that transaction; the source as read below stays the truth.
            if not exc.args[0].fatal():
                raise
            p = Producer({"bootstrap.servers": src, "transactional.id": f"tx-{unique}"})
            p.init_transactions(30)
    expected = {part: [r.value for r in read_partition(src, t, part)] for part in (0, 1)}  # read_committed
    assert any(v.startswith((b"b0-", b"b2-", b"b4-")) for v in expected[0]), (
        "no committed transaction on the source; the test proves nothing"
    )
    cfg = write_config(flow_yaml(unique, f'["{t}"]'))
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    for part in (0, 1):
        got = [r.value for r in read_partition(dst, f"src.{t}", part)]
        assert got == expected[part]  # every committed record, in order
        assert not any(v.startswith((b"b1-", b"b3-", b"b5-")) for v in got)  # no aborted one
    # the committed position passes the final commit marker: the group is truly caught up
    assert group_offsets(src, f"mirror-{unique}", t, 2) == end_offsets(src, t, 2)


def test_exclusions_and_topics_created_while_running(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    create_topic(src, f"app-{unique}.orders", 2)
    create_topic(src, f"app-{unique}.tmp", 1)  # excluded
    create_topic(src, f"other-{unique}", 1)  # does not match
    for t in (f"app-{unique}.orders", f"app-{unique}.tmp", f"other-{unique}"):
        produce_numbered(src, t, 100, 1)
    cfg = write_config(flow_yaml(unique, f'["app-{unique}\\\\..*"]', exclude=f'["app-{unique}\\\\.tmp"]'))
    with MirrorProcess(cfg) as m:
        wait_for(
            lambda: (
                sum(end_offsets(dst, f"src.app-{unique}.orders", 2).values()) == 100
                if f"src.app-{unique}.orders" in topics(dst)
                else False
            ),
            60,
            "the matching topic",
        )
        create_topic(src, f"app-{unique}.late", 3)
        produce_numbered(src, f"app-{unique}.late", 300, 3)
        wait_for(
            lambda: (
                f"src.app-{unique}.late" in topics(dst)
                and sum(end_offsets(dst, f"src.app-{unique}.late", 3).values()) == 300
            ),
            60,
            "the topic created while running",
        )
        m.signal(signal.SIGTERM)
        assert m.wait(60) == 0, m.output()
    names = topics(dst)
    assert f"src.app-{unique}.tmp" not in names
    assert f"src.other-{unique}" not in names
    assert not any(n.startswith("src.__") for n in names)
    late = read_topic(dst, f"src.app-{unique}.late", 3)
    assert sorted(int(r.value.split(b":")[0]) for recs in late.values() for r in recs) == list(range(300))


def test_sigkill_mid_stream_loses_nothing(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n, total = f"kill-{unique}", 4, 200_000
    create_topic(src, t, n)
    produce_numbered(src, t, total, n, size=200)
    cfg = write_config(flow_yaml(unique, f'["{t}"]'))
    m = MirrorProcess(cfg)
    try:
        wait_for(
            lambda: f"src.{t}" in topics(dst) and sum(end_offsets(dst, f"src.{t}", n).values()) > total // 5,
            120,
            "the mirror to be part way",
        )
        m.kill()
    finally:
        m.close()
    committed = group_offsets(src, f"mirror-{unique}", t, n)
    heads = {p: [int(r.value.split(b":")[0]) for r in read_partition(dst, f"src.{t}", p)[:3]] for p in range(n)}
    on_target = end_offsets(dst, f"src.{t}", n)
    assert sum(on_target.values()) < total, "the mirror finished before it was killed; the test proves nothing"
    # what was acknowledged by the target but not yet committed on the source: the only possible duplicates
    in_flight = {p: on_target[p] - max(committed[p], 0) for p in range(n)}

    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    target = read_topic(dst, f"src.{t}", n)
    seen = [int(r.value.split(b":")[0]) for recs in target.values() for r in recs]
    assert set(seen) == set(range(total)), "records lost"
    duplicates = len(seen) - total
    assert duplicates <= sum(in_flight.values())
    # Order within each partition is the source's: the first occurrences on the target, in
    # target order, are exactly the source partition. (Compared with the source as read,
    # not with the numbering: a test producer's retries could reorder the source itself.)
    source = read_topic(src, t, n)
    for p, recs in target.items():
        firsts, seen_p = [], set()
        for r in recs:
            if r.value not in seen_p:
                seen_p.add(r.value)
                firsts.append(r.value)
        assert firsts == [r.value for r in source[p]], (
            f"partition {p} out of order; at kill: committed={committed} heads={heads}"
        )


def test_target_outage_of_20s_needs_no_manual_step(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"outage-{unique}", 3
    create_topic(src, t, n)
    produce_numbered(src, t, 3000, n)
    cfg = write_config(flow_yaml(unique, f'["{t}"]'))
    port = free_port()
    flow = f"f-{unique}"

    def state() -> str | None:
        on = [
            labels["state"]
            for labels, v in scrape(port).get("mirror_flow_state", [])
            if labels["flow"] == flow and v == 1
        ]
        return on[0] if on else None

    with MirrorProcess(cfg, "--metrics-port", str(port)) as m:
        wait_for(
            lambda: f"src.{t}" in topics(dst) and sum(end_offsets(dst, f"src.{t}", n).values()) == 3000,
            60,
            "the first records",
        )
        assert state() == "running"
        clusters.stop("dst")
        try:
            stopped_at = time.monotonic()
            produce_numbered(src, t, 3000, n, start=3000)  # written while the target is down
            wait_for(lambda: state() == "retrying", 30, "the flow to report it is retrying")
            while time.monotonic() - stopped_at < 20:
                assert m.alive(), m.output()
                time.sleep(0.5)
        finally:
            clusters.start("dst")
        wait_for(lambda: sum(end_offsets(dst, f"src.{t}", n).values()) >= 6000, 120, "the mirror to resume by itself")
        wait_for(lambda: state() == "running", 30, "the flow to report it is running again")
        m.signal(signal.SIGTERM)
        assert m.wait(60) == 0, m.output()
    target = read_topic(dst, f"src.{t}", n)
    seen = [int(r.value.split(b":")[0]) for recs in target.values() for r in recs]
    assert set(seen) == set(range(6000))
    assert len(seen) == 6000, f"{len(seen) - 6000} duplicates"


def test_two_processes_share_partitions_and_one_finishes_alone(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n, total = f"pair-{unique}", 6, 120_000
    create_topic(src, t, n)
    produce_numbered(src, t, 600, n)
    cfg = write_config(flow_yaml(unique, f'["{t}"]'))
    from mirror.config import ClusterConfig
    from mirror.kafka import Admin

    admin = Admin("src", ClusterConfig(bootstrap=src))
    a, b = MirrorProcess(cfg), MirrorProcess(cfg)
    try:
        logs = lambda: f"\n--- a:\n{a.output()}\n--- b:\n{b.output()}"

        def both_in_group() -> bool:
            assert a.alive() and b.alive(), "a worker exited early" + logs()
            return admin.group_members(f"mirror-{unique}") == 2

        wait_for(both_in_group, 60, "both workers in the group", detail=logs)
        wait_for(
            lambda: f"src.{t}" in topics(dst) and sum(end_offsets(dst, f"src.{t}", n).values()) == 600,
            60,
            "the first records",
        )
        # Kill one before the bulk arrives: its partitions can only be finished by the other.
        a.kill()
        produce_numbered(src, t, total - 600, n, start=600, size=200)
        wait_for(lambda: sum(end_offsets(dst, f"src.{t}", n).values()) >= total, 180, "the surviving worker to finish")
        wait_for(lambda: admin.group_members(f"mirror-{unique}") == 1, 30, "the dead worker to leave the group")
        b.signal(signal.SIGTERM)
        assert b.wait(60) == 0, b.output()
    finally:
        a.close()
        b.close()
    target = read_topic(dst, f"src.{t}", n)
    seen = {int(r.value.split(b":")[0]) for recs in target.values() for r in recs}
    assert seen == set(range(total))
    assert group_offsets(src, f"mirror-{unique}", t, n) == end_offsets(src, t, n)


def test_workers_with_an_eager_assignor_hand_partitions_over_without_loss_or_duplicates(clusters, write_config, unique):
    """roundrobin (the setting for flows above ~5,000 partitions): a second worker joining
    mid-stream and the first one leaving each revoke every partition (eager); each handover
    drains and commits first, so the target holds every record exactly once."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n, total = f"eager-{unique}", 4, 40_000
    create_topic(src, t, n)
    produce_numbered(src, t, 10_000, n)
    cfg = write_config(
        flow_yaml(unique, f'["{t}"]', extra="    consumer: {partition.assignment.strategy: roundrobin}\n")
    )
    from mirror.config import ClusterConfig
    from mirror.kafka import Admin

    admin = Admin("src", ClusterConfig(bootstrap=src))
    a, b = MirrorProcess(cfg), None
    try:
        logs = lambda: f"\n--- a:\n{a.output()}\n--- b:\n{b.output() if b else ''}"
        wait_for(
            lambda: f"src.{t}" in topics(dst) and sum(end_offsets(dst, f"src.{t}", n).values()) > 0,
            60,
            "the first records",
            detail=logs,
        )
        b = MirrorProcess(cfg)
        # Two members are counted as soon as b asks to join; the eager rebalance that follows
        # is over once b has its share (a SIGTERM before that revoked a's partitions once).
        wait_for(
            lambda: admin.group_members(f"mirror-{unique}") == 2 and "assigned" in b.output(),
            60,
            "both workers in the group",
            detail=logs,
        )
        produce_numbered(src, t, total - 10_000, n, start=10_000)
        a.signal(signal.SIGTERM)
        assert a.wait(60) == 0, logs()
        wait_for(
            lambda: group_offsets(src, f"mirror-{unique}", t, n) == end_offsets(src, t, n),
            120,
            "the remaining worker to commit everything",
            detail=logs,
        )
        b.signal(signal.SIGTERM)
        assert b.wait(60) == 0, logs()
        # The eager protocol at work: b's arrival took every partition from a (a lifecycle line
        # "rebalanced: -N partitions"; the revoke of a's stop is its stop line), then b had some.
        assert re.search(r"rebalanced: -\d+ partitions", a.output()) and "assigned" in b.output(), logs()
    finally:
        a.close()
        if b is not None:
            b.close()
    target = read_topic(dst, f"src.{t}", n)
    seen = [int(r.value.split(b":")[0]) for recs in target.values() for r in recs]
    assert set(seen) == set(range(total))
    assert len(seen) == total, f"{len(seen) - total} duplicates"


def test_workers_flag_runs_processes_that_finish_together(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"workers-{unique}", 4
    create_topic(src, t, n)
    produce_numbered(src, t, 20_000, n)
    cfg = write_config(flow_yaml(unique, f'["{t}"]'))
    with MirrorProcess(cfg, "--workers", "2", "--until-caught-up") as m:
        assert m.wait(120) == 0, m.output()
    assert group_offsets(src, f"mirror-{unique}", t, n) == end_offsets(src, t, n)
    assert sum(end_offsets(dst, f"src.{t}", n).values()) == 20_000


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_workers_stop_cleanly_when_their_supervisor_is_killed(clusters, write_config, unique):
    src = clusters.bootstrap("src")
    t, n = f"orphan-{unique}", 4
    create_topic(src, t, n)
    produce_numbered(src, t, 2000, n)
    # No periodic commit during the test: the group's offsets can then only come from the
    # commits a worker makes as partitions leave it (a rebalance, or its way out).
    cfg = write_config(flow_yaml(unique, f'["{t}"]').replace("commit_interval: 500ms", "commit_interval: 10m"))
    from mirror.config import ClusterConfig
    from mirror.kafka import Admin

    admin = Admin("src", ClusterConfig(bootstrap=src))
    with MirrorProcess(cfg, "--workers", "2") as m:
        # Both members listed is not enough: the group may still be joining (the brokers'
        # initial rebalance delay), with nothing assigned, copied or to commit yet.
        wait_for(lambda: admin.group_members(f"mirror-{unique}") == 2, 60, "both workers in the group", detail=m.output)
        dst = clusters.bootstrap("dst")
        wait_for(lambda: sum(end_offsets(dst, f"src.{t}", n).values()) == 2000, 60, "the copy", detail=m.output)
        workers = children(m.proc.pid)
        assert len(workers) == 2, workers
        m.kill()  # SIGKILL: the supervisor cannot forward anything
        try:
            wait_for(lambda: not any(_alive(w) for w in workers), 30, "the orphaned workers to stop", detail=m.output)
        finally:
            for w in filter(_alive, workers):
                os.kill(w, signal.SIGKILL)
    assert "supervisor (pid" in m.output()
    # they drained and committed on the way out (a SIGKILLed worker commits nothing)
    assert group_offsets(src, f"mirror-{unique}", t, n) == end_offsets(src, t, n)


def test_record_too_large_stops_without_committing_past_it(clusters, write_config, unique, capsys):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t = f"big-{unique}"
    create_topic(src, t, 1)
    create_topic(dst, f"src.{t}", 1, {"max.message.bytes": "20000"})
    p = producer(src)
    for i in range(10):
        p.produce(t, value=b"small-%d" % i)
    big = os.urandom(100_000)  # incompressible: lz4 must not shrink it under the limit
    p.produce(t, value=big)  # offset 10
    for i in range(5):
        p.produce(t, value=b"after-%d" % i)
    assert p.flush(30) == 0
    cfg = write_config(flow_yaml(unique, f'["{t}"]'))
    rc = main(["run", "-c", str(cfg), "--until-caught-up"])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"cannot mirror {t}[0]@10" in err, err
    assert len(err.strip().splitlines()) == 1
    assert group_offsets(src, f"mirror-{unique}", t, 1)[0] <= 10
    target = [r.value for r in read_partition(dst, f"src.{t}", 0)]
    assert big not in target
    assert target[:10] == [b"small-%d" % i for i in range(10)][: len(target[:10])]


def test_target_with_fewer_partitions_is_grown(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t = f"grow-{unique}"
    create_topic(src, t, 3)
    create_topic(dst, f"src.{t}", 1)
    produce_numbered(src, t, 300, 3)
    cfg = write_config(flow_yaml(unique, f'["{t}"]'))
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    assert topics(dst)[f"src.{t}"] == 3
    assert_same(read_topic(src, t, 3), read_topic(dst, f"src.{t}", 3))


def test_deleted_target_topic_is_recreated_and_refilled(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"del-{unique}", 2
    create_topic(src, t, n)
    produce_numbered(src, t, 1000, n)
    cfg = write_config(flow_yaml(unique, f'["{t}"]'))
    with MirrorProcess(cfg) as m:
        wait_for(
            lambda: f"src.{t}" in topics(dst) and sum(end_offsets(dst, f"src.{t}", n).values()) == 1000,
            60,
            "the first records",
        )
        delete_topic(dst, f"src.{t}")
        produce_numbered(src, t, 1000, n, start=1000)
        wait_for(
            lambda: f"src.{t}" in topics(dst) and sum(end_offsets(dst, f"src.{t}", n).values()) >= 2000,
            90,
            "the topic to be refilled",
        )
        m.signal(signal.SIGTERM)
        assert m.wait(60) == 0, m.output()
    target = read_topic(dst, f"src.{t}", n)
    source = read_topic(src, t, n)
    assert_same(source, target)


def test_backpressure_pauses_without_skipping_or_reordering(clusters, write_config, unique):
    """A producer queue of 500 records forces the pause/resume path again and again."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"bp-{unique}", 4
    create_topic(src, t, n)
    produce_numbered(src, t, 40_000, n)
    cfg = write_config(flow_yaml(unique, f'["{t}"]', extra="    producer: {queue.buffering.max.messages: 500}\n"))
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    assert_same(read_topic(src, t, n), read_topic(dst, f"src.{t}", n))
