"""`python -m bench.spark_driver`: the Spark driver's own work per micro-batch, at many partitions.

Issue 21's target is <= 200 ms of driver work per batch at 1,000 partitions: everything
`mirror spark run` does on the driver besides the tasks (the source's end offsets, Spark's
offset log read, the offset-map rows stored, the group commit, the metrics). The tasks'
time depends on the records; this is the fixed cost each batch pays on top.

Starts a pair of clusters (or uses `--src`/`--dst`), writes `--records-per-partition` x
`--batches` records into every partition of a `--partitions` topic, and runs the flow in
this process (`run_flow`, local mode, metrics on) with micro-batches of `--partitions` x
`--records-per-partition` records, so every batch touches every partition. Reported per
batch, from the driver's own DEBUG line (`mirror.spark.batches`) and Spark's progress:

- driver ms: on the driver around the tasks (source ends, offset log, rows, commit, metrics);
- tasks ms: the tasks' Spark job, for scale;
- Spark's own per-trigger work (`latestOffset`, `walCommit`, `commitOffsets`,
  `queryPlanning`), which a plain Spark job pays too;
- one refresh of the running query's topics (`TopicWatch.changed` and the target limits),
  which `mirror spark run` does every `refresh_interval` beside the batches.

The load average is printed with the figures; the JSON goes to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import load
from bench.harness import RESULTS, _free_base_port, _free_port

TOPIC = "driver-load"
# `Batches.on_batch`'s DEBUG line: "batch 3: 12 tasks (jvm), 500000 records; tasks 812 ms, driver 40 ms
# (...)". The path in brackets ("jvm", "python", "python*") is optional so older lines still read.
_LINE = re.compile(
    r"batch (?P<batch>\d+): (?P<tasks>\d+) tasks(?: \((?P<path>[^)]*)\))?, (?P<records>\d+) records; "
    r"tasks (?P<tasks_ms>\d+) ms, driver (?P<driver_ms>\d+) ms"
)


class _BatchLines(logging.Handler):
    """Collects `Batches.on_batch`'s per-batch timing line."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.batches: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = _LINE.search(record.getMessage())
        if m:
            found: dict[str, Any] = {k: int(v) for k, v in m.groupdict().items() if k != "path" and v is not None}
            found["path"] = m.group("path")
            self.batches.append(found)


def _progress_listener(spark: Any) -> tuple[Any, list[dict[str, Any]]]:
    from pyspark.sql.streaming import StreamingQueryListener

    seen: list[dict[str, Any]] = []

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            doc = json.loads(event.progress.json)
            seen.append({"batch": doc.get("batchId"), **(doc.get("durationMs") or {})})

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = Progress()
    spark.streams.addListener(listener)
    return listener, seen


def _config(src: str, dst: str, workdir: Path, per_batch: int) -> Any:
    from mirror.config import load as load_config

    doc = {
        "clusters": {"drv": {"bootstrap": src}, "drvt": {"bootstrap": dst}},
        "flows": [
            {
                "name": "drv",
                "source": "drv",
                "target": "drvt",
                "topics": {"include": [TOPIC]},
                "rename": "prefix",
                "sync_topic_configs": False,
                "spark": {"max_records_per_batch": per_batch},
            }
        ],
        "offset_store": {"kind": "sqlite", "path": str(workdir / "offsets.db")},
        "spark": {"checkpoint_dir": str(workdir / "checkpoints")},
    }
    path = workdir / "mirror.yaml"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return load_config(path)


def _refresh_ms(config: Any, flow: Any, reps: int = 3) -> float:
    """The median time of the running query's periodic refresh at this many partitions."""
    from mirror.domain.topics import match_topics
    from mirror.kafka import Admin
    from mirror.spark.watch import TopicWatch

    source = Admin(flow.source, config.clusters[flow.source])
    target = Admin(flow.target, config.clusters[flow.target])
    mappings = match_topics(config, flow, source.topics())
    source_ids = source.topic_ids([m.source for m in mappings])
    target_ids = target.topic_ids([m.target for m in mappings])
    watch = TopicWatch(config, flow, source, target)
    took = []
    for _ in range(reps):
        t0 = time.monotonic()
        target.max_message_bytes(sorted({m.target for m in mappings}))
        watch.changed(mappings, source_ids, target_ids)
        took.append((time.monotonic() - t0) * 1000)
    return statistics.median(took)


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"median": statistics.median(values), "max": max(values), "min": min(values)}


