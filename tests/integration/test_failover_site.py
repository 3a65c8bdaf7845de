"""A whole site failed over in one reviewed plan: 3 flows, 20 groups, live workload.

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
import time
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
RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"

FLOWS = ("a", "b", "c")
# Site east = {src, b}, west = {dst, c}: three flows east -> west (one flow per cluster pair).
SOURCE = {"a": "src", "b": "b", "c": "src"}
TARGET = {"a": "dst", "b": "dst", "c": "c"}
GROUPS = 20
PARTS = 2


class Site:
    def __init__(self, clusters, more) -> None:
        self.bootstraps = {
            "src": clusters.bootstrap("src"),
            "dst": clusters.bootstrap("dst"),
            "b": more.bootstrap("b"),
            "c": more.bootstrap("c"),
        }

    def bootstrap(self, name: str) -> str:
        return self.bootstraps[name]


def _config(path: Path, site: Site, u: str, *, dead: str | None = None, timeout: str = "10s") -> Path:
    flows = "".join(
        f"""\
  - name: f{x}-{u}
    source: {SOURCE[x]}
    target: {TARGET[x]}
    consumer_group: mirror-{x}-{u}
    refresh_interval: 1s
    commit_interval: 300ms
    checkpoint_interval: 1s
    topics: {{include: ["s-{u}-{x}"]}}
    groups: ["g-{u}-.*"]
"""
        for x in FLOWS
    )
    dc = {"src": f"east{u}", "b": f"east{u}", "dst": f"west{u}", "c": f"west{u}"}
    clusters = "".join(
        f'  {n}: {{bootstrap: "{f"127.0.0.1:{free_port()}" if n == dead else site.bootstrap(n)}", '
        f"timeout: {timeout}, datacenter: {dc[n]}}}\n"
        for n in dc
    )
    path.write_text(f"""\
clusters:
{clusters}flows:
{flows}offset_store: {{kind: sqlite, path: {path.parent / "offsets.db"}}}
canary: {{topic: canary-{u}}}
""")
    return path


def _topic(u: str, i: int) -> str:
    return f"s-{u}-{FLOWS[i % len(FLOWS)]}"


def _x(i: int) -> str:
    return FLOWS[i % len(FLOWS)]


def _consume(
    bootstrap: str, group: str, topics: list[str], *, at_most: int, timeout: float = 5.0, to_end: bool = False
) -> list[bytes]:
    """Read up to `at_most` records per partition as `group` from its committed offsets, one
    partition after the other (so every partition gets a commit); commit what was read."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    out: list[bytes] = []
    try:
        for tp in [TopicPartition(t, p) for t in topics for p in range(PARTS)]:
            found: list[list[TopicPartition]] = []

            def ask(
                tp: TopicPartition = tp, found: list = found
            ) -> bool:  # a fresh cluster answers NOT_COORDINATOR until __consumer_offsets is up
                try:
                    found.append(c.committed([tp], timeout=30))
                    return True
                except KafkaException:
                    return False

            wait_for(ask, 180, f"{group}'s committed offsets")
            at = found[-1][0].offset
            c.assign([TopicPartition(tp.topic, tp.partition, at if at >= 0 else 0)])
            end = c.get_watermark_offsets(tp, timeout=10)[1] if to_end else None
            n, idle, pos = 0, 0, at
            while n < at_most and idle < int(timeout / 0.5) and (end is None or pos < end):
                batch = [m for m in c.consume(min(200, at_most - n), timeout=0.5) if m.error() is None]
                idle = 0 if batch else idle + 1
                out.extend(m.value() for m in batch)
                n += len(batch)
                if batch:
                    pos = batch[-1].offset() + 1
                    c.commit(asynchronous=False)
            c.unassign()
    finally:
        c.close()
    return out


def _produce(site: Site, u: str, stop: threading.Event, produced: dict[str, int]) -> None:
    ps = {
        c: Producer({"bootstrap.servers": site.bootstrap(c), "linger.ms": 5, "enable.idempotence": True})
        for c in {"src", "b"}
    }
    n = 0
    while not stop.is_set() and n < 1500:  # bounded: ~1500 records per topic at most
        for x in FLOWS:
            t = f"s-{u}-{x}"
            for _ in range(10):
                ps[SOURCE[x]].produce(t, value=f"{t}:{produced[t]}".encode(), partition=produced[t] % PARTS)
                produced[t] += 1
        n += 10
        for p in ps.values():
            p.poll(0)
        stop.wait(0.01)
    for p in ps.values():
        assert p.flush(30) == 0


