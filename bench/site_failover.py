"""`python -m bench.site_failover`: a whole site's failover at 500 groups x 100 partitions.

The estate: T topics x P partitions on the source (default 10 x 10 = 100 partitions), R
records in each, mirrored once by `mirror run --until-caught-up`, and G application groups
(default 500) each committed halfway through every partition. Then, each timed once as a
process of its own (wall seconds, Python start-up included):

1. `mirror failover plan --from src --translate --out PLAN` (every group, one plan);
2. `mirror failover apply --plan PLAN --yes` (one backup, every group moved);
3. `mirror failover import --backup BACKUP --yes` (every group back).

`--before PYTHON`: an older tree's interpreter does the same three steps first, on the
same estate (before/after in one sitting, at the same load).

Figures only, never asserted (targets in bench/README.md "Site failover"); JSON under
bench/results with the machine's load average at start and end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.harness import _free_base_port, _log, _machine
from bench.scale import RESULTS, ScaleParams, _produce, _timed

GROUP_PREFIX = "site-app-"


@dataclass
class SiteParams:
    groups: int = 500
    topics: int = 10
    partitions: int = 10
    records: int = 4


def _estate(bootstrap: str, p: SiteParams) -> list[str]:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"site.t{i:03d}" for i in range(p.topics)]
    for f in admin.create_topics([NewTopic(n, p.partitions, 1) for n in names], operation_timeout=120).values():
        f.result(180)
    _produce(bootstrap, names, ScaleParams(topics=p.topics, partitions=p.partitions, records=p.records), 0)
    half = max(1, p.records // 2)
    tps = [TopicPartition(n, q, half) for n in names for q in range(p.partitions)]
    # The first commit through a consumer, which waits for the offsets topic a new cluster
    # creates on first use; then each group once (one group per request: librdkafka's
    # limit), 50 in flight at a time.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{GROUP_PREFIX}0000", "enable.auto.commit": False})
    try:
        for _ in range(60):
            try:
                c.commit(offsets=tps, asynchronous=False)
                break
            except KafkaException:  # NOT_COORDINATOR while the offsets topic is created
                time.sleep(1)
    finally:
        c.close()
    for i in range(0, p.groups, 50):
        futs = [
            f
            for g in range(i, min(p.groups, i + 50))
            for f in admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(f"{GROUP_PREFIX}{g:04d}", tps)], request_timeout=60
            ).values()
        ]
        for f in futs:
            f.result(120)
    return names


def _config(path: Path, src: str, dst: str, workdir: Path) -> Path:
    path.write_text(f"""\
clusters:
  src: {{bootstrap: "{src}", timeout: 60s, datacenter: east}}
  dst: {{bootstrap: "{dst}", timeout: 60s, datacenter: west}}
flows:
  - name: site
    source: src
    target: dst
    topics: {{include: ["site\\\\..*"]}}
    groups: ["{GROUP_PREFIX}.*"]
offset_store: {{kind: sqlite, path: "{workdir}/offsets.db"}}
metrics: {{host: 127.0.0.1}}
""")
    return path


def _contender(res: dict[str, Any], tag: str, py: list[str], cfg: Path, workdir: Path, logs: Path) -> None:
    """Plan, apply and restore with one tree, timed; figures into `res` (prefixed `tag_`)."""
    pre = f"{tag}_" if tag else ""
    plan, backup = workdir / f"{pre}plan.json", workdir / f"{pre}plan.backup.json"
    steps = [
        (
            "plan",
            [*py, "failover", "plan", "-c", str(cfg), "--from", "east", "--translate", "--out", str(plan), "--json"],
        ),
        ("apply", [*py, "failover", "apply", "--plan", str(plan), "--yes", "--json"]),
        ("restore", [*py, "failover", "import", "--backup", str(backup), "--yes"]),
    ]
    for name, argv in steps:
        s, rc, stdout = _timed(argv, logs / f"{pre}{name}.log", 600)
        res[f"{pre}{name}_s"], res[f"{pre}{name}_exit"] = round(s, 2), rc
        _log(f"{tag or 'this tree'} {name}: {s:.2f} s (exit {rc})")
        if name == "plan" and rc == 0:
            res[f"{pre}plan_totals"] = json.loads(stdout)["totals"]
            res[f"{pre}plan_bytes"] = plan.stat().st_size
        if name == "apply" and rc == 0:
            res[f"{pre}apply_moved"] = len(json.loads(stdout)["moved"])


def run(p: SiteParams, out: Path | None = None, before: str | None = None) -> dict[str, Any]:
    from mirror.devenv.kafka import DevClusters

    started = dt.datetime.now(dt.UTC)
    machine = _machine()
    workdir = Path(tempfile.mkdtemp(prefix="mirror-site-"))
    logs = workdir / "logs"
    logs.mkdir()
    dev = DevClusters(workdir / "clusters")
    py = [sys.executable, "-m", "mirror"]
    res: dict[str, Any] = {"params": asdict(p), "group_partitions": p.groups * p.topics * p.partitions}
    if before:
        res["before_python"] = before
    try:
        status = dev.up(["src", "dst"], _free_base_port(2)).status
        src, dst = status["clusters"]["src"]["bootstrap"], status["clusters"]["dst"]["bootstrap"]
        t = time.monotonic()
        _estate(src, p)
        res["estate_s"] = round(time.monotonic() - t, 1)
        cfg = _config(workdir / "site.yaml", src, dst, workdir)
        s, rc, _ = _timed([*py, "run", "-c", str(cfg), "--until-caught-up"], logs / "run.log", 600)
        res["mirror_caught_up_s"], res["mirror_exit"] = round(s, 1), rc
        _log(
            f"estate ready ({res['estate_s']} s), mirrored in {res['mirror_caught_up_s']} s; planning {p.groups} groups"
        )
        # Each contender fails the same estate over and back: the restore leaves the target as
        # it found it (no commits), so the next one starts from the same state.
        for tag, python in ([("before", before)] if before else []) + [("", sys.executable)]:
            _contender(res, tag, [python, "-m", "mirror"], cfg, workdir, logs)
    finally:
        dev.down()
        shutil.rmtree(workdir, ignore_errors=True)
    machine["load_avg_end"] = list(os.getloadavg())
    result = {"kind": "site-failover", "started_at": started.isoformat(timespec="seconds"), "machine": machine, **res}
    out = out or RESULTS / f"site-failover-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.site_failover", description=__doc__.split("\n", 1)[0])
    ap.add_argument("--groups", type=int, default=SiteParams.groups)
    ap.add_argument("--topics", type=int, default=SiteParams.topics)
    ap.add_argument("--partitions", type=int, default=SiteParams.partitions)
    ap.add_argument("--records", type=int, default=SiteParams.records)
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--before",
        metavar="PYTHON",
        help="an older tree's interpreter: it plans, applies and restores the same estate first",
    )
    a = ap.parse_args(argv)
    res = run(SiteParams(a.groups, a.topics, a.partitions, a.records), a.out, a.before)
    return 0 if all(res.get(f"{s}_exit") == 0 for s in ("plan", "apply", "restore")) else 1


if __name__ == "__main__":
    sys.exit(main())