def measure(src: str, dst: str, workdir: Path, partitions: int, per_partition: int, batches: int) -> dict[str, Any]:
    from mirror.spark.job import run_flow
    from mirror.spark.session import spark_session

    load.create_topic(src, TOPIC, partitions)
    load.fill(src, TOPIC, list(range(partitions)), partitions * per_partition * batches, 64)
    config = _config(src, dst, workdir, partitions * per_partition)
    (flow,) = config.select_flows(("drv",))
    lines = _BatchLines()
    batches_log = logging.getLogger("mirror.spark.batches")
    batches_log.addHandler(lines)
    batches_log.setLevel(logging.DEBUG)
    spark = spark_session("local[2]", "bench-spark-driver", ui_port=None)
    listener, progress = _progress_listener(spark)
    try:
        t0 = time.monotonic()
        job = run_flow(config, flow, until_caught_up=True, metrics_port=_free_port(), spark=spark)
        wall = time.monotonic() - t0
    finally:
        spark.streams.removeListener(listener)
        batches_log.removeHandler(lines)
        spark.stop()
    refresh = _refresh_ms(config, flow)
    spark_ms = {
        key: _summary([float(p[key]) for p in progress if key in p])
        for key in ("latestOffset", "walCommit", "commitOffsets", "queryPlanning", "addBatch", "triggerExecution")
    }
    return {
        "partitions": partitions,
        "records_per_partition_per_batch": per_partition,
        "records": job.records,
        "wall_s": wall,
        "batches": lines.batches,
        "driver_ms": _summary([b["driver_ms"] for b in lines.batches]),
        "tasks_ms": _summary([b["tasks_ms"] for b in lines.batches]),
        "spark_ms": spark_ms,
        "refresh_ms": refresh,
    }


def measure_driver_only(
    src: str, dst: str, workdir: Path, partitions: int, per_partition: int, batches: int
) -> dict[str, Any]:
    """`Batches.on_batch`'s driver work alone, per batch, with the tasks' results made up from
    the source's offsets: the same calls (source ends, Spark's offset log, rows stored, the
    group commit, the metrics) against the real clusters and store, without Spark's tasks."""
    from mirror.domain.topics import match_topics
    from mirror.engine.targets import ensure_targets
    from mirror.kafka import Admin
    from mirror.metrics import RunMetrics
    from mirror.run.recorder import OffsetMapRecorder
    from mirror.spark.batches import Batches
    from mirror.spark.checkpoint import batch_ends
    from mirror.spark.commits import GroupCommits
    from mirror.spark.task import TaskPlan, TaskResult
    from mirror.store import open_store

    load.create_topic(src, TOPIC, partitions)
    load.fill(src, TOPIC, list(range(partitions)), partitions * per_partition * batches, 64)
    config = _config(src, dst, workdir, partitions * per_partition)
    (flow,) = config.select_flows(("drv",))
    source = Admin(flow.source, config.clusters[flow.source])
    target = Admin(flow.target, config.clusters[flow.target])
    mappings = match_topics(config, flow, source.topics())
    ensure_targets(source, target, mappings)
    store = open_store(config.offset_store)
    recorder = OffsetMapRecorder(store, flow.name, registry=None)
    commits = GroupCommits(flow.name, flow.group_id, source, target)
    commits.use(mappings, target.topic_ids([m.target for m in mappings]))
    handler = Batches(
        flow.name,
        source,
        TaskPlan(flow, config.clusters[flow.target]),
        recorder,
        commits,
        metrics=RunMetrics.create().listener,
    )
    # As the run's preflight describes the group first: on a new cluster the group's
    # coordinator answers NOT_COORDINATOR for a moment, and the first commit would fail.
    source.group_members(flow.group_id)
    checkpoint = workdir / "query"
    handler.start_query(mappings, checkpoint)
    (checkpoint / "offsets").mkdir(parents=True)
    driver_ms: list[float] = []
    cpu_ms: list[float] = []  # the driver thread's own CPU: less at the mercy of the machine's load
    for batch in range(batches):
        ends = {(TOPIC, p): (batch + 1) * per_partition for p in range(partitions)}
        # Spark's offset log line for the batch, as the real query writes it before the batch runs.
        doc = {TOPIC: {str(p): o for (_, p), o in ends.items()}}
        (checkpoint / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(doc)}\n')
        results = [
            TaskResult(
                TOPIC,
                p,
                f"drv.{TOPIC}",
                o - per_partition,
                o,
                produced=per_partition,
                bytes=64 * per_partition,
                max_timestamp_ms=int(time.time() * 1000),
                syncs=[(o - per_partition, o - per_partition)],
            )
            for (_, p), o in ends.items()
        ]
        t0, c0 = time.monotonic(), time.thread_time()
        source.end_offsets(list(ends))  # as `on_batch` asks for the query's partitions
        handler.finish(batch, results, batch_ends(checkpoint, batch) or {})
        driver_ms.append((time.monotonic() - t0) * 1000)
        cpu_ms.append((time.thread_time() - c0) * 1000)
    recorder.close()
    store.close()
    return {
        "partitions": partitions,
        "mode": "driver-only",
        "driver_ms_each": driver_ms,
        "driver_ms": _summary(driver_ms[1:] or driver_ms),  # the first batch also opens connections
        "driver_cpu_ms": _summary(cpu_ms[1:] or cpu_ms),
        "refresh_ms": _refresh_ms(config, flow),
    }