def _commit(bootstrap: str, group: str, topic: str) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})

    def commit() -> bool:
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
        return True

    try:
        wait_for(commit, 120, f"committing {group}")
    finally:
        c.close()


def _checkpointed(cfg: Path, site: Site, u: str) -> bool:
    """Every group's newest checkpoint is at its last commit on the source."""
    store = open_store(load(cfg).offset_store)
    try:
        for i in range(GROUPS):
            t = _topic(u, i)
            cps = {
                (cp.topic, cp.partition): cp.source_offset for cp in store.checkpoints(f"f{_x(i)}-{u}", f"g-{u}-{i}")
            }
            c = Consumer(
                {
                    "bootstrap.servers": site.bootstrap(SOURCE[_x(i)]),
                    "group.id": f"g-{u}-{i}",
                    "enable.auto.commit": False,
                }
            )
            try:
                committed = c.committed([TopicPartition(t, p) for p in range(PARTS)], timeout=10)
            finally:
                c.close()
            if any(tp.offset >= 0 and cps.get((t, tp.partition)) != tp.offset for tp in committed):
                return False
        return True
    finally:
        store.close()


@pytest.mark.timeout(900)  # starting the session's clusters b and c counts too, on a loaded machine minutes
def test_planned_then_unplanned_site_failover(clusters, more_clusters, tmp_path, unique):
    u = unique
    site = Site(clusters, more_clusters)
    cfg = _config(tmp_path / "site.yaml", site, u)
    for x in FLOWS:
        create_topic(site.bootstrap(SOURCE[x]), f"s-{u}-{x}", PARTS)
    produced = {f"s-{u}-{x}": 0 for x in FLOWS}
    seen: dict[int, list[bytes]] = {i: [] for i in range(GROUPS)}
    # A group the flows' pattern names that reads only a topic no flow mirrors: not part of the plan.
    create_topic(site.bootstrap("src"), f"other-{u}", 1)
    _commit(site.bootstrap("src"), f"g-{u}-other", f"other-{u}")
    mirror = MirrorProcess(cfg)
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(site, u, stop, produced))
    try:
        producer.start()
        for round_ in range(2):  # the groups consume while records are produced and mirrored
            for i in range(GROUPS):
                seen[i] += _consume(
                    site.bootstrap(SOURCE[_x(i)]),
                    f"g-{u}-{i}",
                    [_topic(u, i)],
                    at_most=20 + 8 * i + 50 * round_,
                    timeout=1.0,
                )
        stop.set()
        producer.join(60)
        for x in FLOWS:  # planned: producers stopped, the mirror caught up
            t, src, dst = f"s-{u}-{x}", site.bootstrap(SOURCE[x]), site.bootstrap(TARGET[x])
            wait_for(
                lambda t=t, src=src, dst=dst, x=x: (
                    end_offsets(dst, f"{SOURCE[x]}.{t}", PARTS) == end_offsets(src, t, PARTS)
                ),
                90,
                f"{t} mirrored",
                detail=mirror.output,
            )
        wait_for(lambda: _checkpointed(cfg, site, u), 60, "checkpoints of every group's last commit")
    finally:
        stop.set()
        mirror.stop()

    plan_path = tmp_path / "site-plan.json"
    assert (
        main(
            [
                "failover",
                "plan",
                "-c",
                str(cfg),
                "--from",
                f"east{u}",
                "--to",
                f"west{u}",
                "--translate",
                "-v",
                "--out",
                str(plan_path),
            ]
        )
        == 0
    )
    doc = json.loads(plan_path.read_text())
    assert doc["totals"]["groups"] == GROUPS and doc["totals"]["refused"] == 0, doc["totals"]
    assert doc["totals"]["partitions"] == GROUPS * PARTS, doc["totals"]
    assert any(
        n.startswith("1 group(s) the flows' patterns match read none of their topics (left out): g-")
        for n in doc["notes"]
    ), doc["notes"]
    assert doc["totals"]["unmirrored"] == 0 and doc["totals"]["may_reread"] == 0, doc["totals"]
    assert sorted(f["flow"] for f in doc["flows"]) == [f"f{x}-{u}" for x in FLOWS]
    assert {f["flow"]: f["groups"] for f in doc["flows"]} == {
        f"f{x}-{u}": sum(1 for i in range(GROUPS) if _x(i) == x) for x in FLOWS
    }
    assert all(
        g["truth"] == "source-offsets" and g["target"] == TARGET[_x(int(g["group"].rsplit("-", 1)[1]))]
        for g in doc["groups"]
    )

    assert main(["failover", "apply", "--plan", str(plan_path), "--yes"]) == 0
    backup = tmp_path / "site-plan.backup.json"
    assert len(json.loads(backup.read_text())["groups"]) == GROUPS
    # A second run finds every group moved: it touches nothing and says so.
    assert main(["failover", "apply", "--plan", str(plan_path), "--yes"]) == 0

    for i in range(GROUPS):  # an independent consumer per group, on the target
        t = _topic(u, i)
        after = _consume(
            site.bootstrap(TARGET[_x(i)]),
            f"g-{u}-{i}",
            [f"{SOURCE[_x(i)]}.{t}"],
            at_most=10**6,
            timeout=5.0,
            to_end=True,
        )
        counts = Counter(seen[i] + after)
        want = {f"{t}:{n}".encode() for n in range(produced[t])}
        lost = want - set(counts)
        duplicated = [v for v, n in counts.items() if n > 1]
        assert not lost and not duplicated, (f"g-{u}-{i}", len(lost), len(duplicated))

    # Unplanned: cluster src gone (nothing listens there): its flows' groups are planned
    # from their newest checkpoints, with their age and what they may re-read; b's live.
    # Group 0 consumed 30 more records per partition after its newest checkpoint (the mirror is stopped):
    # exactly what it would re-read, which the plan must bound before apply.
    extra = _consume(site.bootstrap("src"), f"g-{u}-0", [_topic(u, 0)], at_most=30, timeout=2.0)
    assert len(extra) == 2 * 30
    dead = _config(tmp_path / "dead.yaml", site, u, dead="src", timeout="3s")
    out_path = tmp_path / "unplanned.json"
    assert (
        main(
            ["failover", "plan", "-c", str(dead), "--from", f"east{u}", "--translate", "--json", "--out", str(out_path)]
        )
        == 0
    )
    unplanned = json.loads(out_path.read_text())
    assert unplanned["totals"]["groups"] == GROUPS
    assert any("'src' did not answer" in n for n in unplanned["notes"]), unplanned["notes"]
    for g in unplanned["groups"]:
        x = _x(int(g["group"].rsplit("-", 1)[1]))
        if SOURCE[x] == "src":
            assert g["truth"] == "checkpoints" and g["checkpoint_age_ms"] >= 0 and g["source_state"] is None, g
            assert g["may_reread"] >= (2 * 30 if g["group"] == f"g-{u}-0" else 0), g
        else:
            assert g["truth"] == "source-offsets" and g["checkpoint_age_ms"] is None

    # The whole site back to where it was before apply: no offsets on the targets.
    assert main(["failover", "import", "--backup", str(backup), "--yes"]) == 0
    for i in (0, 1, 2):
        c = Consumer(
            {"bootstrap.servers": site.bootstrap(TARGET[_x(i)]), "group.id": f"g-{u}-{i}", "enable.auto.commit": False}
        )
        try:
            back = c.committed([TopicPartition(f"{SOURCE[_x(i)]}.{_topic(u, i)}", p) for p in range(PARTS)], timeout=10)
        finally:
            c.close()
        assert all(tp.offset < 0 for tp in back), back


