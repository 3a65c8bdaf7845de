"""`mirror drill` on real clusters: the planned, unplanned and failback runbooks, run as written.

Each test counts what the drill workload produced and what the group read on its own,
from the clusters' logs and committed offsets (not from the drill's bookkeeping), and
compares that with the report.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.cli import main
from mirror.config import load
from mirror.store import open_store
from tests.support.clusters import TestClusters, start_clusters
from tests.support.kafkautil import group_offsets, read_partition
from tests.support.mirrorproc import MirrorProcess

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"


def _config(
    path: Path, bootstraps: dict[str, str], unique: str, topic: str, *, timeout: str = "10s", consumer: str = ""
) -> Path:
    clusters = "".join(f"  {n}:\n    bootstrap: {b}\n    timeout: {timeout}\n" for n, b in bootstraps.items())
    src, dst = list(bootstraps)
    path.write_text(f"""\
clusters:
{clusters}flows:
  - name: f-{unique}
    source: {src}
    target: {dst}
    consumer_group: mirror-{unique}
    refresh_interval: 1s
    commit_interval: 300ms
    checkpoint_interval: 1s
    topics: {{include: ['{topic}', 'refused-{unique}']}}
    groups: ['drill-.*']
    # a mirror killed with the primary leaves the group soon (failback's scrape)
    consumer: {{session.timeout.ms: 6000{consumer}}}
offset_store:
  kind: sqlite
  path: {path.parent / f"offsets-{unique}.db"}
