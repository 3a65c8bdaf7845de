"""`make bench SCALE=1`: one flow over 10,000 partitions, and what the tools around it cost.

The estate: T topics x P partitions on the source (default 1,000 x 10), R records in each
partition (default 5: 50,000 records), and an application group committed on every
partition (for `failover plan --translate`). Measured, each once, in this order:

1. `mirror run --until-caught-up` (one worker), cold: the mirror creates every target topic.
   Start to caught up, peak RSS, CPU seconds, and `targets_ready_s`: when every target
   partition had a leader (the target broker's share; polled every 2 s from outside);
2. `mirror monitor`: the first scrape of /metrics (cold) and the next ones: seconds and bytes,
   and the mean seconds of one gather of the flow (the monitor's own histogram);
3. `mirror lag --json`: wall seconds of the command (and its Python start-up, measured apart);
4. `mirror failover plan --translate --json` for the group on all partitions: wall seconds;
   and one checkpoint tick of the group (a process of its own);
5. a restart: R more records in every partition while the mirror is stopped, then
   `mirror run --until-caught-up` again with the target topics in place (the usual case:
   a worker restarted after a crash or a deploy): the same figures.

Figures only, never asserted (bench/README.md "10,000 partitions"); JSON under bench/results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.contenders import ROOT
from bench.harness import _free_base_port, _free_port, _log, _machine
from bench.procs import Contender

RESULTS = ROOT / "bench" / "results"
FLOW = "scale"
GROUP = "scale-app"


@dataclass
class ScaleParams:
    topics: int = 1000
    partitions: int = 10
    records: int = 5  # per partition
    scrapes: int = 3  # warm scrapes after the first
    # Per broker: 10,000 source partitions under the mirror's load fill a 1 GB old
    # generation until the broker stops answering (bench/README.md, "Figures behind the code").
    heap: str = "2g"
    timeout: float = 900.0
    # The flow's consumer settings docs/scaling.md gives for flows above ~5,000 partitions
    # (librdkafka's cooperative-sticky assignor takes tens of seconds per rebalance there);
    # `--assignor cooperative-sticky --session-timeout-ms 10000` measures the defaults.
    assignor: str = "roundrobin"
    session_timeout_ms: int = 45000
    # docs/scaling.md too: a long poll of 500 ms instead of the default 100 ms halves the
    # source broker's work answering 10,000-partition fetches with nothing new (the figures:
    # bench/README.md, "10,000 partitions").
    fetch_wait_max_ms: int = 500


def _py() -> list[str]:
    return [sys.executable, "-m", "mirror"]


def _timed(argv: Sequence[str], log: Path, timeout: float) -> tuple[float, int, bytes]:
    t = time.monotonic()
    with open(log, "ab") as err:
        # cwd outside the checkout: `python -m` puts the working directory first on sys.path,
        # and the checkout's top-level `failover/` would shadow an older tree's (--before).
        proc = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=err, timeout=timeout, check=False, cwd=log.parent)
    return time.monotonic() - t, proc.returncode, proc.stdout


def _estate(bootstrap: str, p: ScaleParams) -> list[str]:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"scale.t{i:04d}" for i in range(p.topics)]
    for i in range(0, len(names), 100):
        futs = admin.create_topics([NewTopic(n, p.partitions, 1) for n in names[i:i + 100]], operation_timeout=120)
        for f in futs.values():
            f.result(180)
    _produce(bootstrap, names, p, 0)
    # An application group halfway through every partition: failover plans translate it.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(n, q, max(1, p.records // 2)) for n in names for q in range(p.partitions)], asynchronous=False)
    finally:
        c.close()
    return names


def _produce(bootstrap: str, names: Sequence[str], p: ScaleParams, round_: int) -> None:
    """`p.records` more records in every partition (round `round_`: keys and values of its own)."""
    from confluent_kafka import KafkaException, Producer

    prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "enable.idempotence": True, "queue.buffering.max.messages": 200000})
    # Every delivery is checked: a partition whose leader is not known yet to a brand-new
    # producer fails its records (flush() still returns 0), which would leave partitions of
    # the estate empty without a word.
    failed: list[tuple[str, int, bytes, bytes]] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append((msg.topic(), msg.partition(), msg.key(), msg.value()))

    # New topics reach a producer's metadata a moment after they are created.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        known = {t: len(m.partitions) for t, m in prod.list_topics(timeout=30).topics.items() if m.error is None}
        if all(known.get(n) == p.partitions for n in names):
            break
        time.sleep(1)
    todo = [(n, q, b"%d" % r, b"v%d.%d" % (round_, r)) for n in names for q in range(p.partitions) for r in range(p.records)]
    for _attempt in range(5):
        for n, q, key, value in todo:
            try:
                prod.produce(n, key=key, value=value, partition=q, on_delivery=delivered)
            except KafkaException:  # refused at once (topic not known yet, queue full): again next round
                failed.append((n, q, key, value))
            prod.poll(0)
        assert prod.flush(300) == 0, "preload did not finish"
        todo, failed = failed, []  # exactly the records that failed, again
        if not todo:
            break
        time.sleep(2)
    assert not todo, f"preload failed for {len(todo)} records"


def _config(path: Path, src: str, dst: str, workdir: Path, flow: str, rename: str, p: ScaleParams) -> Path:
    path.write_text(f"""\
