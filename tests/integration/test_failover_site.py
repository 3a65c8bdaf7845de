"""A whole site failed over in one reviewed plan (issue 26): 3 flows, 20 groups, live workload.

The groups consume on the source while records are produced and mirrored; then the planned
failover: producers stop, the mirror catches up, the consumers stop, one plan for the site
(a datacenter label), one apply. An independent consumer per group then reads on the target
from where apply put it: what each group read on the source plus what it reads there must
be every record of its topic exactly once. The same store then plans the site with the
source gone (unplanned), from checkpoints, naming each group's checkpoint age and re-read.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from mirror.cli import main
from mirror.config import load
from mirror.store import open_store
from tests.support.kafkautil import create_topic, end_offsets, wait_for
from tests.support.mirrorproc import MirrorProcess
from tests.support.prometheus import free_port

pytestmark = pytest.mark.slow

FLOWS = ("a", "b", "c")
GROUPS = 20
PARTS = 2


def _config(path: Path, clusters, u: str, *, src: str | None = None, timeout: str = "10s") -> Path:
    flows = "".join(f"""\
  - name: f{x}-{u}
    source: src
    target: dst
    consumer_group: mirror-{x}-{u}
    refresh_interval: 1s
    commit_interval: 300ms
    checkpoint_interval: 1s
    topics: {{include: ["s-{u}-{x}"]}}
    groups: ["g-{u}-.*"]
""" for x in FLOWS)
    path.write_text(f"""\
clusters:
  src: {{bootstrap: "{src or clusters.bootstrap('src')}", timeout: {timeout}, datacenter: east{u}}}
  dst: {{bootstrap: "{clusters.bootstrap('dst')}", timeout: {timeout}, datacenter: west{u}}}
flows:
{flows}offset_store: {{kind: sqlite, path: {path.parent / 'offsets.db'}}}
canary: {{topic: canary-{u}}}
""")
    return path


def _topic(u: str, i: int) -> str:
    return f"s-{u}-{FLOWS[i % len(FLOWS)]}"


def _consume(bootstrap: str, group: str, topics: list[str], *, at_most: int, timeout: float = 5.0) -> list[bytes]:
    """Read up to `at_most` records as `group` from its committed offsets; commit what was read."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    out: list[bytes] = []
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTS)]
        found: list[list[TopicPartition]] = []

        def ask() -> bool:  # a fresh cluster answers NOT_COORDINATOR until __consumer_offsets is up
            try:
                found.append(c.committed(tps, timeout=10))
                return True
            except KafkaException:
                return False

        wait_for(ask, 60, f"{group}'s committed offsets")
        committed = found[-1]
        c.assign([TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0) for tp in committed])
        idle = 0
        while len(out) < at_most and idle < int(timeout / 0.5):
            batch = [m for m in c.consume(min(200, at_most - len(out)), timeout=0.5) if m.error() is None]
            idle = 0 if batch else idle + 1
            out.extend(m.value() for m in batch)
            if batch:
                c.commit(asynchronous=False)
    finally:
        c.close()
    return out