def _render(partitions: int, result: dict[str, Any], load_start: tuple[float, ...], out: Path) -> str:
    d = result["driver_ms"]
    lines = [
        f"{partitions} partitions ({result.get('mode', 'spark')}); load average {load_start[0]:.1f} -> "
        f"{result['load_average']['end'][0]:.1f}",
        f"  driver ms per batch: median {d.get('median', 0):.0f}, max {d.get('max', 0):.0f}",
    ]
    if "driver_cpu_ms" in result:
        lines.append(f"  driver thread CPU ms per batch: median {result['driver_cpu_ms']['median']:.0f}")
    if "spark_ms" in result:
        s = result["spark_ms"]
        lines.append(f"  tasks ms per batch: median {result['tasks_ms'].get('median', 0):.0f}")
        lines.append(
            "  Spark's own ms (median): "
            + ", ".join(
                f"{k} {s[k].get('median', 0):.0f}"
                for k in ("latestOffset", "walCommit", "commitOffsets", "queryPlanning", "addBatch")
            )
        )
    lines.append(f"  one topic refresh (every refresh_interval): {result['refresh_ms']:.0f} ms")
    lines.append(f"JSON: {out}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_driver", description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records-per-partition", type=int, default=3, help="per partition per micro-batch")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--src", help="a running source cluster's bootstrap (default: start a pair of clusters)")
    ap.add_argument("--dst", help="a running target cluster's bootstrap")
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--driver-only",
        action="store_true",
        help="time the driver's per-batch calls without Spark (the tasks' results made up): seconds, not minutes",
    )
    args = ap.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="mirror-spark-driver-"))
    dev = None
    load_start = os.getloadavg()
    try:
        if args.src and args.dst:
            src, dst = args.src, args.dst
            # A topic left by an earlier run would hold more than this run's batches.
            load.delete_topics(src, [TOPIC])
            load.delete_topics(dst, [f"drv.{TOPIC}"])
        else:
            from mirror.devenv.kafka import DevClusters

            dev = DevClusters(workdir / "clusters")
            status = dev.up(["src", "dst"], _free_base_port(2)).status
            src, dst = status["clusters"]["src"]["bootstrap"], status["clusters"]["dst"]["bootstrap"]
        how = measure_driver_only if args.driver_only else measure
        result = how(src, dst, workdir, args.partitions, args.records_per_partition, args.batches)
    finally:
        if dev is not None:
            dev.down()
        shutil.rmtree(workdir, ignore_errors=True)
    result["load_average"] = {"start": load_start, "end": os.getloadavg()}
    out = args.out or RESULTS / f"spark-driver-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(_render(args.partitions, result, load_start, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