@pytest.mark.timeout(900)
def test_site_drill_planned(clusters, more_clusters, tmp_path, unique):
    """`mirror drill runbooks/datacenter-failover.md --from`: two flows from the site, two
    drill groups on each, played together; the report has the site's RTO and every group's
    records lost and duplicated (0 and 0: planned)."""
    u = unique
    site = Site(clusters, more_clusters)
    cfg = tmp_path / "drill.yaml"
    flows = "".join(
        f"""\
  - {{name: d{x}-{u}, source: {src}, target: dst, consumer_group: mirror-d{x}-{u}, refresh_interval: 1s,
     commit_interval: 300ms, checkpoint_interval: 1s, topics: {{include: ["drill-{u}"]}}, groups: ["sd-{u}-.*"]}}
"""
        for x, src in (("a", "src"), ("b", "b"))
    )
    cfg.write_text(f"""\
clusters:
  src: {{bootstrap: "{site.bootstrap("src")}", timeout: 10s, datacenter: east{u}}}
  b: {{bootstrap: "{site.bootstrap("b")}", timeout: 10s, datacenter: east{u}}}
  dst: {{bootstrap: "{site.bootstrap("dst")}", timeout: 10s, datacenter: west{u}}}
flows:
{flows}offset_store: {{kind: sqlite, path: {tmp_path / "drill.db"}}}
canary: {{topic: canary-{u}}}
""")
    for c in ("src", "b"):
        create_topic(site.bootstrap(c), f"drill-{u}", 2)
    report = tmp_path / "report"
    mirror = MirrorProcess(cfg)
    try:
        rc = main(
            [
                "drill",
                str(RUNBOOKS / "datacenter-failover.md"),
                "-c",
                str(cfg),
                "--from",
                f"east{u}",
                "--to",
                f"west{u}",
                "--group",
                f"sd-{u}",
                "--groups",
                "2",
                "--topic",
                f"drill-{u}",
                "--yes",
                "--out",
                str(report),
            ]
        )
    finally:
        mirror.stop()
    doc = json.loads((report / "report.json").read_text())
    assert rc == 0, (doc.get("failed_step"), [s.get("failure") for s in doc["steps"]], mirror.output()[-3000:])
    assert doc["outcome"] == "passed" and doc["rto_seconds"] is not None and doc["rto_seconds"] >= 0
    groups = doc["workload"]["groups"]
    assert sorted(groups) == sorted(f"sd-{u}-d{x}-{u}-{k}" for x in "ab" for k in range(2))
    for g, v in groups.items():
        assert v["produced"] > 0 and v["read_before"] > 0 and v["read_after"] > 0, (g, v)
        assert v["lost"] == 0 and v["duplicated"] == 0, (g, v)
    assert "## Per group" in (report / "report.md").read_text()


