"""`mirror spark run` on real Spark (local mode and a standalone cluster) and real Kafka.

One Spark session (local mode) is shared by the in-process tests; the standalone cluster and
the driver-kill test run `mirror spark run` as a child process, like a user would.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from mirror.cli import main
from mirror.config import load
from mirror.devenv.common import spawn_prefix
from mirror.store import open_store
from tests.support.kafkautil import (
    Rec,
    create_topic,
    delete_topic,
    end_offsets,
    group_offsets,
    producer,
    read_partition,
    read_topic,
    wait_for,
)
from tests.support.kafkautil import topics as kafka_topics
from tests.support.mirrorproc import children

pytestmark = pytest.mark.slow

# Per data topic (with the transactional topic's share: 27,500 committed records in all): enough
# for several micro-batches per partition on every code path, and what the suite's time can
# carry. MIRROR_TEST_SPARK_RECORDS runs a larger check by hand.
RECORDS = int(os.environ.get("MIRROR_TEST_SPARK_RECORDS", "20000"))


def flow_yaml(unique: str, include: str, db: Path, *, groups: str = "['app-.*']", provenance: bool = True) -> str:
    return f"""\
flows:
  - name: f-{unique}
    source: src
    target: dst
    consumer_group: mirror-{unique}
    provenance_headers: {str(provenance).lower()}
    refresh_interval: 1s
    commit_interval: 300ms
    topics: {{include: ['{include}']}}
    groups: {groups}
offset_store:
  kind: sqlite
  path: {db}
