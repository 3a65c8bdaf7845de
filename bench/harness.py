"""`python -m bench`: this project vs MirrorMaker 2 vs the raw ceiling, same machine, same load.

1. Start two dev Kafka clusters (`src`, `dst`) on free loopback ports.
2. Preload `src` with N records over P partitions (and, with `--marginal`, a smaller topic).
3. Warm-up, untimed: the JVM contenders' jars read, one copy of the topic (bench.warmup).
4. Throughput: each contender copies the whole topic to a fresh target topic, in rounds
   whose order changes from round to round (a b c, c b a, b c a, …: bench.pairing), so
   neither the slow drift of a shared machine nor a place in the order favours one
   contender. Per run: records/s and MB/s from the first to the last append on the target,
   peak RSS and CPU seconds of the contender's process tree, wall time including start-up,
   and a content check.
5. Latency: `mirror run` and MirrorMaker 2 mirror a steady stamped load at about a third
   of the slower one's measured capacity; p50/p99 of (target append - produce) time.
6. Medians with min and max, ratios paired per round; a table on stdout; JSON under
   bench/results/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import load, mm2, pairing, warmup
from bench.contenders import ROOT, Env, Spec, catalogue, engine_settings, prepare_cassandra, wants_cassandra
from bench.procs import Contender
from bench.report import render, summarise

SOURCE_TOPIC = "bench-load"
SMALL_TOPIC = "bench-load-small"  # the `--marginal` size's topic
# A deleted topic's files go 100 ms after the topic (Kafka's default: 60 s later, in the
# background, during whichever contender then runs); the harness waits for that between runs.
# Not 0: the broker's deletion task would then block one scheduler thread for good. Its first
# round (and the log manager's other periodic tasks') 1 s after start instead of 30 s, so the
# first deletion does not wait for it and those tasks start before the preload, not in a run.
BROKER_CONFIG = {"log.segment.delete.delay.ms": "100", "log.initial.task.delay.ms": "1000"}
BENCH_GROUP = "bench-app"  # mirrored consumer group (checkpoints); see contenders.mirror_config
RESULTS = ROOT / "bench" / "results"


@dataclass
class SourceLoad:
    """One preloaded source topic the contenders copy whole."""

    topic: str
    records: int
    ends: list[int]  # each partition's end offset after the preload


@dataclass
class Params:
    records: int = 1_000_000
    record_size: int = 512
    partitions: int = 12
    reps: int = 3
    latency_reps: int = 3
    latency_duration: float = 20.0
    latency_warmup: float = 5.0  # seconds of steady load before the measured window
    latency_rate: float | None = None
    run_timeout: float = 600.0
    only: Sequence[str] = ()
    skip: Sequence[str] = ()
    quick: bool = False
    # Also copy a topic of this many records in every rep: records per CPU second at the
    # margin (bench.marginal). None: off.
    marginal: int | None = None
    # An untimed copy of the source topic before the first measured run (see `_warm_up`).
    warmup: bool = True
    base: Path | None = None  # the `spark-base` row's tree (--base)

    @classmethod
    def quick_mode(cls) -> Params:
        # mm2-t2 and mm2-eos are left out: the same code path as mm2 (mm2-eos: with transactions),
        # and 30 s of JVM start-up and shutdown each;
        # so are the Spark rows (15-20 s of JVM and session start-up each on 20,000 records),
        # and mirror-eos-fast (mirror-eos with another commit_interval).
        return cls(
            records=20_000,
            record_size=512,
            partitions=4,
            reps=1,
            latency_reps=1,
            latency_duration=4.0,
            latency_warmup=1.0,
            run_timeout=180.0,
            skip=("mm2-t2", "mm2-eos", "mirror-eos-fast", "plain-spark", "spark"),
            quick=True,
            warmup=False,  # a shape check, not a comparison: no seconds spent on fairness
        )


def _log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _free_port(count: int = 1) -> int:
    """A free loopback port, or the first of `count` consecutive free ones (`mirror run
    --workers N --metrics-port P` serves worker i on P + i). Several are looked for below the
    ephemeral range, where outgoing connections and other servers' port-0 binds do not land."""
    import socket

    if count == 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    from mirror.devenv.common import free_ports

    return free_ports(count, 20000, 32000)


