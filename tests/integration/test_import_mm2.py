"""`mirror import-mm2` against the real MirrorMaker 2 (dedicated mode, the bench's jars).

MM2 copies part of a topic (headers, timestamps, a transactional producer's records) and is
stopped; the mirror takes over from its progress and finishes the copy. Stopped cleanly:
each source record is on the target exactly once, and a group MM2 checkpointed fails over
exactly. Killed: nothing lost, and the duplicates are exactly the records MM2 wrote after its
last commit, which the import reports.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bench import mm2
from mirror.cli import main
from mirror.config import load
from mirror.devenv.common import spawn_prefix
from mirror.domain.mm2_offsets import decode_checkpoint, latest_checkpoints, resume_positions
from mirror.kafka import Admin
from mirror.kafka.reader import read_offsets, read_range
from mirror.store import open_store
from tests.integration.test_failover import consume_and_commit, produce_transactions
from tests.support.kafkautil import create_topic, end_offsets, read_partition, wait_for

pytestmark = pytest.mark.slow

PARTITIONS = 3


def mm2_properties(src: str, dst: str, topic: str, group: str, flush_ms: int) -> str:
    """MM2 as the bench runs it, with its intervals short so the test stays quick (a later
    key wins in a properties file)."""
    return mm2.properties("src", src, "dst", dst, topic, 2, {}, {}) + "\n".join(
        [
            f"src->dst.groups = {group}",
            f"offset.flush.interval.ms = {flush_ms}",
            f"dst.offset.flush.interval.ms = {flush_ms}",  # the key the dedicated-mode worker reads
            "refresh.topics.interval.seconds = 1",
            "refresh.groups.interval.seconds = 1",
            "emit.checkpoints.interval.seconds = 1",
            "",
        ]
    )


class Mm2Process:
    def __init__(self, workdir: Path, props: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / "mm2.properties"
        path.write_text(props)
        self.path = path
        self.log = (workdir / "mm2.log").open("wb")
        cmd = mm2.command(workdir, path, "dst", heap="-Xms128M -Xmx512M")
        self.proc = subprocess.Popen(
            [*spawn_prefix(), *cmd], stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.log.close()


def produce_plain(bootstrap: str, topic: str, start: int, count: int) -> None:
    """Keyed records with headers and explicit timestamps, round the partitions."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(start, start + count):
        p.produce(
            topic,
            key=b"k%d" % i,
            value=b"v%d" % i,
            partition=i % PARTITIONS,
            timestamp=1_700_000_000_000 + i,
            headers=[("h", b"x%d" % i), ("dup", None)],
        )
    assert p.flush(30) == 0


def contents(bootstrap: str, topic: str, p: int) -> list[tuple]:
    return [r.content() for r in read_partition(bootstrap, topic, p)]