def test_site_plan_at_a_time_moves_each_group_to_its_first_record_from_then(clusters, tmp_path, unique):
    """`failover plan --from DATACENTER --at TIME` on real brokers: every group of the site
    starts at the first record stamped TIME or later; groups that consumed exactly the records
    before TIME then read every record once, on the source and then on the target."""
    u = unique
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic = f"ts-{u}"
    create_topic(src, topic, PARTS)
    base = int(time.time() * 1000) - 600_000
    p = Producer({"bootstrap.servers": src, "enable.idempotence": True, "linger.ms": 5})
    for part in range(PARTS):
        for i in range(10):  # one record per 100 ms: the 6th of each partition is the first at `at`
            p.produce(topic, value=f"{topic}:{part}:{i}".encode(), partition=part, timestamp=base + 100 * i)
    assert p.flush(30) == 0
    at = base + 500
    cfg = tmp_path / "at.yaml"
    cfg.write_text(f"""\
clusters:
  src: {{bootstrap: "{src}", timeout: 10s, datacenter: east{u}}}
  dst: {{bootstrap: "{dst}", timeout: 10s, datacenter: west{u}}}
flows:
  - {{name: f-{u}, source: src, target: dst, consumer_group: mirror-{u}, topics: {{include: ["{topic}"]}},
     groups: ["t-{u}-.*"]}}
offset_store: {{kind: sqlite, path: {tmp_path / "at.db"}}}
""")
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    groups = [f"t-{u}-{k}" for k in range(2)]
    before = {g: _consume(src, g, [topic], at_most=5, timeout=5.0) for g in groups}  # every record before `at`
    plan_path = tmp_path / "at-plan.json"
    assert (
        main(["failover", "plan", "-c", str(cfg), "--from", f"east{u}", "--at", str(at), "--out", str(plan_path)]) == 0
    )
    doc = json.loads(plan_path.read_text())
    assert doc["method"] == "timestamp" and doc["totals"]["groups"] == 2 and doc["totals"]["refused"] == 0, doc
    for g in doc["groups"]:
        assert g["truth"] == "target-timestamps", g
        assert {(q["partition"], q["target_offset"]) for f in g["flows"] for q in f["partitions"]} == {
            (part, 5) for part in range(PARTS)
        }, g
    assert main(["failover", "apply", "--plan", str(plan_path), "--yes"]) == 0
    for g in groups:
        after = _consume(dst, g, [f"src.{topic}"], at_most=100, timeout=5.0, to_end=True)
        counts = Counter(before[g] + after)
        assert set(counts) == {f"{topic}:{part}:{i}".encode() for part in range(PARTS) for i in range(10)}, g
        assert max(counts.values()) == 1, (g, counts)