def _free_base_port(count: int, *, cassandra: bool = False) -> int:
    """A base port whose cluster ports (base + 100 i, +1) are all free, and with `cassandra` the
    dev Cassandra's (base - 50, -49: DevClusters.up); never the dev defaults."""
    import random

    from mirror.devenv.common import port_free
    from mirror.devenv.kafka import PORT_STEP

    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 32000, 10)  # below the ephemeral range (see tests/support/clusters.py)
        ports = [base + PORT_STEP * i + d for i in range(count) for d in (0, 1)]
        ports += [base - 50, base - 49] if cassandra else []
        if all(port_free(p) for p in ports):
            return base
    raise RuntimeError("no free loopback port range for the benchmark clusters")


def preloaded_env(
    dev: Any, workdir: Path, records: int, partitions: int, record_size: int, *, cassandra: bool = False
) -> Env:
    """Start the `src` and `dst` dev clusters (and with `cassandra` the dev Cassandra) and preload
    the bench topic: the setting of the diagnostic tools (bench.profile, bench.threads)."""
    status = dev.up(["src", "dst"], _free_base_port(2, cassandra=cassandra), cassandra=cassandra).status
    producer, consumer, batch = engine_settings()
    env = Env(
        status["clusters"]["src"]["bootstrap"],
        status["clusters"]["dst"]["bootstrap"],
        workdir / "runs",
        partitions,
        producer,
        consumer,
        batch,
        _free_port,
        cassandra=(status.get("cassandra") or {}).get("contact_point"),
    )
    if cassandra:
        prepare_cassandra(env)
    load.preload(env.src, SOURCE_TOPIC, records, partitions, record_size)
    return env


# ---------------------------------------------------------------------------- one run


def _alias(spec: Spec, phase: str, rep: int) -> str:
    short = {
        "mirror": "m1",
        "mirror-w2": "m2",
        "mm2": "k1",
        "mm2-t2": "k2",
        "mm2-eos": "ke",
        "mm2-eos-i1s": "ki",
        "ceiling": "c",
        "mirror-nostore": "m0",
        "mirror-cassandra": "mc",
        "mirror-eos-fast": "mf",
        "mirror-noprov": "mh",
        "mirror-nogc": "mn",
        "ceiling-idem": "ci",
        "mirror-lowmem": "mb",
        "ceiling-rdk": "cr",
        "spark": "s1",
        "spark-eos": "s4",
        "spark-standalone": "s2",
        "spark-standalone-w2": "s3",
        "plain-spark": "s0",
        "spark-base": "sb",
    }
    return f"{phase}{short.get(spec.key, spec.key)}r{rep}x{uuid.uuid4().hex[:4]}"