def _produce(bootstrap: str, u: str, stop: threading.Event, produced: dict[str, int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    n = 0
    while not stop.is_set() and n < 1500:  # bounded: ~1500 records per topic at most
        for x in FLOWS:
            t = f"s-{u}-{x}"
            for _ in range(10):
                p.produce(t, value=f"{t}:{produced[t]}".encode(), partition=produced[t] % PARTS)
                produced[t] += 1
        n += 10
        p.poll(0)
        stop.wait(0.01)
    assert p.flush(30) == 0


def _checkpointed(cfg: Path, bootstrap: str, u: str) -> bool:
    """Every group's newest checkpoint is at its last commit on the source."""
    store = open_store(load(cfg).offset_store)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests-cp", "enable.auto.commit": False})
    try:
        for i in range(GROUPS):
            t = _topic(u, i)
            cps = {(cp.topic, cp.partition): cp.source_offset for cp in store.checkpoints(f"f{t[-1]}-{u}", f"g-{u}-{i}")}
            committed = c.committed([TopicPartition(t, p) for p in range(PARTS)], timeout=10)
            if any(tp.offset >= 0 and cps.get((t, tp.partition)) != tp.offset for tp in committed):
                return False
        return True
    finally:
        c.close()
        store.close()


def test_planned_then_unplanned_site_failover(clusters, tmp_path, unique):
    u = unique
    cfg = _config(tmp_path / "site.yaml", clusters, u)
    for x in FLOWS:
        create_topic(clusters.bootstrap("src"), f"s-{u}-{x}", PARTS)
    produced = {f"s-{u}-{x}": 0 for x in FLOWS}
    seen: dict[int, list[bytes]] = {i: [] for i in range(GROUPS)}
    mirror = MirrorProcess(cfg)
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(clusters.bootstrap("src"), u, stop, produced))
    try:
        producer.start()
        for round_ in range(2):  # the groups consume while records are produced and mirrored
            for i in range(GROUPS):
                seen[i] += _consume(clusters.bootstrap("src"), f"g-{u}-{i}", [_topic(u, i)], at_most=40 + 15 * i + 100 * round_, timeout=1.0)
        stop.set()
        producer.join(60)
        for x in FLOWS:  # planned: producers stopped, the mirror caught up
            t = f"s-{u}-{x}"
            wait_for(lambda t=t: end_offsets(clusters.bootstrap("dst"), f"src.{t}", PARTS) == end_offsets(clusters.bootstrap("src"), t, PARTS), 90, f"{t} mirrored")
        wait_for(lambda: _checkpointed(cfg, clusters.bootstrap("src"), u), 60, "checkpoints of every group's last commit")
    finally:
        stop.set()
        mirror.stop()

    plan_path = tmp_path / "site-plan.json"
    table = main(["failover", "plan", "-c", str(cfg), "--from", f"east{u}", "--translate", "--out", str(plan_path)])
    assert table == 0
    doc = json.loads(plan_path.read_text())
    assert doc["totals"]["groups"] == GROUPS and doc["totals"]["refused"] == 0, doc["totals"]
    assert doc["totals"]["unmirrored"] == 0 and doc["totals"]["may_reread"] == 0, doc["totals"]
    assert sorted(f["flow"] for f in doc["flows"]) == [f"f{x}-{u}" for x in FLOWS]
    assert all(g["truth"] == "source-offsets" and g["target"] == "dst" for g in doc["groups"])

    assert main(["failover", "apply", "--plan", str(plan_path), "--yes"]) == 0
    backup = tmp_path / "site-plan.backup.json"
    assert len(json.loads(backup.read_text())["groups"]) == GROUPS
    # A second run finds every group moved: it touches nothing and says so.
    assert main(["failover", "apply", "--plan", str(plan_path), "--yes", "--json"]) == 0

    for i in range(GROUPS):  # an independent consumer per group, on the target
        t = _topic(u, i)
        after = _consume(clusters.bootstrap("dst"), f"g-{u}-{i}", [f"src.{t}"], at_most=10**6, timeout=2.0)
        counts = Counter(seen[i] + after)
        want = {f"{t}:{n}".encode() for n in range(produced[t])}
        lost = want - set(counts)
        duplicated = [v for v, n in counts.items() if n > 1]
        assert not lost and not duplicated, (f"g-{u}-{i}", len(lost), len(duplicated))

    # Unplanned: the source gone (nothing listens there); planned from the newest checkpoints.
    dead = _config(tmp_path / "dead.yaml", clusters, u, src=f"127.0.0.1:{free_port()}", timeout="3s")
    out_path = tmp_path / "unplanned.json"
    assert main(["failover", "plan", "-c", str(dead), "--from", "src", "--translate", "--json", "--out", str(out_path)]) == 0
    unplanned = json.loads(out_path.read_text())
    assert unplanned["totals"]["groups"] == GROUPS
    assert any("did not answer" in n for n in unplanned["notes"])
    for g in unplanned["groups"]:
        assert g["truth"] == "checkpoints" and g["checkpoint_age_ms"] is not None and g["may_reread"] >= 0
        # The refusal names them: each group is now committed on the target (and consumed there).
        assert g["source_members"] is None

    # The whole site back to where it was before apply.
    assert main(["failover", "import", "--backup", str(backup), "--yes"]) == 0
    c = Consumer({"bootstrap.servers": clusters.bootstrap("dst"), "group.id": f"g-{u}-0", "enable.auto.commit": False})
    try:
        back = c.committed([TopicPartition(f"src.{_topic(u, 0)}", p) for p in range(PARTS)], timeout=10)
    finally:
        c.close()
    assert all(tp.offset < 0 for tp in back), back  # the group had no offsets on the target before
