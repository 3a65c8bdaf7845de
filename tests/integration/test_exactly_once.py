"""Exactly-once mirroring on real brokers: the progress group, fencing, and the copy through faults."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from mirror.cli import main
from mirror.config import ClusterConfig
from mirror.kafka.progress import (
    ProgressGroup,
    ProgressPending,
    TransactionFailed,
    fence,
    new_writer_id,
    progress_offsets,
    read_progress,
    transact,
)
from mirror.kafka.settings import transactional_settings
from mirror.store.sqlite import SqliteStore
from tests.integration.test_failover import consume_and_commit
from tests.integration.test_failover import group_offsets as failover_offsets
from tests.integration.test_mirror_datapath import flow_yaml, produce_numbered
from tests.support.kafkautil import (
    create_topic,
    delete_topic,
    end_offsets,
    group_offsets,
    producer,
    read_partition,
    topics,
    wait_for,
)
from tests.support.mirrorproc import MirrorProcess


def _writer(bootstrap: str, writer_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, **transactional_settings(writer_id)})
    producer.init_transactions(30)
    return producer


def _write(producer: Producer, topic: str, values: list[bytes], group: ProgressGroup, writer: str, at: int) -> None:
    """A transaction of `values` with progress `at` (left open: the caller commits or not)."""
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, v, partition=0)
    producer.flush(30)
    producer.send_offsets_to_transaction(progress_offsets({(topic, 0): at}, writer), group.metadata(), 30)


@pytest.fixture
def target(clusters, unique):
    bootstrap = clusters.bootstrap("dst")
    topic = f"eos-progress-{unique}"
    create_topic(bootstrap, topic, 1)
    cluster = ClusterConfig(bootstrap=bootstrap, timeout=10)
    group = ProgressGroup("dst", cluster, f"mirror-eos.{unique}")
    yield bootstrap, cluster, topic, group
    group.close()


def test_progress_commits_with_a_memberless_group(target):
    """send_offsets_to_transaction to a group nobody joined, with a never-subscribed consumer's
    metadata: the offset and the writer id are committed with the records."""
    bootstrap, cluster, topic, group = target
    writer = new_writer_id("t")
    producer = _writer(bootstrap, writer)
    _write(producer, topic, [b"a", b"b", b"c"], group, writer, 103)
    producer.commit_transaction(30)
    got = read_progress("dst", cluster, group.group, [(topic, 0)], 10)
    assert got[(topic, 0)].next_offset == 103
    assert got[(topic, 0)].writer_id == writer
    assert [r.value for r in read_partition(bootstrap, topic, 0)] == [b"a", b"b", b"c"]


def test_pending_progress_is_not_read_as_done(target):
    bootstrap, cluster, topic, group = target
    writer = new_writer_id("t")
    producer = _writer(bootstrap, writer)
    _write(producer, topic, [b"a"], group, writer, 10)
    producer.commit_transaction(30)
    _write(producer, topic, [b"b"], group, writer, 20)
    with pytest.raises(ProgressPending):
        group.read([(topic, 0)], 3)
    # The last committed progress, pending or not: where a new owner learns whom to fence.
    assert group.read([(topic, 0)], 10, stable=False)[(topic, 0)].next_offset == 10
    producer.commit_transaction(30)
    assert group.read([(topic, 0)], 10)[(topic, 0)].next_offset == 20


def test_fence_aborts_the_zombie_and_fails_its_commit(target):
    bootstrap, cluster, topic, group = target
    writer = new_writer_id("t")
    zombie = _writer(bootstrap, writer)
    _write(zombie, topic, [b"kept"], group, writer, 1)
    zombie.commit_transaction(30)
    _write(zombie, topic, [b"zombie-1", b"zombie-2"], group, writer, 3)

    fence("dst", cluster, writer, 30)

    # The open transaction is aborted: the progress is stable again, at the last commit.
    assert (
        group.read([(topic, 0)], 10)[(topic, 0)]
        == read_progress("dst", cluster, group.group, [(topic, 0)], 10)[(topic, 0)]
    )
    assert group.read([(topic, 0)], 10)[(topic, 0)].next_offset == 1
    with pytest.raises(TransactionFailed) as failed:
        transact("commit", zombie.commit_transaction, 10)
    assert failed.value.fenced
    assert [r.value for r in read_partition(bootstrap, topic, 0)] == [b"kept"]


# ---------------------------------------------------------------------------- the copy through faults


def eos_flow(unique: str, topic: str, extra: str = "") -> str:
    return flow_yaml(unique, f'["{topic}"]', extra="    exactly_once: true\n" + extra)


def exactly(src: str, dst: str, topic: str, partitions: int) -> dict[str, int]:
    """Compare a topic with its copy, read_committed on both sides: every source record once,
    in order per partition. Returns the counts (lost and duplicated must be 0)."""
    lost = dup = copied = 0
    for p in range(partitions):
        want = [r.value for r in read_partition(src, topic, p)]
        got = [r.value for r in read_partition(dst, f"src.{topic}", p)]
        copied += len(got)
        lost += len(set(want) - set(got))
        dup += len(got) - len(set(got))
        if not lost and not dup:
            assert got == want, f"partition {p}: order differs"
    return {"copied": copied, "lost": lost, "duplicated": dup}


def caught_up(src: str, unique: str, topic: str, partitions: int) -> Callable[[], bool]:
    return lambda: group_offsets(src, f"mirror-{unique}", topic, partitions) == end_offsets(src, topic, partitions)


def copy_state(
    src: str, dst: str, unique: str, topic: str, partitions: int, output: Callable[[], str]
) -> Callable[[], str]:
    """For a time-out's message: the source group's offsets against the source's ends, the
    target's progress and ends, then the end of the mirror's log."""

    def state() -> str:
        try:
            tps = [(f"src.{topic}", p) for p in range(partitions)]
            cluster = ClusterConfig(bootstrap=dst, timeout=10)
            progress = read_progress("dst", cluster, f"mirror-eos.f-{unique}", tps, 10)
            return (
                f"source group {group_offsets(src, f'mirror-{unique}', topic, partitions)}, "
                f"source ends {end_offsets(src, topic, partitions)}, "
                f"progress { {tp[1]: (got.next_offset, got.writer_id) for tp, got in sorted(progress.items())} }, "
                f"target ends {end_offsets(dst, f'src.{topic}', partitions)}\n"
            ) + output()[-6000:]
        except Exception as exc:  # noqa: BLE001  # the message must still show the log
            return f"(offsets unreadable: {exc})\n" + output()[-6000:]

    return state


@pytest.mark.slow
def test_sigkill_three_times_during_a_copy(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n, total = f"eos-kill-{unique}", 4, 200_000
    create_topic(src, t, n)
    produce_numbered(src, t, total, n, size=8)
    cfg = write_config(eos_flow(unique, t))
    kills = 0
    copied = lambda: sum(end_offsets(dst, f"src.{t}", n).values()) if f"src.{t}" in topics(dst) else 0  # noqa: E731
    for kills in range(1, 4):
        with MirrorProcess(cfg) as m:
            mark = kills * total // 4
            wait_for(
                lambda: copied() > mark,  # noqa: B023 (waited for before the next round)
                120,
                f"{mark} records copied",
                detail=m.output,
            )
            m.kill()
    with MirrorProcess(cfg) as m:
        # The killed worker may have copied everything already: the group is caught up
        # before this one has even started (and fenced the killed one's id).
        wait_for(
            lambda: re.search(r"claimed [1-9]\d* partitions", m.output()) is not None, 60, "the claim", detail=m.output
        )
        wait_for(
            caught_up(src, unique, t, n),
            120,
            "the copy to finish",
            detail=copy_state(src, dst, unique, t, n, m.output),
        )
        m.stop()
        assert "fenced" in m.output(), m.output()[-3000:]
    counts = exactly(src, dst, t, n)
    print(f"after {kills} SIGKILLs: {counts}")
    assert counts == {"copied": total, "lost": 0, "duplicated": 0}


def rewind_group(bootstrap: str, group: str, topic: str, partitions: int, to: int) -> None:
    """Commit `group`'s offsets of `topic` back to `to` (keeping their metadata), as a worker
    killed between a transaction's commit and the source group's commit leaves them."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        now = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        c.commit(offsets=[TopicPartition(topic, tp.partition, to, tp.metadata) for tp in now], asynchronous=False)
    finally:
        c.close()