"""


def load_data(src: str, unique: str, records: int = RECORDS) -> dict[str, int]:
    """A plain topic (keys, null values, headers, explicit timestamps, 3 partitions) and a
    transactional one with aborted transactions. Returns topic -> partitions."""
    plain, tx = f"sp-{unique}-plain", f"sp-{unique}-tx"
    create_topic(src, plain, 3)
    create_topic(src, tx, 2)
    p = producer(src)
    base = 1_600_000_000_000
    for i in range(records):
        headers = [("h", b"%d" % i), ("empty", None)] if i % 3 == 0 else None
        value = None if i % 7 == 0 else b"v-%d" % i
        key = None if i % 11 == 0 else b"k-%d" % (i % 100)
        p.produce(plain, value=value, key=key, partition=i % 3, timestamp=base + i * 13, headers=headers)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    t = producer(src, **{"transactional.id": f"tx-{unique}"})
    t.init_transactions(30)
    per_txn = 500
    for n in range(records // per_txn // 2):
        t.begin_transaction()
        for i in range(per_txn):
            t.produce(tx, value=b"t%d-%d" % (n, i), key=b"%d" % i, partition=i % 2, timestamp=base + n * 1000 + i)
        t.flush(30)
        if n % 4 == 3:
            t.abort_transaction(30)
        else:
            t.commit_transaction(30)
    return {plain: 3, tx: 2}


def one_partition_topic(src: str, topic: str, records: int, prefix: bytes = b"v") -> str:
    """`topic` created with one partition holding `records` records (values prefix + i, keys i)."""
    create_topic(src, topic, 1)
    p = producer(src)
    for i in range(records):
        p.produce(topic, value=prefix + b"%d" % i, key=b"%d" % i, partition=0)
    assert p.flush(30) == 0
    return topic


def assert_exact(src: str, dst: str, unique: str, topics: dict[str, int]) -> dict[str, dict[int, list[Rec]]]:
    """Every committed source record once on the target: same partition, order, key, value,
    timestamp and headers, with its provenance; nothing aborted; the group at the end offsets."""
    mirrored = {}
    for topic, parts in topics.items():
        source, target = read_topic(src, topic, parts), read_topic(dst, f"src.{topic}", parts)
        for p in range(parts):
            assert [r.content() for r in target[p]] == [r.content() for r in source[p]], f"{topic}[{p}]"
            assert [int(r.provenance()["offset"]) for r in target[p]] == [r.offset for r in source[p]]
            assert not any(
                r.value and r.value.startswith(b"t") and int(r.value[1:].split(b"-")[0]) % 4 == 3 for r in target[p]
            ), "an aborted record was mirrored"
        assert group_offsets(src, f"mirror-{unique}", topic, parts) == end_offsets(src, topic, parts)
        mirrored[topic] = target
    return mirrored


def assert_translation_exact(
    src: str, dst: str, config: Path, unique: str, topic: str, parts: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """An app group part-way through `topic`: `failover plan --translate` gives, per partition,
    the copy of the first record it has not read (from the provenance headers)."""
    from confluent_kafka import Consumer, TopicPartition

    group = f"app-{unique}"
    source = read_topic(src, topic, parts)
    positions = {p: source[p][len(source[p]) * (p + 1) // (parts + 1)].offset for p in range(parts)}
    c = Consumer({"bootstrap.servers": src, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in positions.items()], asynchronous=False)
    c.close()
    expected = {}
    for p, pos in positions.items():
        recs = read_partition(dst, f"src.{topic}", p)
        expected[p] = next(r.offset for r in recs if int(r.provenance()["offset"]) >= pos)
    capsys.readouterr()
    assert (
        main(
            ["failover", "plan", "-c", str(config), "--flow", f"f-{unique}", "--group", group, "--translate", "--json"]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    got = {r["partition"]: r["target_offset"] for r in plan["partitions"] if r["source_topic"] == topic}
    assert got == expected


def test_local_mode_mirrors_exactly_and_commits_the_group(
    clusters, write_config, unique, tmp_path, spark_local, capsys
):
    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topics = load_data(src, unique)
    config_path = write_config(flow_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db"))
    config = load(config_path)
    t0 = time.monotonic()
    job = run_flow(
        config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local, max_records_per_batch=8000
    )
    took = time.monotonic() - t0
    total = sum(len(v) for t in topics for v in read_topic(src, t, topics[t]).values())
    with capsys.disabled():
        print(f"\nspark local mode: {total} records in {took:.1f}s ({total / took:.0f} rec/s, session already started)")
    assert job.records == total and job.skipped == 0
    assert set(job.paths) == {"jvm"}  # the JVM writer produced every batch
    assert_exact(src, dst, unique, topics)
    store = open_store(config.offset_store)
    try:
        rows = sum(len(store.syncs(f"f-{unique}", t, p)) for t, n in topics.items() for p in range(n))
    finally:
        store.close()
    # delta changes only: one per plain partition, one per transaction marker or aborted batch at most
    assert 3 <= rows <= 3 + 2 * (RECORDS // 500)
    for topic, parts in topics.items():
        assert_translation_exact(src, dst, config_path, unique, topic, parts, capsys)

    # A second run has nothing to do: the group says where it stopped.
    again = run_flow(config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local)
    assert again.records == 0 and again.skipped == 0

    # What a driver crash between produce and commit leaves: records on the target the group
    # has not committed. Rewind the group by 700 records a partition: the replay produces
    # nothing again, and the offset map still translates exactly.
    from mirror.kafka import Admin

    plain = f"sp-{unique}-plain"
    ends = end_offsets(src, plain, 3)
    Admin("src", config.clusters["src"]).alter_group_offsets(
        f"mirror-{unique}", {(plain, p): ends[p] - 700 for p in range(3)}
    )
    replay = run_flow(config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local)
    assert (replay.records, replay.skipped) == (0, 3 * 700)
    # The JVM writer declined the replayed batch (the target holds it): the Python tasks skipped it.
    assert replay.paths.get("python*") == 1
    assert_exact(src, dst, unique, topics)
    assert_translation_exact(src, dst, config_path, unique, plain, 3, capsys)


class SparkRun:
    """`mirror spark run` as a child process (its own driver JVM), for the cluster and kill tests."""

    def __init__(self, config: Path, flow: str, *args: str) -> None:
        self.log = config.with_suffix(f".spark.{time.monotonic_ns()}.log")
        self._logf = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [
                *spawn_prefix(),
                sys.executable,
                "-m",
                "mirror",
                "-v",
                "spark",
                "run",
                "-c",
                str(config),
                "--flow",
                flow,
                *args,
            ],
            stdout=self._logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._logf.flush()

    def output(self) -> str:
        self._logf.flush()
        return self.log.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        """SIGKILL the driver (the Python process); its JVM exits with it (the gateway's stdin closes)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._logf.close()


def test_standalone_cluster_mirrors_exactly_with_tasks_on_its_worker(
    clusters, write_config, unique, tmp_path, spark_cluster, capsys
):
    home, master = spark_cluster
    assert main(["dev", "status", "--home", str(home), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["spark"] == {"master": master, "running": True}

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topics = load_data(src, unique, records=RECORDS // 2)
    config = write_config(flow_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db"))
    run = SparkRun(config, f"f-{unique}", "--master", master, "--until-caught-up")
    try:
        t0 = time.monotonic()
        assert run.wait() == 0, run.output()
        with capsys.disabled():
            print(
                "\nspark standalone (1 worker core): "
                f"{sum(end_offsets(src, t, n)[p] for t, n in topics.items() for p in range(n))} source "
                f"offsets in {time.monotonic() - t0:.1f}s including driver start"
            )
    finally:
        run.close()
    assert_exact(src, dst, unique, topics)
    topic = next(iter(topics))
    assert_translation_exact(src, dst, config, unique, topic, topics[topic], capsys)
    # The tasks ran in an executor of the dev worker: it keeps each application's executor logs.
    apps = list((home / "spark" / "work").glob("app-*"))
    assert apps and any((a / "0" / "stderr").exists() for a in apps)


def _batches(folder: Path) -> list[int]:
    return sorted(int(f.name) for f in folder.iterdir() if f.name.isdigit()) if folder.is_dir() else []


def _batch_ends(checkpoint: Path, batch: int) -> dict[tuple[str, int], int]:
    """A batch's end offsets in Spark's offset log (a version line, a metadata line, the Kafka source's offsets)."""
    doc = json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[2])
    return {(t, int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}


@pytest.mark.timeout(600)  # two driver starts; its own deadlines (kill point, restart) sum to 480 s
def test_driver_killed_mid_batch_and_restarted_resumes_its_checkpoint_exactly(clusters, write_config, unique, tmp_path):
    """The driver is SIGKILLed while a batch is on its way to the target (records landed, the
    group not yet past them). Until then, whenever Spark has recorded a batch complete, the
    group already stands at that batch's range end, transaction markers and aborted records
    included: that is what lets a restart resume Spark's checkpoint. The restart resumes it
    (the same query: its id and batch ids carry on, no "not resuming" warning), replays the
    unfinished batch, and every record arrives once."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    # Half the local-mode test's records (13,750 committed) in batches of 1,500: the kill lands
    # after a few completed batches, and the restart replays one and mirrors the rest.
    topics = load_data(src, unique, records=RECORDS // 2)
    config = write_config(flow_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db"))
    group, plain = f"mirror-{unique}", f"sp-{unique}-plain"
    total_plain = sum(end_offsets(src, plain, 3).values())
    # No --checkpoint: the flow's durable default, beside the config (`spark.checkpoint_dir`).
    checkpoint = tmp_path / ".mirror" / "spark" / f"f-{unique}" / "query"
    run = SparkRun(config, f"f-{unique}", "--max-records-per-batch", "1500")

    def group_at(ends: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        # Every topic of the batch: the flow's and the session's canary topic, which every flow mirrors.
        counts = {t: max(p for tt, p in ends if tt == t) + 1 for t, _ in ends}
        return {(t, p): o for t, n in counts.items() for p, o in group_offsets(src, group, t, n).items()}

    def plain_state() -> tuple[int, int]:
        return sum(max(0, o) for o in group_offsets(src, group, plain, 3).values()), sum(
            end_offsets(dst, f"src.{plain}", 3, committed=False).values()
        )

    checked: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            done = [b for b in _batches(checkpoint / "commits") if b not in checked]
            for batch in done:  # read at once: the group only moves on from here
                ends = _batch_ends(checkpoint, batch)
                at = group_at(ends)
                behind = {tp: (at[tp], o) for tp, o in ends.items() if at[tp] < o}
                assert not behind, f"batch {batch} complete, the group behind its range end: {behind}"
                checked.add(batch)
            if not checked:
                continue
            try:
                committed, landed = plain_state()
            except Exception:  # the target topic does not exist yet
                continue
            if committed > total_plain // 3 and landed > committed:  # a batch landed, not yet committed
                break
            assert committed < total_plain, f"the run finished before a mid-batch kill:\n{run.output()}"
        else:
            raise AssertionError(f"no mid-batch moment to kill the driver at in 240s:\n{run.output()}")
        run.kill()
    finally:
        run.close()
    committed, landed = plain_state()
    assert committed < total_plain
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    before = _batches(checkpoint / "offsets")[-1]
    again = SparkRun(config, f"f-{unique}", "--until-caught-up")
    try:
        assert again.wait(240) == 0, again.output()
        out = again.log.read_text(errors="replace")  # all of it: the warning would come first
    finally:
        again.close()
    summary = [ln for ln in out.splitlines() if "records mirrored on Spark" in ln]
    print(f"killed with the group at {committed} and {landed} plain records on the target; restart: {summary}")
    assert "not resuming the Spark checkpoint" not in out, out[-4000:]
    assert json.loads((checkpoint / "metadata").read_text())["id"] == query_id  # the same query, resumed
    assert _batches(checkpoint / "offsets")[-1] >= before  # batch ids carry on
    assert_exact(src, dst, unique, topics)  # every record exactly once: the replay skipped what had landed


def test_bad_input_one_line_and_the_right_exit_code(clusters, write_config, unique, tmp_path, capsys, monkeypatch):
    from confluent_kafka import Consumer

    src = clusters.bootstrap("src")
    create_topic(src, f"sp-{unique}-plain", 1)
    config = write_config(flow_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db"))
    flow = f"f-{unique}"

    def err(argv: list[str]) -> tuple[int, str]:
        capsys.readouterr()
        rc = main(argv)
        lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(lines) == 1, lines
        return rc, lines[0]

    rc, line = err(["spark", "run", "-c", str(config), "--flow", flow, "--master", "spark://127.0.0.1:9"])
    assert rc == 1 and "Spark master spark://127.0.0.1:9 does not answer" in line

    cp = tmp_path / "cp"
    cp.mkdir()
    (cp / "mirror-flow.json").write_text(json.dumps({"flow": "other", "source": "src", "group": "g"}))
    rc, line = err(["spark", "run", "-c", str(config), "--flow", flow, "--checkpoint", str(cp)])
    assert rc == 2 and f"--checkpoint {cp} belongs to" in line

    member = Consumer({"bootstrap.servers": src, "group.id": f"mirror-{unique}", "session.timeout.ms": 10000})
    member.subscribe([f"sp-{unique}-plain"])
    try:
        wait_for(lambda: member.poll(0.2) is None and bool(member.assignment()), 60, "the group to have a live member")
        rc, line = err(["spark", "run", "-c", str(config), "--flow", flow])
        assert rc == 3 and "live members" in line
    finally:
        member.close()

    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    rc, line = err(["spark", "run", "-c", str(config), "--flow", flow])
    assert rc == 1 and "no Java found" in line
    assert not any(
        t.startswith(f"src.sp-{unique}") for t in kafka_topics(clusters.bootstrap("dst"))
    )  # nothing produced


def test_audit_finds_no_difference_after_a_mirror_then_injected_altered_and_removed_records(
    clusters, write_config, unique, tmp_path, spark_local
):
    from mirror.kafka import Admin
    from mirror.spark.audit import audit
    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic = f"sp-{unique}-audit"
    target = f"src.{topic}"
    create_topic(src, topic, 3)
    p = producer(src)
    base = int(time.time() * 1000) - 3 * 3600_000  # 3 h ago to 30 min ago: within the target's default 7-day retention
    for i in range(900):
        p.produce(
            topic,
            value=None if i % 9 == 0 else b"v%d" % i,
            key=b"k%d" % i,
            partition=i % 3,
            timestamp=base + i * 10_000,
            headers=[("h", b"%d" % i)] if i % 2 else None,
        )
    assert p.flush(30) == 0
    config_path = write_config(flow_yaml(unique, topic, tmp_path / "offsets.db"))
    config = load(config_path)
    flow = config.flow(f"f-{unique}")
    run_flow(config, flow, until_caught_up=True, spark=spark_local)

    # The flow also carries the canary topic (made by earlier `mirror run`s of the session):
    # this test looks at its own topic.
    clean = audit(spark_local, config, flow)
    assert clean.equal, clean.to_json()
    assert [(a.partition, a.source_count, a.target_count) for a in clean.partitions if a.source_topic == topic] == [
        (0, 300, 300),
        (1, 300, 300),
        (2, 300, 300),
    ]

    t = producer(dst)
    t.produce(target, value=b"injected", key=b"x", partition=0)  # no provenance: a record nobody mirrored
    t.produce(
        target,
        value=b"tampered",
        key=b"k4",
        partition=1,
        timestamp=base + 40_000,
        headers=[("h", b"4"), ("mirror.origin", f"src/{topic}/1/1".encode())],
    )
    assert t.flush(30) == 0
    Admin("dst", config.clusters["dst"]).delete_records({(target, 2): 3})  # the first 3 copies of partition 2

    found = audit(spark_local, config, flow)
    by_part = {a.partition: a for a in found.partitions if a.source_topic == topic}
    assert not found.equal
    assert (by_part[0].extra, by_part[0].missing, by_part[0].altered) == ([300], [], [])
    assert (by_part[1].extra, by_part[1].altered, by_part[1].missing) == ([300], [1], [])
    assert (by_part[2].missing, by_part[2].target_count, by_part[2].extra) == ([0, 1, 2], 297, [])
    assert not by_part[2].checksum_equal

    # The command: exit 1 and the same report as JSON (its own driver JVM).
    out = subprocess.run(
        [sys.executable, "-m", "mirror", "audit", "-c", str(config_path), "--flow", flow.name, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["equal"] is False and {
        p["partition"]: p["missing"] for p in report["partitions"] if p["source_topic"] == topic
    } == {0: [], 1: [], 2: [0, 1, 2]}

    # Review M4: the same 3 records, had the target's retention removed them (they are 3 h
    # old; a 2 h retention.ms), are trimmed: reported, but no difference.
    Admin("dst", config.clusters["dst"]).alter_topic_configs(target, {"retention.ms": str(2 * 3600_000)})
    trimmed = {a.partition: a for a in audit(spark_local, config, flow).partitions if a.source_topic == topic}
    assert (trimmed[2].missing, trimmed[2].trimmed, trimmed[2].source_count, trimmed[2].target_count) == (
        [],
        3,
        297,
        297,
    )
    assert trimmed[2].equal and trimmed[2].checksum_equal and not trimmed[2].minutes_differing
    assert (trimmed[0].trimmed, trimmed[0].extra) == (0, [300])  # the other differences remain


def test_audit_without_provenance_headers_compares_counts_and_checksums(
    clusters, write_config, unique, tmp_path, spark_local
):
    """Review M3: with provenance headers off there is no origin offset to join on; a clean
    mirror must still audit equal (counts and checksums, per minute), and a difference show."""
    from mirror.kafka import Admin
    from mirror.spark.audit import audit
    from mirror.spark.job import run_flow

    src = clusters.bootstrap("src")
    topic = f"sp-{unique}-noprov"
    create_topic(src, topic, 2)
    p = producer(src)
    base = int(time.time() * 1000) - 3600_000
    for i in range(400):
        p.produce(
            topic,
            value=b"v%d" % i,
            key=b"k%d" % i,
            partition=i % 2,
            timestamp=base + i * 1000,
            headers=[("h", b"%d" % i)] if i % 2 else None,
        )
    assert p.flush(30) == 0
    config = load(write_config(flow_yaml(unique, topic, tmp_path / "offsets.db", provenance=False)))
    flow = config.flow(f"f-{unique}")
    run_flow(config, flow, until_caught_up=True, spark=spark_local)
    clean = audit(spark_local, config, flow)
    mine = [a for a in clean.partitions if a.source_topic == topic]
    assert clean.equal, clean.to_json()
    assert [(a.partition, a.source_count, a.target_count, a.checksum_equal) for a in mine] == [
        (0, 200, 200, True),
        (1, 200, 200, True),
    ]

    Admin("dst", config.clusters["dst"]).delete_records({(f"src.{topic}", 0): 2})  # recent records, removed by hand
    found = {a.partition: a for a in audit(spark_local, config, flow).partitions if a.source_topic == topic}
    assert (found[0].source_count, found[0].target_count, found[0].equal, found[0].trimmed) == (200, 198, False, 0)
    assert found[1].equal


def test_a_running_query_picks_up_a_new_topic_serves_metrics_and_stops_on_sigterm(
    clusters, write_config, unique, tmp_path
):
    from tests.support.metrics import scrape, total
    from tests.support.prometheus import free_port

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    first, later = f"sp-{unique}-a", f"sp-{unique}-b"
    create_topic(src, first, 2)
    p = producer(src)
    for i in range(200):
        p.produce(first, value=b"a%d" % i, key=b"%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    config = write_config(flow_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db"))
    port = free_port()
    run = SparkRun(config, f"f-{unique}", "--metrics-port", str(port))
    try:
        group = f"mirror-{unique}"
        wait_for(
            lambda: group_offsets(src, group, first, 2) == {0: 100, 1: 100},
            180,
            "the first topic mirrored and committed",
            detail=run.output,
        )
        assert total(scrape(port), "mirror_records_total", flow=f"f-{unique}", topic=first) == 200

        create_topic(src, later, 1)  # matches the flow: the query restarts with it
        for i in range(50):
            p.produce(later, value=b"b%d" % i, key=b"%d" % i, partition=0)
        assert p.flush(30) == 0
        wait_for(
            lambda: group_offsets(src, group, later, 1) == {0: 50},
            180,
            "the new topic mirrored and committed",
            detail=run.output,
        )
        assert [r.content() for r in read_partition(dst, f"src.{later}", 0)] == [
            r.content() for r in read_partition(src, later, 0)
        ]

        run.proc.send_signal(signal.SIGTERM)
        assert run.wait(120) == 0, run.output()
    finally:
        run.close()


def test_a_second_driver_of_a_running_flow_is_refused_before_its_jvm_and_the_first_carries_on(
    clusters, write_config, unique, tmp_path
):
    """Two drivers of one flow would both produce until Spark's offset log failed the later
    one: the second is refused (exit 3, one line naming the holder) before it starts a JVM,
    and the first mirrors on, untouched, and lets the checkpoint go at its clean stop."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, flow = f"sp-{unique}-a", f"f-{unique}"
    create_topic(src, topic, 2)
    p = producer(src)

    def produce(start: int, end: int) -> None:
        for i in range(start, end):
            p.produce(topic, value=b"a%d" % i, key=b"%d" % i, partition=i % 2)
        assert p.flush(30) == 0

    produce(0, 200)
    config = write_config(flow_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db"))
    checkpoint = tmp_path / "cp"
    run = SparkRun(config, flow, "--checkpoint", str(checkpoint))
    # The second driver's Java only records that it was started: a refusal must come before it.
    java_home, started = tmp_path / "java-home", tmp_path / "java-started"
    (java_home / "bin").mkdir(parents=True)
    (java_home / "bin" / "java").write_text(f"#!/bin/sh\ntouch '{started}'\nexit 1\n")
    (java_home / "bin" / "java").chmod(0o755)
    try:
        group = f"mirror-{unique}"
        wait_for(
            lambda: group_offsets(src, group, topic, 2) == {0: 100, 1: 100},
            180,
            "the first driver copying",
            detail=run.output,
        )
        t0 = time.monotonic()
        second = subprocess.run(
            [*spawn_prefix(), sys.executable, "-m", "mirror", "spark", "run", "-c", str(config), "--flow", flow]
            + ["--checkpoint", str(checkpoint)],
            env={**os.environ, "JAVA_HOME": str(java_home)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        print(f"the second driver was refused in {time.monotonic() - t0:.1f}s: {second.stderr.strip()}")
        lines = [ln for ln in second.stderr.splitlines() if ln.strip()]
        assert second.returncode == 3 and len(lines) == 1, second.stderr
        assert lines[0].startswith(f"Error: flow {flow}: ") and str(checkpoint) in lines[0]
        assert f"pid {run.proc.pid} " in lines[0]
        assert not started.exists(), "the refused driver started a JVM"

        produce(200, 300)
        wait_for(
            lambda: group_offsets(src, group, topic, 2) == {0: 150, 1: 150},
            180,
            "the first driver mirroring on",
            detail=run.output,
        )
        run.proc.send_signal(signal.SIGTERM)
        assert run.wait(120) == 0, run.output()
    finally:
        run.close()
    assert_exact(src, dst, unique, {topic: 2})
    from mirror.spark.checkpoint_lock import hold_checkpoint

    with hold_checkpoint(checkpoint, flow):  # released at the first driver's clean stop
        pass


def test_a_partition_added_to_a_source_topic_while_the_query_runs_is_mirrored(clusters, write_config, unique, tmp_path):
    """Review M5: a source topic grown while `mirror spark run` runs must not fail the run; the
    new partition is mirrored (its target partition grown first) and committed."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic = one_partition_topic(src, f"sp-{unique}-grow", 50, b"a")
    config = write_config(flow_yaml(unique, topic, tmp_path / "offsets.db"))
    run = SparkRun(config, f"f-{unique}", "--checkpoint", str(tmp_path / "cp"))
    try:
        group = f"mirror-{unique}"
        wait_for(
            lambda: group_offsets(src, group, topic, 1) == {0: 50},
            180,
            "the first partition mirrored and committed",
            detail=run.output,
        )
        admin = AdminClient({"bootstrap.servers": src})
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
        p = producer(src)  # a new client: the old one's metadata has one partition
        for i in range(30):
            p.produce(topic, value=b"b%d" % i, key=b"%d" % i, partition=1)
            p.produce(topic, value=b"c%d" % i, key=b"%d" % i, partition=0)
        assert p.flush(30) == 0
        wait_for(
            lambda: run.proc.poll() is not None or group_offsets(src, group, topic, 2) == {0: 80, 1: 30},
            180,
            "the new partition mirrored and committed",
            detail=run.output,
        )
        assert run.proc.poll() is None, f"the run ended when the source topic grew:\n{run.output()}"
        for part in range(2):
            assert [r.content() for r in read_partition(dst, f"src.{topic}", part)] == [
                r.content() for r in read_partition(src, topic, part)
            ]
        run.proc.send_signal(signal.SIGTERM)
        assert run.wait(120) == 0, run.output()
    finally:
        run.close()


def test_a_task_that_fails_once_is_retried_in_local_mode(spark_local):
    """Review M6a: local mode has no task retries unless the master says so (`local[N,R]`); a
    task's transient failure must be retried, as a cluster does (retries are safe: a task skips
    what the target holds)."""

    def fail_first_attempt(x: int) -> int:  # defined here: cloudpickle ships it by value
        from pyspark import TaskContext

        if TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("a transient task failure")
        return x

    assert spark_local.sparkContext.parallelize([1, 2], 2).map(fail_first_attempt).collect() == [1, 2]


def test_a_target_topic_with_a_small_max_message_bytes_gets_batches_that_fit(
    clusters, write_config, unique, tmp_path, spark_local
):
    """Review M6c: a target topic whose max.message.bytes (64 KiB) is below the producer's
    batch.size (1 MiB): librdkafka never splits a refused batch, so the task must produce with
    batches that fit, as `mirror run` does (the same sizing code)."""
    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic = f"sp-{unique}-small"
    create_topic(src, topic, 1)
    create_topic(dst, f"src.{topic}", 1, config={"max.message.bytes": str(64 * 1024)})
    p = producer(src, **{"compression.type": "none"})
    for i in range(600):  # ~1.2 MB of records that do not compress (lz4) below 64 KiB a batch
        p.produce(topic, value=random.Random(i).randbytes(2000), key=b"%d" % i, partition=0)
    assert p.flush(30) == 0
    config = load(write_config(flow_yaml(unique, topic, tmp_path / "offsets.db")))
    job = run_flow(config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local)
    assert job.records == 600
    assert set(job.paths) == {"jvm"}  # the Java producer's batches fit too
    assert [r.content() for r in read_partition(dst, f"src.{topic}", 0)] == [
        r.content() for r in read_partition(src, topic, 0)
    ]


def test_audit_with_from_never_calls_a_gap_after_copies_the_target_still_holds_trimmed(spark_local, monkeypatch):
    """`mirror audit --from T`: the target's log start moved (retention removed the copies of
    0..4) and the copies of 10..19 never reached it (a real loss); all records are older than
    the target's retention.ms. The target still holds the copies of 5..9, so its retention
    cannot have removed 10..19: they are missing. With --from after 5..9's event time, the
    first held copy was looked up among the time-filtered copies (20), and 10..19 were
    reported as trimmed: equal, exit 0. Our own ports faked (Admin, the Kafka read); real Spark."""
    import datetime as dt

    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    import mirror.spark.audit as audit_mod
    from mirror.config import parse
    from mirror.domain.route import route
    from mirror.kafka.admin import Watermarks

    config = parse(
        """\
clusters:
  src: {bootstrap: 127.0.0.1:9}
  dst: {bootstrap: 127.0.0.1:10}
flows:
  - {name: f, source: src, target: dst, topics: {include: [orders]}}
""",
        env={},
    )
    flow = config.flow("f")
    r = route(flow, "orders", 0)
    day = 86_400_000
    now = 1_700_000_000_000
    old, newer = now - 40 * day, now - 30 * day  # both older than the target's 7-day retention
    source = [(o, old + o if o < 10 else newer + o) for o in range(30)]
    copies = [(o, ts) for o, ts in source if o < 10 or o >= 20]  # 10..19 never landed
    target = [(t, o, ts) for t, (o, ts) in enumerate(copies)][5:]  # retention removed target 0..4

    class FakeAdmin:
        def __init__(self, name: str, _cluster: object) -> None:
            self.name = name

        def topics(self):
            return {"orders": 1} if self.name == "src" else {r.target_topic: 1}

        def group_offsets(self, _group):
            return {("orders", 0): 30}

        def watermarks(self, parts, committed_only=True):
            return {tp: Watermarks(0, 30) if self.name == "src" else Watermarks(5, len(copies)) for tp in parts}

        def effective_configs(self, topics, _names):
            return {t: {"retention.ms": str(7 * day), "retention.bytes": "-1"} for t in topics}

    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField(
                "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
            ),
        ]
    )

    def when(ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)

    def fake_read(spark, _config, cluster, _starting, _ending):
        if cluster == "src":
            data = [(b"k%d" % o, b"v%d" % o, "orders", 0, o, when(ts), None) for o, ts in source]
        else:
            data = [
                (b"k%d" % o, b"v%d" % o, r.target_topic, 0, t, when(ts), [(h, v) for h, v in r.headers(o, None)])
                for t, o, ts in target
            ]
        return spark.createDataFrame(data, schema)

    monkeypatch.setattr(audit_mod, "Admin", FakeAdmin)
    monkeypatch.setattr(audit_mod, "_read", fake_read)
    spark_local.conf.set("spark.sql.session.timeZone", "UTC")
    whole = audit_mod.audit(spark_local, config, flow, now_ms=now)
    (p,) = whole.partitions
    assert p.missing == list(range(10, 15)) and p.trimmed == 5 and not whole.equal  # without --from: right
    (p,) = audit_mod.audit(spark_local, config, flow, from_ms=newer, now_ms=now).partitions
    assert p.missing == list(range(10, 15)) and p.trimmed == 0, (p.missing, p.trimmed)


@pytest.mark.timeout(600)  # four stages on one query and a worker started; the deadlines are for a loaded machine
def test_executors_on_two_workers_a_worker_added_while_running_and_an_executor_killed_mid_batch(
    clusters, write_config, unique, tmp_path, spark_cluster, capsys
):
    """One continuous `mirror spark run` on the session's standalone cluster:
    a second worker added while it runs gets an executor; then the first worker's executor
    JVM is SIGKILLed while a batch is on its way to the target (records landed, group not
    yet moved): Spark retries the lost tasks on the other executor and, the worker
    relaunching one, carries on. Every record arrives once. The same run serves the Spark UI
    and, on its metrics port, `mirror run`'s metrics plus Spark's progress; `mirror lag`
    then sees the flow caught up from the group the query committed."""
    from mirror.devenv.kafka import DevClusters
    from mirror.devenv.spark import SparkDev
    from tests.support.metrics import scrape, total
    from tests.support.prometheus import free_port

    home, master = spark_cluster
    base = int(master.rsplit(":", 1)[1]) + 30
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topics = load_data(src, unique, records=RECORDS // 4)  # 6,250 committed records; 3,000 more later
    config = write_config(flow_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db"))
    group, plain, flow = f"mirror-{unique}", f"sp-{unique}-plain", f"f-{unique}"
    total_plain = sum(end_offsets(src, plain, 3).values())
    port, ui = free_port(), free_port()
    run = SparkRun(
        config,
        flow,
        "--master",
        master,
        "--max-records-per-batch",
        "1000",
        "--metrics-port",
        str(port),
        "--ui-port",
        str(ui),
    )
    try:

        def committed() -> int:
            return sum(max(0, o) for o in group_offsets(src, group, plain, 3).values())

        wait_for(lambda: committed() > 0, 240, "a first batch committed", detail=run.output)

        def ui_apps() -> list[str]:  # the Spark UI's REST API (slow to answer on a loaded machine)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/api/v1/applications", timeout=30) as resp:
                    return [a["name"] for a in json.loads(resp.read())]
            except OSError:
                return []

        wait_for(lambda: ui_apps() == [f"mirror-{flow}"], 120, "the Spark UI on --ui-port", detail=run.output)

        # A worker added while the query runs: the running application gets an executor on it.
        DevClusters(home).up([], base, spark=True, spark_workers=2)
        added = SparkDev(home, base, 2)
        wait_for(
            lambda: any(added.work_dir("worker-1").glob("app-*/*/stderr")),
            180,
            "an executor on the added worker",
            detail=run.output,
        )
        # Records written now are still to come however long adding the worker took: the
        # executor is killed under a batch of them.
        more = producer(src)
        for i in range(3000):
            more.produce(plain, value=b"more-%d" % i, key=b"k-%d" % (i % 100), partition=i % 3)
        assert more.flush(60) == 0
        total_plain = sum(end_offsets(src, plain, 3).values())

        # The first worker's executor killed while a batch is on its way.
        first = added.pid("worker")
        assert first is not None
        # A worker's executor JVMs are its children (it may run short-lived helpers too).
        executors = [
            c for c in children(first) if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{c}/cmdline").read_bytes()
        ]
        assert executors, "no executor JVM under the first worker"

        def in_flight() -> bool:
            landed = sum(end_offsets(dst, f"src.{plain}", 3, committed=False).values()) if committed() else 0
            return landed > committed() or committed() >= total_plain

        wait_for(in_flight, 120, "a batch on the target and not yet committed", interval=0.05, detail=run.output)
        assert committed() < total_plain, "the run finished before an executor could be killed mid-batch"
        os.kill(executors[0], signal.SIGKILL)

        def caught_up() -> bool:
            return all(group_offsets(src, group, t, n) == end_offsets(src, t, n) for t, n in topics.items())

        wait_for(caught_up, 240, "every record mirrored and committed after the executor was lost", detail=run.output)
        assert "Lost executor" in run.log.read_text(errors="replace"), (
            run.output()
        )  # the driver saw it (logged at ERROR)
        # The worker relaunched an executor for the application (a second executor directory).
        assert len(list(added.work_dir("worker").glob("app-*/*/stderr"))) >= 2

        # Metrics: `mirror run`'s records and state, and Spark's progress.
        def progress_seen() -> bool:
            m = scrape(port)
            return (total(m, "mirror_spark_batch_duration_seconds_count", flow=flow) or 0) > 0 and total(
                m, "mirror_spark_offsets_behind_latest", flow=flow
            ) == 0

        wait_for(progress_seen, 60, "Spark's progress on the metrics port", detail=run.output)
        m = scrape(port)
        assert total(m, "mirror_flow_state", flow=flow, state="running") == 1
        assert total(m, "mirror_records_total", flow=flow, topic=plain) > 0
        assert total(m, "mirror_spark_input_records_total", flow=flow) >= total_plain
        assert (total(m, "mirror_spark_processed_records_per_second", flow=flow) or 0) > 0

        run.proc.send_signal(signal.SIGTERM)
        assert run.wait(120) == 0, run.output()
    finally:
        run.close()
    assert_exact(src, dst, unique, topics)
    capsys.readouterr()
    assert main(["lag", "-c", str(config), "--flow", flow, "--json"]) == 0
    (fl,) = json.loads(capsys.readouterr().out)["flows"]
    assert fl["lag_records"] == 0 and {p["status"] for p in fl["partitions"]} == {"OK"}, fl


def test_a_batch_bound_smaller_than_one_kafka_record_batch_mirrors_exactly(
    clusters, write_config, unique, tmp_path, spark_local
):
    """`--max-records-per-batch 30` over records the producer wrote 250 to a record batch
    (and a transaction of 100): every micro-batch starts and ends inside a Kafka record batch,
    so each task's reader skips the part before its range and stops inside one."""
    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic = f"sp-{unique}-bound"
    create_topic(src, topic, 1)
    p = producer(src, **{"linger.ms": 2000, "batch.num.messages": 250, "compression.type": "zstd"})
    for i in range(250):
        p.produce(topic, value=b"v%d" % i, key=b"%d" % i, partition=0)
    assert p.flush(30) == 0
    t = producer(src, **{"transactional.id": f"bound-{unique}", "linger.ms": 2000})
    t.init_transactions(30)
    t.begin_transaction()
    for i in range(100):
        t.produce(topic, value=b"t%d" % i, key=b"%d" % i, partition=0)
    t.commit_transaction(30)
    config = load(write_config(flow_yaml(unique, topic, tmp_path / "offsets.db")))
    job = run_flow(
        config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local, max_records_per_batch=30
    )
    assert (job.records, job.skipped) == (350, 0)
    assert set(job.paths) == {"jvm"}
    assert [r.content() for r in read_partition(dst, f"src.{topic}", 0)] == [
        r.content() for r in read_partition(src, topic, 0)
    ]
    assert group_offsets(src, f"mirror-{unique}", topic, 1) == end_offsets(src, topic, 1)
    offsets = sorted(
        int(f.name)
        for f in (tmp_path / ".mirror" / "spark" / f"f-{unique}" / "query" / "offsets").iterdir()
        if f.name.isdigit()
    )
    assert len(offsets) >= 350 // 30, offsets  # the bound held: one micro-batch per 30 offsets at most


def test_a_backlog_of_two_bounds_is_two_micro_batches_not_a_tail(clusters, write_config, unique, tmp_path, spark_local):
    """Issue 21: `--until-caught-up` with 2,000 records over 3 partitions and a bound of
    1,000. Spark's source shares the bound among the partitions rounding down (999, then
    998), so the bound itself would make a third micro-batch of 3 records; the backlog split
    evenly (`mirror.spark.trigger`) is two."""
    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic = f"sp-{unique}-even"
    create_topic(src, topic, 3)
    p = producer(src)
    for i in range(2000):
        p.produce(topic, value=b"v%d" % i, key=b"%d" % i, partition=i % 3)
    assert p.flush(30) == 0
    config = load(write_config(flow_yaml(unique, topic, tmp_path / "offsets.db")))
    job = run_flow(
        config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local, max_records_per_batch=1000
    )
    assert (job.records, job.skipped) == (2000, 0)
    offsets = sorted(
        int(f.name)
        for f in (tmp_path / ".mirror" / "spark" / f"f-{unique}" / "query" / "offsets").iterdir()
        if f.name.isdigit()
    )
    assert offsets == [0, 1]
    source, target = read_topic(src, topic, 3), read_topic(dst, f"src.{topic}", 3)
    assert {p: [r.content() for r in rs] for p, rs in target.items()} == {
        p: [r.content() for r in rs] for p, rs in source.items()
    }
    assert group_offsets(src, f"mirror-{unique}", topic, 3) == end_offsets(src, topic, 3)


def test_source_records_deleted_before_their_batch_is_read_are_skipped_as_sparks_reader_skips_them(
    clusters, write_config, unique, tmp_path, spark_local, monkeypatch, caplog
):
    """Issue 21 (direct read): retention removes source records after Spark planned a batch's
    range and before the JVM writer's task reads it. Spark's reader with failOnDataLoss false
    (as the job sets it) goes on from the log start; so does the writer's own consumer, which
    says what was lost, and copies the rest exactly.

    Review (direct read) D1: the deletion takes batch 0's whole range and the head of batch 1's.
    A range of which nothing is left is named in a warning too (the task produced nothing, so
    no result carried it), and batch 1's warning names its own offsets only (its reader
    continues from batch 0's, whose consumer still stood at offset 0)."""
    import logging

    from mirror.kafka import Admin
    from mirror.spark.batches import Batches
    from mirror.spark.checkpoint import batch_ends
    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic = one_partition_topic(src, f"sp-{unique}-lost", 300)
    config = load(write_config(flow_yaml(unique, topic, tmp_path / "offsets.db")))
    on_batch = Batches.on_batch
    ends: list[int] = []

    def retention_first(self: Batches, df: object, batch_id: int) -> None:
        if batch_id == 0:  # planned as [0, end): all of it and 49 records past it go before it is read
            end = (batch_ends(self._checkpoint, 0) or {})[(topic, 0)]
            ends.append(end)
            Admin("src", config.clusters["src"]).delete_records({(topic, 0): end + 49})
        on_batch(self, df, batch_id)

    monkeypatch.setattr(Batches, "on_batch", retention_first)
    with caplog.at_level(logging.WARNING, logger="mirror.spark"):
        job = run_flow(
            config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local, max_records_per_batch=100
        )
    assert set(job.paths) == {"jvm"}
    end = ends[0]
    assert 0 < end < 300 - 49
    kept = [r.content() for r in read_partition(src, topic, 0)]
    assert len(kept) == 300 - end - 49 == job.records
    assert [r.content() for r in read_partition(dst, f"src.{topic}", 0)] == kept
    # Named by the driver in the words both engines use for a gap (`SourceGap.describe`).
    assert f"{topic}[0]: source records 0..{end - 1} ({end}) were never mirrored" in caplog.text
    assert f"{topic}[0]: source records {end}..{end + 48} (49) were never mirrored" in caplog.text
    assert group_offsets(src, f"mirror-{unique}", topic, 1) == end_offsets(src, topic, 1)


def test_records_without_a_timestamp_keep_it_on_either_writer(clusters, write_config, unique, tmp_path, spark_local):
    """Review (JVM writer) F1: a source record with timestamp -1 (no timestamp: librdkafka
    produces it as given) keeps -1 on the target, as the Python tasks copy it; the Java client
    cannot send a negative timestamp and must not stamp the time of producing instead."""
    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic = f"sp-{unique}-nots"
    create_topic(src, topic, 1)
    p = producer(src)
    for i in range(20):
        p.produce(
            topic, value=b"v%d" % i, key=b"k%d" % i, partition=0, timestamp=-1 if i >= 10 else 1_600_000_000_000 + i
        )
    assert p.flush(30) == 0
    source = read_partition(src, topic, 0)
    assert [r.timestamp for r in source][-1] == -1
    config = load(write_config(flow_yaml(unique, topic, tmp_path / "offsets.db")))
    job = run_flow(config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local)
    assert job.records + job.skipped == 20  # the Python tasks skip what the JVM writer produced before -1
    assert [r.content() for r in read_partition(dst, f"src.{topic}", 0)] == [r.content() for r in source]


def test_without_provenance_every_batch_goes_to_the_python_tasks_and_nothing_is_duplicated(
    clusters, write_config, unique, tmp_path, spark_local
):
    """Review (JVM writer) F2/F4: without provenance headers nothing on the target can be
    skipped, and the JVM writer's failures are not per task (one shared producer per executor
    closes at any task's first error; a slice it cannot send whole fails late): the partitions
    it leaves would be produced twice. So such a flow stays on the Python tasks, which copy a
    record stamped -1 as it is."""
    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic = f"sp-{unique}-nots2"
    create_topic(src, topic, 2)
    p = producer(src)
    p.produce(topic, value=b"one", key=b"k", partition=1, timestamp=1_600_000_000_000)
    n = 20_000  # partition 0 ends with a record the Java client cannot send (timestamp -1)
    for i in range(n):
        p.produce(
            topic, value=b"v%d" % i, key=b"k%d" % i, partition=0, timestamp=-1 if i == n - 1 else 1_600_000_000_000
        )
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    config = load(write_config(flow_yaml(unique, topic, tmp_path / "offsets.db", provenance=False)))
    job = run_flow(
        config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local, max_records_per_batch=50_000
    )
    assert job.paths == {"python": 1}
    source, target = read_topic(src, topic, 2), read_topic(dst, f"src.{topic}", 2)
    assert {p: [r.content() for r in rs] for p, rs in target.items()} == {
        p: [r.content() for r in rs] for p, rs in source.items()
    }


def test_a_target_topic_deleted_while_the_jvm_writer_produces_comes_back_as_the_mirror_creates_it(
    clusters, write_config, unique, tmp_path, spark_local
):
    """Review (driver) B4: the session's brokers auto-create topics (Kafka's default). The
    Python tasks' producers never ask for a topic to be created; the JVM writer's Java
    producer (kafka-clients 3.9: every metadata request allows auto-creation, no setting turns
    it off) must not either: a target topic deleted while batches are produced comes back as
    the mirror creates it (the source's partition count and copied configs), not with the
    broker's defaults, and every source record is on it in order."""
    import threading

    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, n = f"sp-{unique}-gone", 3
    kept = {"retention.ms": "86400000", "cleanup.policy": "delete"}
    create_topic(src, topic, n, kept)
    p = producer(src)

    def produce(start: int, count: int) -> None:
        for i in range(start, start + count):
            p.produce(topic, value=b"v%d" % i, key=b"%d" % i, partition=i % n)
        assert p.flush(30) == 0

    produce(0, 300)
    # A topic refresh slower than the producer's reaction to the deletion, as in production.
    body = flow_yaml(unique, topic, tmp_path / "offsets.db").replace("refresh_interval: 1s", "refresh_interval: 8s")
    config = load(write_config(body))
    stop, box = threading.Event(), {}

    def run() -> None:
        try:
            box["job"] = run_flow(config, config.flow(f"f-{unique}"), spark=spark_local, stop=stop)
        except BaseException as exc:  # noqa: BLE001 - raised on the test's thread below
            box["error"] = exc

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    group = f"mirror-{unique}"
    try:
        wait_for(lambda: "error" in box or sum(group_offsets(src, group, topic, n).values()) == 300, 120, "first copy")
        assert "error" not in box, box.get("error")
        delete_topic(dst, f"src.{topic}")
        produce(300, 300)  # the next batches' sends meet the deleted topic
        wait_for(
            lambda: (
                "error" in box
                or (
                    group_offsets(src, group, topic, n) == end_offsets(src, topic, n)
                    and kafka_topics(dst).get(f"src.{topic}") == n
                    and sum(end_offsets(dst, f"src.{topic}", n).values()) >= 600
                )
            ),
            180,
            "the target topic back and refilled",
        )
        assert "error" not in box, box.get("error")
    finally:
        stop.set()
        runner.join(120)
    assert not runner.is_alive() and "error" not in box, box.get("error")
    assert "jvm" in box["job"].paths
    assert kafka_topics(dst)[f"src.{topic}"] == n
    from confluent_kafka.admin import AdminClient, ConfigResource

    res = ConfigResource(ConfigResource.Type.TOPIC, f"src.{topic}")
    admin = AdminClient({"bootstrap.servers": dst})  # kept: a dropped client fails its futures
    got = admin.describe_configs([res])[res].result(30)
    assert {k: got[k].value for k in kept} == kept, "the target topic came back with the broker's defaults"
    source, target = read_topic(src, topic, n), read_topic(dst, f"src.{topic}", n)
    for part in range(n):
        firsts: list[bytes] = []
        for r in target[part]:
            if r.value not in firsts:
                firsts.append(r.value)
        assert firsts == [r.value for r in source[part]], f"partition {part}"