clusters:
  src: {{bootstrap: "{src}", timeout: 60s}}
  dst: {{bootstrap: "{dst}", timeout: 60s}}
flows:
  - name: {flow}
    source: src
    target: dst
    rename: {rename}
    topics: {{include: ["scale\\\\..*"]}}
    groups: ["{GROUP}"]
    consumer: {{partition.assignment.strategy: {p.assignor}, session.timeout.ms: {p.session_timeout_ms}, heartbeat.interval.ms: {min(3000, p.session_timeout_ms // 3)}, fetch.wait.max.ms: {p.fetch_wait_max_ms}}}
offset_store: {{kind: sqlite, path: "{workdir}/offsets-{flow}.db"}}
metrics: {{host: 127.0.0.1}}
""")
    return path


_TICK = """
import sys, time
from mirror.config import load
from mirror.run.checkpointer import GroupCheckpointer
from mirror.store import open_store
cfg = load(sys.argv[1]); store = open_store(cfg.offset_store)
t = time.monotonic(); r = GroupCheckpointer(cfg, cfg.flows[0], store).tick()
print(round(time.monotonic() - t, 2), len(r.checkpoints))
"""


def port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _scrape(port: int, timeout: float) -> tuple[float, int]:
    t = time.monotonic()
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout).read()
    return time.monotonic() - t, len(body)


def _gather_seconds(port: int, timeout: float) -> float | None:
    """Mean seconds of the monitor's gathers so far (its own histogram): what a scrape cost
    when it gathered, and what each background gather costs now."""
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout).read().decode()
    found = {}
    for line in body.splitlines():
        if line.startswith(("mirror_monitor_gather_seconds_sum{", "mirror_monitor_gather_seconds_count{")):
            name, value = line.split("{", 1)[0], float(line.rsplit(" ", 1)[1])
            found[name] = found.get(name, 0.0) + value
    count = found.get("mirror_monitor_gather_seconds_count", 0.0)
    return round(found["mirror_monitor_gather_seconds_sum"] / count, 2) if count else None


def run(p: ScaleParams, out: Path | None = None, workdir: Path | None = None, keep: bool = False, before_python: str | None = None) -> dict[str, Any]:
    from mirror.config import load as load_config
    from mirror.devenv.kafka import DevClusters
    from mirror.kafka import Admin

    started = dt.datetime.now(dt.UTC)
    machine = _machine()
    own_tmp = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="mirror-scale-")) if workdir is None else workdir
    workdir.mkdir(parents=True, exist_ok=True)
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    dev = DevClusters(workdir / "clusters")
    base = _free_base_port(2)
    res: dict[str, Any] = {"params": asdict(p), "partitions_total": p.topics * p.partitions, "records_total": p.topics * p.partitions * p.records}
    try:
        t = time.monotonic()
        status = dev.up(["src", "dst"], base, heap=p.heap).status
        src, dst = status["clusters"]["src"]["bootstrap"], status["clusters"]["dst"]["bootstrap"]
        res["clusters_up_s"] = round(time.monotonic() - t, 1)
        _log(f"clusters up in {res['clusters_up_s']} s; building {p.topics} x {p.partitions} partitions, {p.records} records each")
        t = time.monotonic()
        names = _estate(src, p)
        rounds = 1
        res["estate_s"] = round(time.monotonic() - t, 1)
        # Each variant mirrors the estate into its own target topics (identity names for the
        # "before" code, prefixed for this tree) with its own group and offset store.
        variants = [("before", before_python, f"{FLOW}-before", "identity"), ("after", sys.executable, FLOW, "prefix")]
        for label, python, flow, rename in variants:
            if python is None:
                continue
            cfg = _config(workdir / f"{flow}.yaml", src, dst, workdir, flow, rename, p)
            res[label] = _measure(label, [python, "-m", "mirror"], cfg, flow, "src." if rename == "prefix" else "", p, logs, load_config, Admin, src, dst, names, rounds)
            rounds += 1
    finally:
        dev.down()
        if own_tmp and not keep:
            shutil.rmtree(workdir, ignore_errors=True)

    machine["load_avg_end"] = list(os.getloadavg())
    result = {"kind": "scale", "started_at": started.isoformat(timespec="seconds"), "machine": machine, **res}
    out = out or RESULTS / f"scale-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"\nJSON: {out}")
    return result


class _ReadyWatch(threading.Thread):
    """Seconds from start until every target partition has a leader: the target cluster's
    share of a cold start (the mirror creates the topics; the broker then creates their
    logs, which at 10,000 partitions on one broker takes minutes here). Polled every 2 s."""

    def __init__(self, bootstrap: str, names: set[str], partitions: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.names, self.want = bootstrap, names, len(names) * partitions
        self.started = time.monotonic()
        self.ready_s: float | None = None
        self.done = threading.Event()

    def run(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while not self.done.wait(2.0):
            try:
                md = admin.list_topics(timeout=30)
            except Exception:  # noqa: BLE001 - a busy broker: ask again
                continue
            ready = sum(1 for n, t in md.topics.items() if n in self.names and t.error is None for q in t.partitions.values() if q.leader >= 0)
            if ready >= self.want:
                self.ready_s = round(time.monotonic() - self.started, 1)
                return


def _run_once(label: str, py: list[str], cfg: Path, prefix: str, p: ScaleParams, logs: Path, target: Any, rounds: int, dst: str | None) -> dict[str, Any]:
    """`mirror run --until-caught-up` (one worker): wall, peak RSS, CPU, records on the target."""
    run_proc = Contender([*py, "-v", "run", "-c", str(cfg), "--until-caught-up"], logs / f"{label}-run.log", cwd=logs).start()
    watch = _ReadyWatch(dst, {f"{prefix}scale.t{i:04d}" for i in range(p.topics)}, p.partitions) if dst else None
    if watch is not None:
        watch.start()
    deadline = time.monotonic() + p.timeout
    while run_proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    rc = run_proc.poll()
    wall = run_proc.wall_seconds
    usage = run_proc.finish()
    parts = [(f"{prefix}scale.t{i:04d}", q) for i in range(p.topics) for q in range(p.partitions)]
    mirrored = sum(target.end_offsets(parts).values()) if hasattr(target, "end_offsets") else sum(w.high for w in target.watermarks(parts).values())
    total = p.topics * p.partitions * p.records * rounds
    out = {"exit": rc, "start_to_caught_up_s": round(wall, 1), "peak_rss_mb": round(usage.peak_rss_per_process_bytes / 1e6, 1),
           "cpu_s": round(usage.cpu_seconds, 1), "records_on_target": mirrored, "ok": rc == 0 and mirrored == total}
    if watch is not None:
        watch.done.set()
        watch.join(35)
        # The run may end before the watch's next look; then the targets were ready by its end.
        out["targets_ready_s"] = watch.ready_s if watch.ready_s is not None else (out["start_to_caught_up_s"] if out["ok"] else None)
    return out


def _measure(label: str, py: list[str], cfg: Path, flow: str, prefix: str, p: ScaleParams, logs: Path, load_config: Any, admin_cls: Any,
             src: str, dst: str, names: Sequence[str], rounds: int) -> dict[str, Any]:
    """The figures of one tree; `rounds`: rounds of records in the source so far (this adds one)."""
    out: dict[str, Any] = {"python": py[0]}
    config = load_config(cfg)
    target = admin_cls("dst", config.cluster("dst"))
    # 1. start to caught up, one worker, the target topics created by the mirror (cold)
    _log(f"{label}: mirror run --until-caught-up (cold: creates the target topics)")
    out["run"] = _run_once(label, py, cfg, prefix, p, logs, target, rounds, dst)
    _log(f"  -> {out['run']}")

    # 2. the exporter: cold scrape, then warm ones
    port = _free_port()
    _log(f"{label}: mirror monitor scrapes")
    mon = Contender([*py, "monitor", "-c", str(cfg), "--port", str(port), "--scrape-timeout", "120"], logs / f"{label}-monitor.log", cwd=logs).start()
    try:
        deadline = time.monotonic() + 60
        while not port_open(port):  # listening; no request yet: the first scrape is the cold one
            if time.monotonic() > deadline or mon.poll() is not None:
                raise RuntimeError("mirror monitor did not start:\n" + mon.log_tail())
            time.sleep(0.2)
        first = _scrape(port, 180)
        warm = [_scrape(port, 180) for _ in range(p.scrapes)]
        gather = _gather_seconds(port, 180)
    finally:
        mon_usage = mon.finish()
    out["monitor"] = {"first_scrape_s": round(first[0], 2), "scrape_s": [round(x, 2) for x, _ in warm], "bytes": warm[-1][1] if warm else first[1],
                      "gather_s": gather, "peak_rss_mb": round(mon_usage.peak_rss_per_process_bytes / 1e6, 1)}
    _log(f"  -> {out['monitor']}")

    # 3. and 4. the one-shot commands (their Python start-up measured apart), and one
    # checkpoint tick of the group on every partition, in a process of its own
    startup, _, _ = _timed([*py, "--version"], logs / f"{label}-cli.log", 60)
    lag_s, lag_rc, lag_out = _timed([*py, "lag", "-c", str(cfg), "--json"], logs / f"{label}-lag.log", 300)
    plan_s, plan_rc, plan_out = _timed([*py, "failover", "plan", "-c", str(cfg), "--flow", flow, "--group", GROUP, "--translate", "--json"], logs / f"{label}-plan.log", 300)
    plan_parts = len(json.loads(plan_out).get("partitions", [])) if plan_rc == 0 else None
    _, tick_rc, tick_out = _timed([py[0], "-c", _TICK, str(cfg)], logs / f"{label}-tick.log", 300)
    tick = tick_out.decode().split() if tick_rc == 0 else [None, None]
    out["cli"] = {"python_startup_s": round(startup, 2), "lag_json_s": round(lag_s, 2), "lag_exit": lag_rc, "lag_bytes": len(lag_out),
                  "failover_plan_translate_s": round(plan_s, 2), "failover_plan_exit": plan_rc, "failover_plan_partitions": plan_parts,
                  "checkpoint_tick_s": float(tick[0]) if tick[0] else None, "checkpoints": int(tick[1]) if tick[1] else None}
    _log(f"  -> {out['cli']}")

    # 5. a restart: the mirror stopped, p.records more records arrived in every partition
    # (as many as the cold run mirrored), the target topics exist: the 3 a.m. case.
    _log(f"{label}: {p.topics * p.partitions * p.records} more records while stopped, then mirror run --until-caught-up (restart)")
    _produce(src, names, p, rounds)
    out["restart"] = _run_once(f"{label}-restart", py, cfg, prefix, p, logs, target, rounds + 1, None)
    _log(f"  -> {out['restart']}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench --scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--topics", type=int)
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--records", type=int, help="records per partition")
    ap.add_argument("--assignor", help="the flow's partition.assignment.strategy (default roundrobin)")
    ap.add_argument("--session-timeout-ms", type=int, help="the flow's consumer session.timeout.ms (default 45000)")
    ap.add_argument("--fetch-wait-max-ms", type=int, help="the flow's consumer fetch.wait.max.ms (default 500)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--before", metavar="PYTHON", help="also measure the mirror installed for this interpreter (an older tree), on the same estate, first")
    args = ap.parse_args(argv)
    p = ScaleParams()
    for name in ("topics", "partitions", "records", "assignor", "session_timeout_ms", "fetch_wait_max_ms"):
        if getattr(args, name) is not None:
            setattr(p, name, getattr(args, name))
    run(p, out=args.out, workdir=args.workdir, keep=args.keep, before_python=args.before)
    return 0