def _wait(cont: Contender, done: Callable[[], bool], timeout: float, *, exits: bool) -> str | None:
    """Wait until the contender is done; returns an error text or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rc = cont.poll()
        if rc is not None:
            if exits and rc == 0:
                cont.done_at = cont.ended_at
                return None
            return f"exited with status {rc} before it was done: {_last_line(cont)}\nlog tail:\n{cont.log_tail()}"
        if not exits and done():
            cont.done_at = time.monotonic()
            return None
        time.sleep(0.25)
    return f"not done after {timeout:g}s: {_last_line(cont)}\nlog tail:\n{cont.log_tail()}"


def _last_line(cont: Contender) -> str:
    lines = [ln for ln in cont.log_tail(50).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("Error:") or " ERROR " in ln]
    return (errors or lines or ["(empty log)"])[-1][:300]


def throughput_run(env: Env, spec: Spec, p: Params, rep: int, src: SourceLoad | None = None) -> dict[str, Any]:
    """One contender copies `src` (default: the bench topic) to a fresh target topic, timed."""
    src = src or SourceLoad(SOURCE_TOPIC, p.records, env.source_ends)
    alias = _alias(spec, "t" if src.topic == SOURCE_TOPIC else "u", rep)
    target = f"{alias}.{src.topic}"
    t0 = time.monotonic()
    load.create_target_topic(env.dst, target, p.partitions)
    ends = load.EndOffsets(env.dst, target, p.partitions)
    result: dict[str, Any] = {
        "rep": rep,
        "alias": alias,
        "ok": False,
        "overhead_s": {"setup": round(time.monotonic() - t0, 2)},
    }
    txn = spec.transactional  # commit markers take target offsets
    # A transactional copy's end offsets count its commit markers: a mirror that keeps running
    # is done once its committed progress covers the source (MM2: its offsets topic).
    progress = mm2.Progress(env.dst, alias, src.topic) if txn and spec.kind == "mm2" else None
    done = (lambda: progress.covers(src.ends)) if progress else (lambda: ends.reached(src.ends))
    cont = spec.start(env, alias, src.topic, target)
    try:
        err = _wait(cont, done, p.run_timeout, exits=spec.exits_when_done)
        usage = cont.finish()
        result.update(
            wall_s=round(cont.wall_seconds, 3),
            peak_rss_mb=round(usage.peak_rss_mb, 1),
            peak_rss_per_process_mb=round(usage.peak_rss_per_process_bytes / 1e6, 1),
            peak_rss_pyspark_worker_mb=round(usage.peak_rss_pyspark_worker_bytes / 1e6, 1),
            processes=usage.max_processes,
            cpu_s=round(usage.cpu_seconds, 2),
        )
        if err:
            result["error"] = err
            return result
        t0 = time.monotonic()
        span = load.target_span(env.dst, target, p.partitions, transactional=txn)
        result.update(
            records=span.records,
            seconds=round(span.seconds, 3),
            records_per_s=round(span.records / span.seconds, 1),
            mb_per_s=round(span.records * p.record_size / 1e6 / span.seconds, 2),
            records_per_cpu_s=round(span.records / usage.cpu_seconds, 1) if usage.cpu_seconds else None,
            # Process start to the first record on the target: start-up, discovery, group join.
            first_record_s=round(span.first_append_ms / 1000.0 - cont.started_wall, 2),
            append_time=span.append_time,
        )
        result["verified"] = span.records == src.records and load.same_edges(
            env.src, src.topic, env.dst, target, p.partitions, transactional=txn
        )
        if txn:
            # Offsets past the records: commit markers, the proof the copy was written in
            # transactions (a mirror that fell back to plain writes leaves none).
            result["commit_markers"] = sum(hi - lo for lo, hi in load.watermarks(env.dst, target, p.partitions)) - (
                span.records
            )
        in_txns = not txn or result["commit_markers"] > 0
        result["ok"] = result["verified"] and span.append_time and in_txns
        result["overhead_s"]["verify"] = round(time.monotonic() - t0, 2)
        if not result["ok"]:
            result["error"] = (
                f"target has {span.records} records, expected {src.records}"
                if span.records != src.records
                else "content check failed"
                if not result["verified"]
                else "target records do not carry append times; span unreliable"
                if not span.append_time
                else "no commit markers on the target: the copy was not written in transactions"
            )
        return result
    finally:
        t0 = time.monotonic()
        cont.stop()
        ends.close()
        if progress is not None:
            progress.close()
        load.delete_topics(env.dst, [target])
        if env.dst_data is not None and not load.await_files_deleted(env.dst_data, target):
            _log(f"  (the files of {target} were still on the target broker after 30 s)")
        result["overhead_s"]["cleanup"] = round(time.monotonic() - t0, 2)


def latency_run(env: Env, spec: Spec, p: Params, rep: int, rate: float) -> dict[str, Any]:
    alias = _alias(spec, "l", rep)
    topic = f"lat-{alias}"
    target = f"{alias}.{topic}"
    load.create_topic(env.src, topic, p.partitions)
    load.create_target_topic(env.dst, target, p.partitions)
    ends = load.EndOffsets(env.dst, target, p.partitions)
    result: dict[str, Any] = {"rep": rep, "alias": alias, "rate": round(rate, 1), "ok": False}
    # A copy written in transactions is readable only once committed (and its commit markers
    # take target offsets): it is timed and counted by a read_committed consumer tailing it.
    tail = load.LiveTail(env.dst, target, p.partitions) if spec.transactional else None
    arrived = (lambda: tail.count) if tail is not None else ends.total
    if tail is not None:
        tail.start()
    cont = spec.start(env, alias, topic, target, daemon=True)
    try:
        # Warm-up: one record per partition must come through before the clock starts, so
        # start-up (JVM, group join, topic discovery) is not counted as latency.
        warm = subprocess.run(
            _steady_argv(env, topic, p, rate=p.partitions * 4, duration=0.25), capture_output=True, text=True, cwd=ROOT
        )
        if warm.returncode != 0:
            raise RuntimeError(f"latency warm-up load failed: {warm.stderr[-500:]}")
        warm_n = int(warm.stdout.strip().splitlines()[-1])
        err = _wait(cont, lambda: arrived() >= warm_n, p.run_timeout, exits=False)
        if err:
            result["error"] = "warm-up never arrived: " + err
            return result
        t0_us = time.time_ns() // 1000
        # The load runs warm-up + duration; only the last `duration` seconds count, so a JVM's
        # JIT and heap sizing (or any contender's ramp) are not read as steady-state latency.
        run = subprocess.run(
            _steady_argv(env, topic, p, rate=rate, duration=p.latency_warmup + p.latency_duration),
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if run.returncode != 0:
            raise RuntimeError(f"latency load failed: {run.stderr[-500:]}")
        sent = int(run.stdout.strip().splitlines()[-1])
        err = _wait(cont, lambda: arrived() >= warm_n + sent, 120, exits=False)
        usage = cont.finish()
        result.update(sent=sent, peak_rss_mb=round(usage.peak_rss_mb, 1), cpu_s=round(usage.cpu_seconds, 2))
        if err:
            result["error"] = "load never fully arrived: " + err
            return result
        skip = t0_us + int(p.latency_warmup * 1e6)
        if tail is not None:
            appended = sorted(load.latencies_ms(env.dst, target, p.partitions, skip_before_us=skip))
            if appended:
                result["append_p99_ms"] = round(_pct(appended, 99), 2)  # what the other rows measure
        lat = sorted(
            tail.latencies_ms(skip) if tail is not None else load.latencies_ms(env.dst, target, p.partitions, skip)
        )
        if not lat:
            result["error"] = "no latency samples"
            return result
        result.update(
            samples=len(lat),
            p50_ms=round(_pct(lat, 50), 2),
            p99_ms=round(_pct(lat, 99), 2),
            max_ms=round(lat[-1], 2),
            ok=True,
        )
        return result
    finally:
        cont.stop()
        ends.close()
        if tail is not None:
            tail.close()
        load.delete_topics(env.dst, [target])
        load.delete_topics(env.src, [topic])


def _steady_argv(env: Env, topic: str, p: Params, rate: float, duration: float) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bench.load",
        "steady",
        "--bootstrap",
        env.src,
        "--topic",
        topic,
        "--partitions",
        str(p.partitions),
        "--record-size",
        str(p.record_size),
        "--rate",
        f"{rate:.1f}",
        "--duration",
        f"{duration:g}",
    ]


def _pct(sorted_values: list[float], pct: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    k = (len(sorted_values) - 1) * pct / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


# ---------------------------------------------------------------------------- the whole run


def _machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "load_avg": list(os.getloadavg()),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "kafka": mm2.KAFKA_VERSION,
    }


def _nostore_option() -> dict[str, Any] | None:
    """How to run `mirror run` with the offset store off, if this checkout's engine allows it.

    Either a (hidden) `--no-offset-store` flag of `mirror run`, or a config that accepts
    `offset_store: {kind: none}`; anything else reports the row as pending.
    """
    try:
        flag = subprocess.run(
            [sys.executable, "-m", "mirror", "run", "--no-offset-store", "--help"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if flag.returncode == 0:
        return {"extra_args": ["--no-offset-store"]}
    try:
        from mirror import config as cfg

        cfg.parse(
            "clusters: {a: {bootstrap: '127.0.0.1:1'}, b: {bootstrap: '127.0.0.1:2'}}\n"
            "flows: [{name: f, source: a, target: b, topics: {include: [x]}}]\n"
            "offset_store: {kind: none}\n",
            env={},
        )
    except Exception:  # noqa: BLE001 - a ConfigError: this engine has no store-less mode
        return None
    return {"offset_store": {"kind": "none"}}


def _mirror_available() -> tuple[bool, str]:
    try:
        out = subprocess.run(
            [sys.executable, "-m", "mirror", "run", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if out.returncode != 0:
        return False, "`mirror run` is not available in this checkout yet"
    return True, ""


def run(p: Params, out: Path | None = None, workdir: Path | None = None, keep: bool = False) -> dict[str, Any]:
    from mirror.devenv.kafka import DevClusters

    started = dt.datetime.now(dt.UTC)
    t_start = time.monotonic()
    machine = _machine()
    producer, consumer, batch = engine_settings()
    mirror_ok, mirror_reason = _mirror_available()
    specs = catalogue(mm2.available(), _nostore_option() if mirror_ok else None)
    for s in specs:
        if s.kind == "mirror" and not mirror_ok:
            s.kind, s.reason = "unavailable", f"pending: {mirror_reason}"
        if s.options.get("base") and p.base is None:
            s.kind, s.reason = "unavailable", "needs --base (another tree to run in the same rounds)"
    # Opt-in rows (diagnostics such as mirror-noprov) run only when named in --only.
    chosen = [s for s in specs if (s.key in p.only if (p.only or s.opt_in) else True) and s.key not in p.skip]
    runnable = [s for s in chosen if s.kind != "unavailable"]

    own_tmp = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="mirror-bench-")) if workdir is None else workdir
    workdir.mkdir(parents=True, exist_ok=True)
    dev = DevClusters(workdir / "clusters")
    cassandra = wants_cassandra(runnable)
    base = _free_base_port(2, cassandra=cassandra)
    _log(
        f"starting clusters src, dst on 127.0.0.1:{base} and :{base + 100}"
        + (f", Cassandra on :{base - 50}" if cassandra else "")
        + f" (workdir {workdir})"
    )
    runs: dict[str, list[dict[str, Any]]] = {s.key: [] for s in chosen}
    small_runs: dict[str, list[dict[str, Any]]] = {}  # --marginal: the runs on the smaller topic
    lat_runs: dict[str, list[dict[str, Any]]] = {}
    orders: dict[str, list[list[str]]] = {}  # phase -> each rep's order of runs
    phases: dict[str, float] = {}
    latency_rate = None
    warmup_result: dict[str, Any] | None = None
    try:
        env = _start_clusters(dev, base, runnable, p, workdir, phases)
        loads = _preload(env, p, phases)
        if p.warmup:
            warm = next(s for s in specs if s.key == "ceiling-idem")
            warmup_result = _warm_up(env, runnable, warm, p, loads[0], phases)
        t = time.monotonic()
        _throughput_phase(env, runnable, p, loads, runs, small_runs, orders)
        phases["throughput_s"] = round(time.monotonic() - t, 1)
        latency_rate = _latency_phase(env, runnable, p, runs, lat_runs, phases, orders)
    finally:
        t = time.monotonic()
        dev.down()
        phases["clusters_down_s"] = round(time.monotonic() - t, 1)
        if own_tmp and not keep:
            shutil.rmtree(workdir, ignore_errors=True)

    finished = dt.datetime.now(dt.UTC)
    machine["load_avg_end"] = list(os.getloadavg())
    result = summarise(
        params={
            **p.__dict__,
            "only": list(p.only),
            "skip": list(p.skip),
            "base": str(p.base) if p.base else None,
            "producer": _jsonable(producer),
            "consumer": _jsonable(consumer),
            "consume_batch": batch,
            "latency_rate_used": latency_rate,
            "source_topic": SOURCE_TOPIC,
        },
        machine=machine,
        specs=chosen,
        runs=runs,
        lat_runs=lat_runs,
        marginal_runs=small_runs,
        meta={
            "started_at": started.isoformat(timespec="seconds"),
            "finished_at": finished.isoformat(timespec="seconds"),
            "duration_s": round(time.monotonic() - t_start, 1),
            "phases": phases,
            # Which run came when: each rep's order (bench.pairing), and the untimed warm-up copy.
            "orders": orders,
            "warmup": warmup_result,
        },
    )
    out = out or RESULTS / f"bench-{started.strftime('%Y%m%dT%H%M%SZ')}{'-quick' if p.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(render(result))
    print(f"\nJSON: {out}")
    return result


def _start_clusters(
    dev: Any, base: int, runnable: list[Spec], p: Params, workdir: Path, phases: dict[str, float]
) -> Env:
    """`src` and `dst` (and the standalone Spark cluster a standalone row needs): the run's Env."""
    producer, consumer, batch = engine_settings()
    t = time.monotonic()
    standalone = any(s.kind == "spark" and s.options.get("standalone") for s in runnable)
    workers = max(
        (s.options.get("cores", 1) for s in runnable if s.kind == "spark" and s.options.get("standalone")),
        default=1,
    )
    cassandra = wants_cassandra(runnable)
    status = dev.up(
        ["src", "dst"],
        base,
        cassandra=cassandra,
        spark=standalone,
        spark_workers=workers,
        broker_config=BROKER_CONFIG,
    ).status
    phases["clusters_up_s"] = round(time.monotonic() - t, 1)
    env = Env(
        src=status["clusters"]["src"]["bootstrap"],
        dst=status["clusters"]["dst"]["bootstrap"],
        workdir=workdir / "runs",
        partitions=p.partitions,
        producer=producer,
        consumer=consumer,
        batch=batch,
        free_port=_free_port,
        dst_data=workdir / "clusters" / "dst" / "data",  # where DevClusters keeps `dst`'s log
        base=p.base,
        cassandra=status["cassandra"]["contact_point"] if cassandra else None,
    )
    if cassandra:
        prepare_cassandra(env)
    if standalone:
        from mirror.devenv.spark import SparkDev

        spark_dev = SparkDev(workdir / "clusters", base, workers)  # where dev.up started it
        env.spark_master = status["spark"]["master"]
        env.spark_pids = spark_dev.pids()
        _log(f"spark standalone master {env.spark_master} (pids {env.spark_pids})")
    return env