def test_until_caught_up_ends_when_the_source_group_is_behind_the_progress(clusters, write_config, unique):
    """Everything copied (the progress at the end), the source group behind: the run resumes
    at the progress and reads nothing, yet must bring the group to the end and finish."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"eos-behind-{unique}", 2
    create_topic(src, t, n)
    produce_numbered(src, t, 400, n, size=8)
    cfg = write_config(eos_flow(unique, t))
    with MirrorProcess(cfg, "--until-caught-up") as m:
        assert m.wait(120) == 0, m.output()[-3000:]
    rewind_group(src, f"mirror-{unique}", t, n, 50)
    assert group_offsets(src, f"mirror-{unique}", t, n) == {0: 50, 1: 50}
    with MirrorProcess(cfg, "--until-caught-up") as m:
        try:
            rc = m.wait(60)
        except subprocess.TimeoutExpired:
            rc = None
        assert rc == 0, copy_state(src, dst, unique, t, n, m.output)()
    assert group_offsets(src, f"mirror-{unique}", t, n) == end_offsets(src, t, n)
    assert exactly(src, dst, t, n) == {"copied": 400, "lost": 0, "duplicated": 0}


@pytest.mark.slow
def test_target_broker_stopped_and_started_during_a_copy(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"eos-outage-{unique}", 3
    create_topic(src, t, n)
    produce_numbered(src, t, 60_000, n, size=8)
    cfg = write_config(eos_flow(unique, t))
    with MirrorProcess(cfg) as m:
        wait_for(
            lambda: f"src.{t}" in topics(dst) and sum(end_offsets(dst, f"src.{t}", n).values()) > 10_000,
            60,
            "records copied",
            detail=m.output,
        )
        clusters.stop("dst")
        try:
            produce_numbered(src, t, 20_000, n, start=60_000, size=8)  # written while the target is down
            wait_for(
                lambda: "unreachable" in m.output() or "aborted" in m.output(),
                60,
                "the outage noticed",
                detail=m.output,
            )
        finally:
            clusters.start("dst")
        wait_for(caught_up(src, unique, t, n), 180, "the copy to finish", detail=m.output)
        m.stop()
    counts = exactly(src, dst, t, n)
    print(f"target restarted mid-copy: {counts}")
    assert counts == {"copied": 80_000, "lost": 0, "duplicated": 0}


@pytest.mark.slow
def test_a_second_worker_joins_and_leaves(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n, batch = f"eos-pair-{unique}", 6, 60_000
    create_topic(src, t, n)
    produce_numbered(src, t, batch, n, size=8)
    cfg = write_config(eos_flow(unique, t))
    a = MirrorProcess(cfg)
    b = None
    try:
        copied = lambda: sum(end_offsets(dst, f"src.{t}", n).values())  # noqa: E731
        wait_for(lambda: f"src.{t}" in topics(dst) and copied() > 10_000, 60, "records copied", detail=a.output)
        b = MirrorProcess(cfg)  # joins while a copies
        wait_for(lambda: re.search(r"claimed [1-9]\d* partitions", b.output()) is not None, 60, "b claims partitions")
        produce_numbered(src, t, batch, n, start=batch, size=8)  # both copy
        b.stop()  # leaves while they copy: its partitions go back to a (released: nobody to fence)
        produce_numbered(src, t, batch, n, start=2 * batch, size=8)
        wait_for(caught_up(src, unique, t, n), 120, "the copy to finish", detail=a.output)
        a.stop()
    finally:
        a.close()
        if b is not None:
            b.close()
    counts = exactly(src, dst, t, n)
    print(f"second worker joined and left: {counts}")
    assert counts == {"copied": 3 * batch, "lost": 0, "duplicated": 0}


@pytest.mark.slow
def test_a_frozen_worker_cannot_commit_after_its_partitions_moved(clusters, write_config, unique):
    """SIGSTOP past the session timeout while records are produced; another worker takes the
    partitions (and fences the frozen one's transactional id); SIGCONT: nothing of the frozen
    worker's open transaction reaches read_committed consumers."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"eos-zombie-{unique}", 4
    create_topic(src, t, n)
    extra = "    producer: {linger.ms: 800}\n    consumer: {session.timeout.ms: 6000}\n"
    cfg = write_config(eos_flow(unique, t, extra))
    stop = threading.Event()
    produced = [0]

    def produce_until_stopped() -> None:
        p = producer(src)
        while not stop.is_set() or produced[0] < 20_000:
            try:
                i = produced[0]
                p.produce(t, key=b"k%d" % i, value=b"%d" % i, partition=i % n)
                produced[0] += 1
            except BufferError:
                p.poll(0.05)
            if produced[0] % 100 == 0:
                p.poll(0.01)
        assert p.flush(30) == 0

    from mirror.config import ClusterConfig
    from mirror.kafka import Admin

    admin = Admin("src", ClusterConfig(bootstrap=src))
    a, b = MirrorProcess(cfg), MirrorProcess(cfg)
    th = threading.Thread(target=produce_until_stopped, daemon=True)
    logs = lambda: f"\n--- a:\n{a.output()[-4000:]}\n--- b:\n{b.output()[-4000:]}"  # noqa: E731
    try:
        wait_for(lambda: admin.group_members(f"mirror-{unique}") == 2, 60, "both workers in the group", detail=logs)
        th.start()
        owns = lambda m: re.search(r"claimed [1-9]\d* partitions", m.output()) is not None  # noqa: E731
        wait_for(lambda: owns(a) and owns(b), 60, "both workers to own partitions", detail=logs)
        wait_for(lambda: sum(end_offsets(dst, f"src.{t}", n).values()) > 3000, 60, "records flowing", detail=logs)
        a.signal(signal.SIGSTOP)  # frozen inside an open transaction, records queued
        try:
            wait_for(lambda: admin.group_members(f"mirror-{unique}") == 1, 60, "a expelled", detail=logs)
            fenced_a = lambda: re.search(r"fenced mirror\.f-\S+ \(?", b.output()) or "fenced mirror." in b.output()  # noqa: E731
            wait_for(lambda: bool(fenced_a()), 60, "b to fence a's transactional id", detail=logs)
        finally:
            a.signal(signal.SIGCONT)
        wait_for(lambda: admin.group_members(f"mirror-{unique}") == 2, 60, "a back in the group", detail=logs)
        stop.set()
        th.join(60)
        wait_for(caught_up(src, unique, t, n), 120, "the copy to finish", detail=logs)
        a.stop()
        b.stop()
        # The scenario happened: the frozen worker woke up with a transaction it could no
        # longer commit (fenced), or was told by the group first that its partitions moved.
        assert re.search(r"fenced|old epoch|lost [1-9]\d* partitions", a.output()), logs()
    finally:
        stop.set()
        a.close()
        b.close()
    counts = exactly(src, dst, t, n)
    print(f"zombie after SIGSTOP: {counts}")
    assert counts == {"copied": produced[0], "lost": 0, "duplicated": 0}


@pytest.mark.slow
def test_a_source_transaction_aborted_mid_copy(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"eos-srctxn-{unique}", 2
    create_topic(src, t, n)
    cfg = write_config(eos_flow(unique, t))
    p = Producer({"bootstrap.servers": src, "transactional.id": f"src-{unique}"})
    p.init_transactions(30)

    def txn(values: range, *, commit: bool) -> None:
        p.begin_transaction()
        for i in values:
            p.produce(t, b"%d" % i, partition=i % n)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)

    with MirrorProcess(cfg) as m:
        txn(range(0, 5000), commit=True)
        wait_for(lambda: f"src.{t}" in topics(dst), 60, "the target topic", detail=m.output)
        txn(range(5000, 8000), commit=False)  # aborted: must never reach the target
        txn(range(8000, 12000), commit=True)
        wait_for(caught_up(src, unique, t, n), 60, "the copy to finish", detail=m.output)
        m.stop()
    counts = exactly(src, dst, t, n)
    assert counts == {"copied": 9000, "lost": 0, "duplicated": 0}
    copied = {int(r.value) for p_ in range(n) for r in read_partition(dst, f"src.{t}", p_)}
    assert not copied & set(range(5000, 8000))


# ---------------------------------------------------------------------------- translation, lag, canary


@pytest.mark.slow
def test_failover_lag_and_canary_are_exact_with_transactions(clusters, write_config, unique, tmp_path, capsys):
    """Every target transaction ends with a commit marker, which takes a target offset: the
    offset map must account for each, and a group failed over with --translate starts on the
    target exactly at the record after its last one on the source. Lag and the canary read
    the target read_committed, and see the copies once their transaction committed."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    plain, txn, group = f"eos-tr-{unique}", f"eos-trtx-{unique}", f"app-{unique}"
    create_topic(src, plain, 2)
    create_topic(src, txn, 1)
    body = (
        eos_flow(unique, f'{plain}", "{txn}', f"    groups: [app-{unique}]\n    checkpoint_interval: 1s\n").replace(
            "commit_interval: 500ms", "commit_interval: 200ms"
        )
        + f"offset_store:\n  kind: sqlite\n  path: {tmp_path / 'offsets.db'}\n"
        + f"canary: {{topic: canary-{unique}, interval: 1s, max_latency: 10s}}\n"
    )
    cfg = write_config(body)
    tx = Producer({"bootstrap.servers": src, "transactional.id": f"src-tr-{unique}"})
    tx.init_transactions(30)
    with MirrorProcess(cfg) as m:
        for r in range(6):  # rounds while the mirror runs: many target transactions, each with its marker
            produce_numbered(src, plain, 500, 2, start=r * 500, size=8)
            tx.begin_transaction()
            for i in range(50):
                tx.produce(txn, b"t%d-%d" % (r, i), partition=0)
            tx.flush(30)
            (tx.commit_transaction if r % 2 == 0 else tx.abort_transaction)(30)
            wait_for(caught_up(src, unique, plain, 2), 60, f"round {r} copied", detail=m.output)
        wait_for(caught_up(src, unique, txn, 1), 60, "the transactional topic copied", detail=m.output)
        capsys.readouterr()
        assert main(["lag", "-c", str(cfg), "--json"]) == 0
        lag = json.loads(capsys.readouterr().out)["flows"][0]["partitions"]
        assert {p["lag_records"] for p in lag if p["source_topic"] in (plain, txn)} == {0}, lag
        assert main(["canary", "once", "-c", str(cfg), "--json"]) == 0
        (probe,) = json.loads(capsys.readouterr().out)["flows"]
        assert probe["received"] == probe["sent"] and probe["lost"] == 0, probe
        m.stop()
    assert exactly(src, dst, plain, 2)["duplicated"] == 0
    rows = SqliteStore(tmp_path / "offsets.db").syncs(f"f-{unique}", plain, 0)
    assert len(rows) >= 6, f"a row per transaction expected (markers move the delta): {rows}"

    read_plain = consume_and_commit(src, group, plain, {0: 777, 1: 1201})
    read_txn = consume_and_commit(src, group, txn, {0: 101})
    capsys.readouterr()
    args = ["failover", "plan", "-c", str(cfg), "--flow", f"f-{unique}", "--group", group, "--translate", "--json"]
    assert main(args) == 0
    plan = json.loads(capsys.readouterr().out)
    assert all(p["unmirrored"] == 0 for p in plan["partitions"]), plan
    assert main([*args[:1], "apply", *args[2:-1], "--yes", "--backup", str(tmp_path / "backup.json")]) == 0
    for topic, p, (last_read, _) in [(plain, 0, read_plain[0]), (plain, 1, read_plain[1]), (txn, 0, read_txn[0])]:
        off = failover_offsets(dst, group, f"src.{topic}", p + 1)[p]
        target = read_partition(dst, f"src.{topic}", p)
        source = [r.value for r in read_partition(src, topic, p)]
        before = [r.value for r in target if r.offset < off]
        at = [r.value for r in target if r.offset >= off]
        # exactly the records after the last one read on the source: nothing lost, nothing repeated
        assert before[-1] == last_read, f"{topic}[{p}]"
        assert at == source[source.index(last_read) + 1 :], f"{topic}[{p}]"


@pytest.mark.slow
def test_source_topic_recreated_while_the_flow_is_stopped(clusters, write_config, unique):
    """The flow copied a topic (progress 1,000 per partition on the target) and stopped; the
    topic was deleted, created again and refilled past that progress. The next run copies the
    new incarnation whole: the progress names the deleted topic's id, so it counts as none."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"eos-reborn-{unique}", 2
    create_topic(src, t, n)
    produce_numbered(src, t, 2000, n, size=8)
    cfg = write_config(eos_flow(unique, t))
    with MirrorProcess(cfg) as m:
        wait_for(caught_up(src, unique, t, n), 90, "the first incarnation copied", detail=m.output)
        m.stop()
    old = {p: [r.value for r in read_partition(src, t, p)] for p in range(n)}
    delete_topic(src, t)
    wait_for(lambda: t not in topics(src), 30, "the source topic deleted")
    # Its deletion may still be under way on the broker: created once it is done.
    wait_for(lambda: create_topic(src, t, n) is None, 30, "the source topic created again")
    produce_numbered(src, t, 3000, n, start=10_000, size=8)
    with MirrorProcess(cfg) as m:
        wait_for(caught_up(src, unique, t, n), 90, "the new incarnation copied", detail=m.output)
        m.stop()
    for p in range(n):
        new = [r.value for r in read_partition(src, t, p)]
        assert [r.value for r in read_partition(dst, f"src.{t}", p)] == old[p] + new, f"partition {p}"


@pytest.mark.slow
def test_target_topic_deleted_mid_copy(clusters, write_config, unique):
    """The resync with exactly_once (review findings 1-4): the target topic deleted while the
    worker copies; it is recreated and refilled from the source's beginning, each record once."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n = f"eos-gone-{unique}", 3
    create_topic(src, t, n)
    produce_numbered(src, t, 6000, n, size=8)
    cfg = write_config(eos_flow(unique, t))
    with MirrorProcess(cfg) as m:
        wait_for(caught_up(src, unique, t, n), 90, "the first records", detail=m.output)
        delete_topic(dst, f"src.{t}")
        produce_numbered(src, t, 3000, n, start=6000, size=8)
        wait_for(lambda: "disappeared" in m.output(), 60, "the deletion noticed", detail=m.output)
        wait_for(caught_up(src, unique, t, n), 120, "the topic refilled", detail=m.output)
        m.stop()
    counts = exactly(src, dst, t, n)
    print(f"target topic deleted mid-copy: {counts}")
    assert counts == {"copied": 9000, "lost": 0, "duplicated": 0}


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_partitions_added_during_a_copy(clusters, write_config, unique, workers):
    """The source topic grows from 2 to 4 partitions while an exactly-once copy runs: the
    mirror grows the target, claims the new partitions (no progress yet: from their first
    record, including those written before it noticed) and every record of old and new
    partitions lands once, in order."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, before, after = f"eos-grow-{unique}", 2, 4
    create_topic(src, t, before)
    produce_numbered(src, t, 10_000, before, size=8)
    cfg = write_config(eos_flow(unique, t))
    with MirrorProcess(cfg, "--workers", str(workers)) as m:
        wait_for(caught_up(src, unique, t, before), 90, "the first records", detail=m.output)
        admin = AdminClient({"bootstrap.servers": src})  # held: a collected client fails its futures
        admin.create_partitions([NewPartitions(t, after)])[t].result(30)
        produce_numbered(src, t, 10_000, after, start=10_000, size=8)  # new partitions written at once
        wait_for(caught_up(src, unique, t, after), 120, "the new partitions copied", detail=m.output)
        m.stop()
    counts = exactly(src, dst, t, after)
    print(f"partitions added mid-copy ({workers} workers): {counts}")
    assert counts == {"copied": 20_000, "lost": 0, "duplicated": 0}
