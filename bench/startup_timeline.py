"""Where a Spark contender's first record's time goes: `python -m bench.startup_timeline`.

Runs `mirror spark run --until-caught-up` (`spark`) and `bench.plain_spark` (`plain-spark`)
alternately against running clusters (`mirror dev up --clusters src,dst`), each into a fresh
LogAppendTime target topic, and prints per run the seconds from process start to each
start-up step (`bench.startup_stamps`: JVM launch, gateway, SparkContext, session, query
start, batch 0 in our `foreachBatch`), to the first record on the target (its append time,
as the bench measures it) and the CPU seconds the process tree used until then (sampled every
20 ms; on a shared machine it moves far less than wall time). `--event-log` adds Spark's
event log (the query's batches, jobs and first tasks) to each run's full timeline.

    python -m bench.startup_timeline --src 127.0.0.1:19092 --dst 127.0.0.1:19192 --rounds 2
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import load
from bench.contenders import ROOT

TOPIC = "bench-load"
STEPS = (  # (column, the stamp's text) in the order they happen
    ("jvm launch", "launch_gateway called"),
    ("gateway up", "launch_gateway returned"),
    ("context up", "SparkContext.__init__ returned"),
    ("session up", "Builder.getOrCreate returned"),
    ("query started", "DataStreamWriter.start returned"),
    ("batch 0 in foreachBatch", "Batches.on_batch called"),
)


def _tree_cpu(root: int, hz: int) -> float:
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / hz
            for children in glob.glob(f"/proc/{pid}/task/*/children"):
                stack += [int(c) for c in Path(children).read_text().split()]
        except OSError:
            continue
    return total


def _argv(kind: str, run: Path, src: str, dst: str, target: str, name: str) -> list[str]:
    prelude = f"exec(open({str(Path(__file__).with_name('startup_stamps.py'))!r}).read())\nimport runpy, sys\n"
    if kind == "plain-spark":
        plain = "runpy.run_module('bench.plain_spark', run_name='__main__')"
        code = prelude + f"sys.argv = ['bench.plain_spark'] + sys.argv[1:]\n{plain}"
        return [sys.executable, "-c", code, "--src", src, "--dst", dst, "--topic", TOPIC, "--target-topic", target]
    cfg = run / "mirror.yaml"
    flow = {"name": name, "source": name, "target": f"{name}t", "topics": {"include": [TOPIC]}, "rename": "prefix"}
    cfg.write_text(
        json.dumps(
            {
                "clusters": {name: {"bootstrap": src}, f"{name}t": {"bootstrap": dst}},
                "flows": [{**flow, "sync_topic_configs": False}],
                "offset_store": {"kind": "sqlite", "path": str(run / "offsets.db")},
            }
        )
    )
    code = prelude + "sys.argv = ['mirror'] + sys.argv[1:]\nrunpy.run_module('mirror', run_name='__main__')"
    return [sys.executable, "-c", code, "spark", "run", "-c", str(cfg), "--flow", name, "--until-caught-up"]


def _events(folder: Path, t0: float) -> list[tuple[float, str]]:
    """The query's events in Spark's event log, as (seconds since t0, what)."""
    rows: list[tuple[float, str]] = []
    for path in [p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("appstatus")]:
        first_task: set[int] = set()
        for line in path.read_text().splitlines():
            e = json.loads(line)
            kind = e["Event"]
            if kind.endswith("QueryProgressEvent"):
                pr = e["progress"]
                at = time.mktime(time.strptime(pr["timestamp"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
                rows.append((at + float(pr["timestamp"][19:23]) - t0, f"batch {pr['batchId']} {pr['durationMs']}"))
            elif kind == "SparkListenerJobStart":
                rows.append((e["Submission Time"] / 1000 - t0, f"job {e['Job ID']} submitted"))
            elif kind == "SparkListenerTaskStart" and e["Stage ID"] not in first_task:
                first_task.add(e["Stage ID"])
                rows.append((e["Task Info"]["Launch Time"] / 1000 - t0, f"stage {e['Stage ID']} first task"))
    return rows


def timeline(kind: str, src: str, dst: str, partitions: int, work: Path, event_log: bool) -> dict[str, Any]:
    """One run of `kind`: its steps, first record and CPU."""
    name = f"st{uuid.uuid4().hex[:6]}"
    run = work / f"{kind}-{name}"
    run.mkdir(parents=True)
    target = f"{name}.{TOPIC}"
    load.create_target_topic(dst, target, partitions)
    env = dict(os.environ, STAMP_FILE=str(run / "stamps.txt"))
    if event_log:
        (run / "conf").mkdir()
        (run / "events").mkdir()
        (run / "conf" / "spark-defaults.conf").write_text(
            f"spark.eventLog.enabled true\nspark.eventLog.dir file://{run / 'events'}\n"
            "spark.eventLog.compress false\nspark.eventLog.rolling.enabled false\n"
        )
        env["SPARK_CONF_DIR"] = str(run / "conf")  # (the driver's classpath changes: no class archive)
    hz = os.sysconf("SC_CLK_TCK")
    load_start = os.getloadavg()[0]
    t0 = time.time()
    env["STAMP_T0"] = repr(t0)
    with open(run / "log.txt", "w") as log:
        proc = subprocess.Popen(_argv(kind, run, src, dst, target, name), env=env, stdout=log, stderr=log, cwd=ROOT)
    cpu: list[tuple[float, float]] = []
    while proc.poll() is None:
        cpu.append((time.time() - t0, _tree_cpu(proc.pid, hz)))
        time.sleep(0.02)
    span = load.target_span(dst, target, partitions)
    first = span.first_append_ms / 1000 - t0
    stamps = [line.split("\t", 2) for line in (run / "stamps.txt").read_text().splitlines()]
    steps = {col: next((float(t) for t, _, what in stamps if what == text), None) for col, text in STEPS}
    rows = [(float(t), f"{what} ({thread})") for t, thread, what in stamps]
    rows += _events(run / "events", t0) if event_log else []
    rows.append((first, "FIRST RECORD on the target"))
    (run / "timeline.txt").write_text("\n".join(f"{t:8.3f}  {what}" for t, what in sorted(rows)) + "\n")
    return {
        "contender": kind,
        "rc": proc.returncode,
        "records": span.records,
        "load": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "steps": {k: round(v, 2) if v is not None else None for k, v in steps.items()},
        "first_record_s": round(first, 2),
        "cpu_to_first_s": round(max([c for t, c in cpu if t <= first] or [0.0]), 2),
        "cpu_s": round(cpu[-1][1], 2) if cpu else None,
        "timeline": str(run / "timeline.txt"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.startup_timeline", description=__doc__.splitlines()[0])
    ap.add_argument("--src", required=True, help="source cluster's bootstrap")
    ap.add_argument("--dst", required=True, help="target cluster's bootstrap")
    ap.add_argument("--records", type=int, default=300_000, help="records preloaded when the source has no topic")
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", default="spark,plain-spark", help="contenders, in the order run each round")
    ap.add_argument("--event-log", action="store_true", help="Spark's event log too (a SPARK_CONF_DIR of its own)")
    ap.add_argument("--out", type=Path, help="the runs as JSON")
    args = ap.parse_args(argv)
    if TOPIC not in load.topic_names(args.src):
        load.preload(args.src, TOPIC, args.records, args.partitions, 512)
    work = Path(tempfile.mkdtemp(prefix="startup-timeline-"))
    runs = []
    for _ in range(args.rounds):
        for kind in args.only.split(","):
            result = timeline(kind, args.src, args.dst, args.partitions, work, args.event_log)
            runs.append(result)
            steps = " ".join(f"{k} {v}" for k, v in result["steps"].items() if v is not None)
            print(
                f"{kind}: load {result['load'][0]}->{result['load'][1]}; {steps}; first record "
                f"{result['first_record_s']} s; CPU until then {result['cpu_to_first_s']} s, in all {result['cpu_s']} s"
                f" ({result['records']} records, exit {result['rc']}; {result['timeline']})",
                flush=True,
            )
    if args.out:
        args.out.write_text(json.dumps(runs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