def cli_json(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(list(args))
    out = capsys.readouterr().out
    return rc, (json.loads(out) if rc == 0 and out.strip().startswith("{") else {})


def import_json(capsys, *args: str) -> tuple[int, dict]:
    """Run the import (which waits for a MirrorMaker 2 that just stopped to go quiet)."""
    capsys.readouterr()
    rc = main(list(args))
    captured = capsys.readouterr()
    return rc, (json.loads(captured.out) if rc == 0 else {"err": captured.err})


def wait_mm2_committed(dst: str, source_topic: str, ends: dict[int, int], timeout: float = 400) -> None:
    """Until MM2's committed offsets (its offset topic) cover `ends` on every partition."""

    def covered() -> bool:
        got = resume_positions(((r.key, r.value) for r in read_internal(dst, "mm2-offsets.src.internal")), "src")
        return all(got.get((source_topic, p), 0) >= e for p, e in ends.items())

    wait_for(covered, timeout, "MirrorMaker 2 to start and commit what it copied")


@pytest.mark.timeout(900)  # MM2 takes tens of seconds to start (minutes on a loaded machine)
def test_takes_over_a_cleanly_stopped_mm2_exactly(clusters, tmp_path: Path, unique: str, capsys) -> None:
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, group = f"orders-{unique}", f"app-{unique}"
    create_topic(src, topic, PARTITIONS)
    produce_plain(src, topic, 0, 300)
    for p in range(PARTITIONS):  # markers between the plain records: offsets with no copy
        produce_transactions(
            src,
            topic,
            p,
            [([b"t%d-%d-%d" % (p, b, i) for i in range(7)], True) for b in range(3)],
            tid=f"tx-{unique}-{p}",
        )
    produce_plain(src, topic, 300, 90)
    # The group read part of each partition before the switch; MM2 checkpoints it.
    consume_and_commit(src, group, topic, {0: 50, 1: 117, 2: 3})

    proc = Mm2Process(tmp_path / "mm2", mm2_properties(src, dst, topic, "app-.*", flush_ms=500))
    try:
        ends = end_offsets(src, topic, PARTITIONS)
        wait_mm2_committed(dst, topic, ends)
        wait_for(lambda: len(read_checkpoints(dst, group)) == PARTITIONS, 60, "MirrorMaker 2 to checkpoint the group")
    finally:
        proc.stop(signal.SIGTERM)
    # More records after MM2 stopped: the mirror's part of the copy.
    produce_plain(src, topic, 390, 120)
    produce_transactions(src, topic, 1, [([b"late%d" % i for i in range(5)], True)], tid=f"tx-{unique}-late")

    out = tmp_path / "mirror.yaml"
    # Right after MM2 stopped: the import waits for its heartbeats to go quiet, then takes over.
    rc, report = import_json(
        capsys, "import-mm2", "--mm2-config", str(proc.path), "--out", str(out), "--force", "--json", "--yes"
    )
    assert rc == 0, report
    flow = report["took_over"][0]
    assert flow["partitions"] == PARTITIONS and flow["copied_twice"] == 0 and flow["checkpoints"] == PARTITIONS
    keys = {u["key"] for u in report["untranslated"]}
    assert {"tasks.max", "offset.flush.interval.ms", "refresh.groups.interval.seconds"} <= keys

    # The mirror's group starts exactly where MM2 stopped: nothing before it is copied again.
    assert main(["run", "-c", str(out), "--until-caught-up"]) == 0
    for p in range(PARTITIONS):
        source, target = contents(src, topic, p), contents(dst, f"src.{topic}", p)
        assert target == source, f"partition {p}: {len(target)} on the target, {len(source)} on the source"

    # The group MM2 checkpointed fails over exactly: the plan puts it on the copy of the
    # first record it had not read, on every partition.
    rc, plan = cli_json(
        capsys, "failover", "plan", "-c", str(out), "--flow", "src-to-dst", "--group", group, "--translate", "--json"
    )
    assert rc == 0, plan
    committed = {p["partition"]: p["source_offset"] for p in plan["partitions"]}
    for part in plan["partitions"]:
        p = part["partition"]
        unread_before = sum(1 for r in read_partition(src, topic, p) if r.offset < committed[p])
        assert part["target_offset"] == unread_before, part
    store = open_store(load(out).offset_store)
    try:
        imported = {c.partition: c.target_offset for c in store.checkpoints("src-to-dst", group)}
    finally:
        store.close()
    assert imported == {p["partition"]: p["target_offset"] for p in plan["partitions"]}


@pytest.mark.timeout(900)
def test_takes_over_a_killed_mm2_losing_nothing(clusters, tmp_path: Path, unique: str, capsys) -> None:
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic = f"orders-{unique}"
    create_topic(src, topic, PARTITIONS)
    produce_plain(src, topic, 0, 200)
    stop = threading.Event()

    def trickle() -> None:  # MM2 is killed mid-stream, with copies past its last commit
        i = 200
        while not stop.is_set() and i < 2000:
            produce_plain(src, topic, i, 10)
            i += 10
            stop.wait(0.02)

    proc = Mm2Process(tmp_path / "mm2", mm2_properties(src, dst, topic, "none", flush_ms=3000))
    writer = threading.Thread(target=trickle)
    try:
        wait_mm2_committed(dst, topic, {p: 1 for p in range(PARTITIONS)})
        writer.start()
        wait_for(lambda: uncommitted_copies(src, dst, topic) > 0, 120, "MM2 to copy records past its last commit")
    finally:
        proc.stop(signal.SIGKILL)
        stop.set()
        if writer.is_alive():
            writer.join(30)

    out = tmp_path / "mirror.yaml"
    # Its heartbeats are fresh a moment after the kill: with no time to wait for them to go
    # quiet, the import refuses, changing nothing.
    capsys.readouterr()
    rc = main(["import-mm2", "--mm2-config", str(proc.path), "--out", str(out), "--yes", "--wait-quiet", "1s"])
    assert rc == 3 and "still runs" in capsys.readouterr().err
    rc, report = import_json(capsys, "import-mm2", "--mm2-config", str(proc.path), "-c", str(out), "--json", "--yes")
    assert rc == 0, report
    twice = report["took_over"][0]["copied_twice"]

    assert main(["run", "-c", str(out), "--until-caught-up"]) == 0
    duplicates = 0
    for p in range(PARTITIONS):
        source, target = contents(src, topic, p), contents(dst, f"src.{topic}", p)
        assert set(source) <= set(target), f"partition {p}: records lost"
        assert len(set(target)) == len(source)
        duplicates += len(target) - len(source)
    # Only what MM2 wrote after its last commit is there twice, as the import said.
    assert duplicates == twice
    print(f"killed MM2: {duplicates} duplicates (MM2's uncommitted window)")


# ---------------------------------------------------------------------------- helpers


def uncommitted_copies(src: str, dst: str, topic: str) -> int:
    """Copies on the target past what MM2 committed (the topic has no gaps: offsets match)."""
    committed = resume_positions(((r.key, r.value) for r in read_internal(dst, "mm2-offsets.src.internal")), "src")
    ends = end_offsets(dst, f"src.{topic}", PARTITIONS)
    return sum(max(0, e - committed.get((topic, p), 0)) for p, e in ends.items())


def load_cluster(bootstrap: str):
    from mirror.config import ClusterConfig

    return ClusterConfig(bootstrap=bootstrap, timeout=10.0)


def read_internal(bootstrap: str, topic: str) -> list:
    """Every record of one of MM2's internal topics (none while it does not exist)."""
    admin = Admin("dst", load_cluster(bootstrap))
    n = admin.topics().get(topic, 0)
    marks = admin.watermarks([(topic, p) for p in range(n)], committed_only=False)
    return [
        r for (t, p), w in marks.items() for r in read_range("dst", load_cluster(bootstrap), t, p, w.low, w.high, 30)
    ]


def read_checkpoints(dst: str, group: str) -> list:
    recs = read_internal(dst, "src.checkpoints.internal")
    return [
        c
        for c in latest_checkpoints(decode_checkpoint(r.key, r.value, r.timestamp_ms) for r in recs)
        if c.group == group
    ]


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_ranges_read_at_once_are_the_records_read_one_range_at_a_time(clusters, unique: str, isolation: str) -> None:
    """The import places MM2's copies by the source records in a range, as MM2's consumer saw
    them; one consumer reads every partition's range and must see what `read_range` sees."""
    src = clusters.bootstrap("src")
    topic = f"ranges-{unique}"
    create_topic(src, topic, PARTITIONS)
    produce_plain(src, topic, 0, 60)
    for p in range(PARTITIONS):
        produce_transactions(
            src,
            topic,
            p,
            [
                ([b"c%d" % i for i in range(4)], True),
                ([b"a%d" % i for i in range(3)], False),
                ([b"d%d" % i for i in range(2)], True),
            ],
            tid=f"tr-{unique}-{p}",
        )
    produce_plain(src, topic, 60, 30)
    cluster = load_cluster(src)
    ranges = {(topic, 0): (3, 40), (topic, 1): (0, 31), (topic, 2): (19, 25)}
    got = read_offsets("src", cluster, ranges, 60, isolation=isolation)
    for (t, p), (start, end) in ranges.items():
        assert got[(t, p)] == [r.offset for r in read_range("src", cluster, t, p, start, end, 60, isolation=isolation)]
    # Partition 1, offsets 0..30: 20 plain records, 4 committed, a marker, 3 aborted, a marker, 2 committed.
    assert len(got[(topic, 1)]) == (26 if isolation == "read_committed" else 29)