def _preload(env: Env, p: Params, phases: dict[str, float]) -> list[SourceLoad]:
    """The bench topic (and with `--marginal` the smaller one), each with an application group
    committed halfway, so both mirrors' checkpointers (ours: flow.groups; MM2: its checkpoint
    connector) have a group to translate."""
    sizes = [(SOURCE_TOPIC, p.records)] + ([(SMALL_TOPIC, p.marginal)] if p.marginal else [])
    loads = []
    took = 0.0
    for topic, records in sizes:
        _log(f"preloading {topic}: {records:,} x {p.record_size} B over {p.partitions} partitions")
        took += load.preload(env.src, topic, records, p.partitions, p.record_size)
        ends = [hi for _lo, hi in load.watermarks(env.src, topic, p.partitions)]
        load.commit_group(env.src, BENCH_GROUP, topic, {q: end // 2 for q, end in enumerate(ends)})
        loads.append(SourceLoad(topic, records, ends))
    env.source_ends = loads[0].ends
    phases["preload_s"] = round(took, 1)
    _log(f"preloaded in {phases['preload_s']} s")
    return loads


def _warm_up(
    env: Env, runnable: list[Spec], spec: Spec, p: Params, src: SourceLoad, phases: dict[str, float]
) -> dict[str, Any]:
    """Untimed, before the first measured run: the JVM contenders' jars read (bench.warmup), and
    one copy of the bench topic by `spec` (the ceiling loop with acks=all and idempotence, as
    the mirrors produce), so the first contender does not alone pay for the brokers' cold fetch
    and produce paths (JIT, heap sizing) or a source log not yet in the page cache."""
    t = time.monotonic()
    jar_bytes = warmup.read_files(warmup.jar_files({s.kind for s in runnable}))
    _log(f"warm-up: {jar_bytes / 1e6:,.0f} MB of jars read; an untimed copy by {spec.key}")
    r = throughput_run(env, spec, p, -1, src)
    phases["warmup_s"] = round(time.monotonic() - t, 1)
    _log(f"  -> {_brief(r)}")
    return {"jar_bytes": jar_bytes, "copy": r}


def _throughput_phase(
    env: Env,
    runnable: list[Spec],
    p: Params,
    loads: list[SourceLoad],
    runs: dict[str, list[dict[str, Any]]],
    small_runs: dict[str, list[dict[str, Any]]],
    orders: dict[str, list[list[str]]],
) -> None:
    """Every runnable contender `p.reps` times on each of `loads` (the bench topic first), in an
    order that changes from rep to rep (bench.pairing: each pair swaps places every rep), written
    down in `orders` and in each run (`position`)."""
    slots = [(spec, src) for spec in runnable for src in loads]
    orders["throughput"] = []
    for rep in range(p.reps):
        order = pairing.rep_order(slots, rep)
        orders["throughput"].append([_slot_name(spec, src) for spec, src in order])
        for position, (spec, src) in enumerate(order):
            _log(f"throughput: {_slot_name(spec, src)} run {rep + 1}/{p.reps}")
            r = throughput_run(env, spec, p, rep, src)
            r["position"] = position
            (runs[spec.key] if src is loads[0] else small_runs.setdefault(spec.key, [])).append(r)
            _log(f"  -> {_brief(r)}")


def _slot_name(spec: Spec, src: SourceLoad) -> str:
    return spec.key if src.topic == SOURCE_TOPIC else f"{spec.key}@{src.records}"


def _latency_phase(
    env: Env,
    runnable: list[Spec],
    p: Params,
    runs: dict[str, list[dict[str, Any]]],
    lat_runs: dict[str, list[dict[str, Any]]],
    phases: dict[str, float],
    orders: dict[str, list[list[str]]],
) -> float | None:
    """Latency at one fixed rate below every contender's capacity; returns that rate (None: not measured).
    The order changes from rep to rep as the throughput phase's does.

    The ceiling's latency is the floor this machine allows (a reference, not a target)."""
    lat_specs = [
        s
        for s in runnable
        if s.key in ("mirror", "mirror-eos", "mirror-eos-fast", "mm2", "mm2-eos", "ceiling")
        or (s.opt_in and s.kind != "spark")
    ]
    if not lat_specs or p.latency_reps <= 0:
        return None
    latency_rate = p.latency_rate or _latency_rate(
        runs, [s for s in lat_specs if s.key in ("mirror", "mm2")] or lat_specs
    )
    if not latency_rate:
        return latency_rate
    t = time.monotonic()
    orders["latency"] = []
    for rep in range(p.latency_reps):
        order = pairing.rep_order(lat_specs, rep)
        orders["latency"].append([spec.key for spec in order])
        for position, spec in enumerate(order):
            _log(f"latency: {spec.key} run {rep + 1}/{p.latency_reps} at {latency_rate:,.0f} records/s")
            r = latency_run(env, spec, p, rep, latency_rate)
            r["position"] = position
            lat_runs.setdefault(spec.key, []).append(r)
            _log(f"  -> {_brief(r)}")
    phases["latency_s"] = round(time.monotonic() - t, 1)
    return latency_rate


def _latency_rate(runs: dict[str, list[dict[str, Any]]], lat_specs: list[Spec]) -> float | None:
    """A third of the slower contender's median capacity: both run the same load, well below their limit."""
    caps = []
    for spec in lat_specs:
        ok = [r["records_per_s"] for r in runs.get(spec.key, []) if r.get("ok")]
        if ok:
            caps.append(statistics.median(ok))
    return min(caps) / 3 if caps else None


def _brief(r: dict[str, Any]) -> str:
    if not r.get("ok"):
        return "FAILED: " + str(r.get("error", "?")).splitlines()[0]
    if "p99_ms" in r:
        return f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms over {r['samples']:,} records"
    return (
        f"{r['records_per_s']:,.0f} records/s, {r['mb_per_s']} MB/s, peak RSS {r['peak_rss_mb']} MB, CPU "
        f"{r['cpu_s']} s, wall {r['wall_s']} s"
    )


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if isinstance(v, (str, int, float, bool))}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repetition (the smoke test)")
    ap.add_argument("--records", type=int)
    ap.add_argument("--record-size", type=int)
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--reps", type=int, help="throughput repetitions per contender (median of these)")
    ap.add_argument("--latency-reps", type=int)
    ap.add_argument("--latency-duration", type=float, help="seconds of steady load per latency run")
    ap.add_argument(
        "--latency-warmup", type=float, help="seconds of steady load before the measured window (default 5)"
    )
    ap.add_argument(
        "--latency-rate", type=float, help="records/s of the steady load (default: a third of the slower capacity)"
    )
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated contender keys to run (opt-in diagnostics: mirror-noprov; mirror-cassandra starts a "
        "dev Cassandra for its offset map)",
    )
    ap.add_argument(
        "--skip",
        default="",
        help="comma-separated contender keys to leave out (e.g. mm2,mm2-t2); --quick skips mm2-t2 and the "
        "Spark rows unless this is given",
    )
    ap.add_argument(
        "--marginal",
        type=int,
        metavar="N",
        help="also copy an N-record topic in every rep, and report records per CPU second at the margin: "
        "(records - N) / (CPU s at records - CPU s at N), start-up excluded (e.g. 300000)",
    )
    ap.add_argument(
        "--no-warmup", action="store_true", help="no untimed warm-up copy before the first timed run (--quick: none)"
    )
    ap.add_argument("--out", type=Path, help="JSON result path (default bench/results/bench-<time>.json)")
    ap.add_argument("--workdir", type=Path, help="keep clusters' data and contender logs here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary workdir (logs) after the run")
    ap.add_argument(
        "--base",
        type=Path,
        help="the spark-base row: `mirror spark run` of another tree (its src/ and its built "
        "build/jvm/mirror-spark-writer.jar), in the same rounds as this one's",
    )
    args = ap.parse_args(argv)
    p = Params.quick_mode() if args.quick else Params()
    for name in (
        "records",
        "record_size",
        "partitions",
        "reps",
        "latency_reps",
        "latency_duration",
        "latency_warmup",
        "latency_rate",
    ):
        value = getattr(args, name)
        if value is not None:
            setattr(p, name, value)
    if args.marginal is not None:
        if not 0 < args.marginal < p.records:
            ap.error(f"--marginal: {args.marginal} must be above 0 and below --records ({p.records})")
        p.marginal = args.marginal
    if args.no_warmup:
        p.warmup = False
    p.only = tuple(x for x in args.only.split(",") if x)
    p.base = args.base.resolve() if args.base else None
    if args.skip:
        p.skip = tuple(x for x in args.skip.split(",") if x)
    run(p, out=args.out, workdir=args.workdir, keep=args.keep)
    return 0