""")
    return path


def _drill(
    runbook: Path, config: Path, unique: str, topic: str, report: Path, *extra: str, group: str | None = None
) -> int:
    return main(
        [
            "drill",
            str(runbook),
            "-c",
            str(config),
            "--flow",
            f"f-{unique}",
            "--group",
            group or f"drill-{unique}",
            "--topic",
            topic,
            "--partitions",
            "2",
            "--yes",
            "--out",
            str(report),
            *extra,
        ]
    )


def _seqs(records) -> list[tuple[int, int]]:
    out = []
    for r in records:
        doc = json.loads(r.value)
        out.append((doc["p"], doc["seq"]))
    return out


def independent_count(
    src: str, dst: str, topic: str, dst_topic: str, group: str, run: str, starts: dict[int, int], partitions: int
) -> dict[str, int]:
    """From the logs: what the primary holds of this run, what the group read there (below its
    committed offset) and on the DR cluster (from the plan's start to its committed offset)."""
    produced, before, after = set(), [], []
    src_committed = group_offsets(src, group, topic, partitions)
    dst_committed = group_offsets(dst, group, dst_topic, partitions)
    for p in range(partitions):
        for r in read_partition(src, topic, p):
            doc = json.loads(r.value)
            if doc["run"] != run:
                continue
            produced.add((p, doc["seq"]))
            if r.offset < src_committed[p]:
                before.append((p, doc["seq"]))
        for r in read_partition(dst, dst_topic, p):
            doc = json.loads(r.value)
            if doc["run"] == run and starts[p] <= r.offset < dst_committed[p]:
                after.append((p, doc["seq"]))
    read = set(before) | set(after)
    return {
        "produced": len(produced),
        "read_before": len(before),
        "read_after": len(after),
        "lost": len(produced - read),
        "duplicated": len(before) + len(after) - len(read),
    }


def _report(report_dir: Path) -> dict:
    return json.loads((report_dir / "report.json").read_text())


# ---------------------------------------------------------------------------- planned


def test_planned_drill_end_to_end_then_a_false_expectation_stops_and_resumes(
    clusters, tmp_path, unique, capsys
) -> None:
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, group = f"drill-{unique}", f"drill-{unique}"
    config = _config(tmp_path / "mirror.yaml", {"src": src, "dst": dst}, unique, topic)
    with MirrorProcess(config) as mirror:
        report_dir = tmp_path / "planned"
        rc = _drill(RUNBOOKS / "planned-failover.md", config, unique, topic, report_dir)
        out = capsys.readouterr()
        assert rc == 0, out.err + (report_dir / "report.md").read_text()
        rep = _report(report_dir)
        assert rep["outcome"] == "passed" and [s["outcome"] for s in rep["steps"]] == ["passed"] * 6
        assert rep["rto_seconds"] > 0
        assert rep["rpo"]["records"] >= 0
        w = rep["workload"]
        assert w["final"] and w["lost"] == 0 and w["duplicated"] == 0 and w["read_after"] > 0 and w["read_before"] > 0
        plan = json.loads((report_dir / "plan.json").read_text())
        starts = {p["partition"]: p["target_offset"] for p in plan["partitions"]}
        counted = independent_count(src, dst, topic, f"src.{topic}", group, w["run"], starts, 2)
        assert counted == {k: w[k] for k in counted}, (counted, w)
        md = (report_dir / "report.md").read_text()
        assert "records lost | 0" in md and "RTO" in md

        # A step whose expectation cannot hold: the drill stops there, names it, keeps the
        # report, and --from-step resumes with the runbook as it should be.
        broken = tmp_path / "broken" / "planned-failover.md"
        broken.parent.mkdir()
        text = (RUNBOOKS / "planned-failover.md").read_text()
        assert '.source_of_truth == "source-offsets"; .unmirrored == 0; within 60s' in text
        broken.write_text(
            text.replace(
                '.source_of_truth == "source-offsets"; .unmirrored == 0; within 60s',
                '.source_of_truth == "checkpoints"',
            )
        )
        group2 = f"drill-b{unique}"
        report2 = tmp_path / "resumed"
        args = [
            "-c",
            str(config),
            "--flow",
            f"f-{unique}",
            "--group",
            group2,
            "--topic",
            topic,
            "--partitions",
            "2",
            "--yes",
            "--out",
            str(report2),
        ]
        rc = main(["drill", str(broken), *args])
        err = capsys.readouterr().err
        assert rc == 1 and "step 4 (Plan) failed" in err and ".source_of_truth" in err and "--from-step 4" in err
        rep = _report(report2)
        assert rep["outcome"] == "failed" and rep["failed_step"] == 4
        assert [s["outcome"] for s in rep["steps"]] == ["passed", "passed", "passed", "failed"]
        assert rep["steps"][3]["commands"][-1]["failures"] == [
            '.source_of_truth == "checkpoints": got "source-offsets"'
        ]
        assert rep["rpo"] is not None and rep["workload"]["read_before"] > 0  # measured so far, kept

        assert main(["drill", str(RUNBOOKS / "planned-failover.md"), *args, "--from-step", "4"]) == 0, (
            capsys.readouterr().err
        )
        rep = _report(report2)
        assert rep["outcome"] == "passed" and [s["number"] for s in rep["steps"]] == [1, 2, 3, 4, 5, 6]
        w = rep["workload"]
        assert rep["rto_seconds"] > 0 and w["lost"] == 0 and w["duplicated"] == 0 and w["read_after"] > 0
        plan = json.loads((report2 / "plan.json").read_text())
        counted = independent_count(
            src,
            dst,
            topic,
            f"src.{topic}",
            group2,
            w["run"],
            {p["partition"]: p["target_offset"] for p in plan["partitions"]},
            2,
        )
        assert counted == {k: w[k] for k in counted}, (counted, w)

        # A cluster that does not answer during a drill: the step fails naming it, and the
        # report keeps what was measured up to there.
        gone = tmp_path / "gone.yaml"
        gone.write_text(
            config.read_text().replace(
                "clusters:\n", "clusters:\n  gone:\n    bootstrap: 127.0.0.1:9\n    timeout: 2s\n", 1
            )
        )
        runbook = tmp_path / "gone.md"
        runbook.write_text(
            "# Drill: a cluster that does not answer\n\n## 1. Stop\n\nmanual: stop-group\n\n"
            "## 2. Export on gone\n\n```sh\nmirror failover export -c $CONFIG --cluster gone --group "
            "$GROUP\n```\nexpect: exit 0\n"
        )
        report3 = tmp_path / "gone"
        rc = main(
            [
                "drill",
                str(runbook),
                "-c",
                str(gone),
                "--flow",
                f"f-{unique}",
                "--group",
                f"drill-g{unique}",
                "--topic",
                topic,
                "--yes",
                "--out",
                str(report3),
            ]
        )
        err = capsys.readouterr().err
        assert rc == 1 and "step 2 (Export on gone) failed" in err and "cluster 'gone'" in err
        rep = _report(report3)
        assert [s["outcome"] for s in rep["steps"]] == ["passed", "failed"] and "cluster 'gone'" in rep["steps"][1][
            "failure"
        ]
        assert rep["rpo"]["records"] >= 0 and rep["workload"]["produced"] > 0 and rep["workload"]["read_before"] > 0
        assert mirror.alive()


def test_quarterly_drill_runbook_runs_as_written(clusters, tmp_path, unique, capsys) -> None:
    """runbooks/drill.md: planned failover to DR, canary before/during/after, and back."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic = f"drill-{unique}"
    config = _config(tmp_path / "mirror.yaml", {"src": src, "dst": dst}, unique, topic)
    config.write_text(config.read_text() + f"canary:\n  topic: canary-{unique}\n  interval: 1s\n  max_latency: 15s\n")
    report_dir = tmp_path / "quarterly"
    with MirrorProcess(config):
        rc = _drill(RUNBOOKS / "drill.md", config, unique, topic, report_dir)
    assert rc == 0, capsys.readouterr().err + (report_dir / "report.md").read_text()
    rep = _report(report_dir)
    assert [s["outcome"] for s in rep["steps"]] == ["passed"] * 10
    w = rep["workload"]
    assert rep["rto_seconds"] > 0 and w["lost"] == 0 and w["duplicated"] == 0 and w["read_after"] > 0
    assert w["produced"] == w["read_before"] + w["read_after"]
    for name in ("canary-before.json", "canary-during.json", "canary-after.json"):
        assert json.loads((report_dir / name).read_text())["flows"][0]["lost"] == 0
    # Step 9 put the group back where it stopped on the primary: the plan's source offsets.
    plan = json.loads((report_dir / "plan.json").read_text())
    assert group_offsets(src, f"drill-{unique}", topic, 2) == {
        p["partition"]: p["source_offset"] for p in plan["partitions"]
    }


# ---------------------------------------------------------------------------- unplanned + failback


@pytest.fixture(scope="module")
def own_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClusters]:
    """A pair of its own: the unplanned drill kills the primary's broker."""
    tc = start_clusters(tmp_path_factory.mktemp("drill-clusters"), ["nyc", "sf"])
    try:
        yield tc
    finally:
        tc.dev.down()


def test_unplanned_drill_kills_only_its_broker_and_failback_finds_exactly_the_lost(
    own_clusters, tmp_path, capsys
) -> None:
    tc = own_clusters
    unique = uuid.uuid4().hex[:8]
    nyc, sf = tc.bootstrap("nyc"), tc.bootstrap("sf")
    topic, group = f"drill-{unique}", f"drill-{unique}"
    # A mirror that fetches every 2 s (a slow WAN): the primary dies with records it never copied.
    config = _config(
        tmp_path / "mirror.yaml",
        {"nyc": nyc, "sf": sf},
        unique,
        topic,
        timeout="3s",
        consumer=", fetch.min.bytes: 10000000, fetch.wait.max.ms: 2000",
    )
    report_dir = tmp_path / "unplanned"

    # A --dev-home that did not start nyc: the kill is refused (exit 3), nothing killed.
    other_home = tmp_path / "not-ours"
    other_home.mkdir()
    with MirrorProcess(config) as mirror:
        rc = _drill(
            RUNBOOKS / "unplanned-failover.md",
            config,
            unique,
            f"refused-{unique}",
            tmp_path / "refused",
            "--dev-home",
            str(other_home),
            group=f"drill-r{unique}",
        )
        err = capsys.readouterr().err
        assert rc == 3 and "step 2" in err and "not a dev cluster started under" in err
        assert tc.dev.node("nyc").pid() is not None

        rc = _drill(
            RUNBOOKS / "unplanned-failover.md", config, unique, topic, report_dir, "--dev-home", str(tc.dev.home)
        )
        out = capsys.readouterr()
        assert rc == 0, out.err + (report_dir / "report.md").read_text()
        assert tc.dev.node("nyc").pid() is None  # killed
        mirror.close()  # the old flow stops before the primary comes back (failback step 1)
    rep = _report(report_dir)
    w = rep["workload"]
    assert rep["outcome"] == "passed" and rep["rto_seconds"] > 0 and w["final"]
    plan = json.loads((report_dir / "plan.json").read_text())
    assert plan["source_of_truth"] == "checkpoints"
    starts = {p["partition"]: p["target_offset"] for p in plan["partitions"] if p["source_topic"] == topic}

    tc.start("nyc")  # to count independently what the primary held
    counted = independent_count(nyc, sf, topic, f"nyc.{topic}", group, w["run"], starts, 2)
    assert counted == {k: w[k] for k in counted}, (counted, w)

    # The README's bounds: duplicates at most what the group consumed since its last
    # checkpoint; lost exactly what never reached the DR cluster and the group had not read.
    cfg = load(config)
    store = open_store(cfg.offset_store)
    try:
        cps = {c.partition: c.source_offset for c in store.checkpoints(f"f-{unique}", group) if c.topic == topic}
    finally:
        store.close()
    committed = group_offsets(nyc, group, topic, 2)
    since_checkpoint = sum(committed[p] - cps[p] for p in range(2))
    assert w["duplicated"] <= since_checkpoint
    unmirrored = stranded = 0
    for p in range(2):
        on_dr = len(read_partition(sf, f"nyc.{topic}", p))
        src_end = len(read_partition(nyc, topic, p))
        unmirrored += max(0, src_end - max(on_dr, committed[p]))
        stranded += max(0, src_end - on_dr)
    assert w["lost"] == unmirrored
    print(
        f"unplanned drill: RTO {rep['rto_seconds']} s ({rep['rto_basis']}), RPO {rep['rpo']}, produced "
        f"{w['produced']}, "
        f"lost {w['lost']}, duplicated {w['duplicated']} (consumed since checkpoint {since_checkpoint}, "
        f"unmirrored {unmirrored})"
    )

    # Failback, as a drill: the primary answers (already restarted), its report names exactly
    # the records that never reached sf, the scrape clears it.
    fb_dir = tmp_path / "failback"
    rc = _drill(RUNBOOKS / "failback.md", config, unique, topic, fb_dir, "--dev-home", str(tc.dev.home))
    assert rc == 0, capsys.readouterr().err + (fb_dir / "report.md").read_text()
    fb = json.loads((fb_dir / "failback-report.json").read_text())
    never = sum(p["never_mirrored"] for p in fb["partitions"] if p["topic"] == topic)
    assert never == stranded and never >= w["lost"]
    scraped = _report(fb_dir)["steps"][4]["commands"][0]
    assert json.loads(scraped["stdout"])["scraped"] is True
    for p in range(2):
        assert read_partition(nyc, topic, p) == []  # the old primary's copy is gone


def test_unplanned_site_drill_names_each_groups_reread_before_apply(own_clusters, tmp_path) -> None:
    """`runbooks/datacenter-failover-unplanned.md --from nyc`: the site's brokers killed while
    two drill groups consume; the plan, made before apply from their checkpoints, names per
    group what it may re-read, and what each group then read twice stays within it."""
    tc = own_clusters
    unique = uuid.uuid4().hex[:8]
    topic = f"site-{unique}"
    if tc.dev.node("nyc").pid() is None:
        tc.start("nyc")
    config = _config(
        tmp_path / "mirror.yaml", {"nyc": tc.bootstrap("nyc"), "sf": tc.bootstrap("sf")}, unique, topic, timeout="3s"
    )
    report_dir = tmp_path / "site"
    try:
        with MirrorProcess(config):
            rc = main(
                [
                    "drill",
                    str(RUNBOOKS / "datacenter-failover-unplanned.md"),
                    "-c",
                    str(config),
                    "--from",
                    "nyc",
                    "--to",
                    "sf",
                    "--group",
                    f"drill-{unique}",
                    "--groups",
                    "2",
                    "--topic",
                    topic,
                    "--partitions",
                    "2",
                    "--yes",
                    "--out",
                    str(report_dir),
                    "--dev-home",
                    str(tc.dev.home),
                ]
            )
            assert rc == 0, (report_dir / "report.md").read_text()
            assert tc.dev.node("nyc").pid() is None  # killed
    finally:
        tc.start("nyc")
    rep = _report(report_dir)
    assert rep["outcome"] == "passed" and rep["site"] == "nyc" and rep["rto_seconds"] > 0
    plan = json.loads((report_dir / "site-plan.json").read_text())
    planned = {g["group"]: g for g in plan["groups"]}
    groups = rep["workload"]["groups"]
    assert sorted(groups) == sorted(planned) == [f"drill-{unique}-f-{unique}-{k}" for k in range(2)]
    for g, v in groups.items():
        assert planned[g]["truth"] == "checkpoints" and planned[g]["checkpoint_age_ms"] is not None
        # No `read_after > 0`: a group that had read all before the kill, and resumed at its exact
        # translated position, rightly reads nothing on the DR copy (the flake of wave 4).
        assert v["produced"] > 0 and v["read_before"] + v["read_after"] >= v["produced"] - v["lost"], (g, v)
        assert v["duplicated"] <= planned[g]["may_reread"], (g, v, planned[g])
    assert "## Per group" in (report_dir / "report.md").read_text()
