"""`python -m bench.threads`: where `mirror run`'s CPU goes, per thread, on the bench load.

Starts a pair of clusters, preloads the source like `python -m bench`, and runs `mirror run
--until-caught-up` (or, with `--ceiling`, the bare copy loop `bench.ceiling` with the same
settings, or with `--ceiling-idem` the same loop with acks=all and idempotence) while
sampling `/proc/<pid>/task/*/stat` every 50 ms: user + system CPU per thread, grouped by
thread name (librdkafka names its threads `rdk:main`, `rdk:broker<N>`, ...; Python threads
show the process name). A sampling profiler sees only Python threads; this also shows what
librdkafka's own threads (fetching, decompressing, compressing, sending) cost.

Prints CPU seconds per thread group and records per CPU-second of the whole process.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import load
from bench.contenders import ROOT, mirror_config
from bench.harness import SOURCE_TOPIC, _free_port, preloaded_env

TICK = os.sysconf("SC_CLK_TCK")


def _threads(pid: int) -> dict[int, tuple[str, float]]:
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            raw = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def sample(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[dict[str, float], float, float]:
    """Run argv; return CPU seconds per thread name (last sample of each thread), the
    process's exact total (wait4) and the wall time."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    last: dict[int, tuple[str, float]] = {}
    while proc.poll() is None:
        try:
            last.update(_threads(proc.pid))
        except OSError:
            pass
        time.sleep(0.05)
    _, status, usage = os.wait4(proc.pid, 0) if proc.returncode is None else (0, 0, None)
    wall = time.monotonic() - t0
    total = (usage.ru_utime + usage.ru_stime) if usage is not None else sum(c for _, c in last.values())
    groups: collections.Counter[str] = collections.Counter()
    for name, cpu in last.values():
        groups[name] += cpu
    if proc.returncode not in (0, None):
        raise SystemExit(
            f"{argv[:4]} failed ({proc.returncode}): {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
        )
    return dict(groups), total, wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.threads", description=__doc__)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--record-size", type=int, default=512)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument(
        "--what",
        default="mirror,ceiling,ceiling-idem",
        help="comma-separated: mirror, mirror-nostore, mirror-cassandra (starts a dev Cassandra), mirror-base, "
        "ceiling, ceiling-idem",
    )
    ap.add_argument(
        "--base",
        help="mirror-base: `mirror run` of another tree's src/ (e.g. a `git archive` of main), in the same rounds",
    )
    args = ap.parse_args(argv)

    from mirror.devenv.kafka import DevClusters

    workdir = Path(tempfile.mkdtemp(prefix="mirror-threads-"))
    dev = DevClusters(workdir / "clusters")
    try:
        cassandra = "mirror-cassandra" in args.what.split(",")
        env = preloaded_env(dev, workdir, args.records, args.partitions, args.record_size, cassandra=cassandra)
        n = 0
        for rep in range(args.reps):
            for what in args.what.split(","):
                n += 1
                alias = f"t{n}"
                target = f"{alias}.{SOURCE_TOPIC}"
                load.create_target_topic(env.dst, target, args.partitions)
                run_dir = env.workdir / alias
                run_dir.mkdir(parents=True, exist_ok=True)
                penv = None
                if what == "mirror-base":
                    if not args.base:
                        raise SystemExit("mirror-base needs --base")
                    penv = {**os.environ, "PYTHONPATH": str(Path(args.base) / "src")}
                if what.startswith("mirror"):
                    options: dict = {"offset_store": {"kind": "none"}} if what == "mirror-nostore" else {}
                    if what == "mirror-noprov":
                        options = {"flow": {"provenance_headers": False}}
                    if what == "mirror-cassandra":
                        options = {"store": "cassandra"}
                    cfg = run_dir / "mirror.yaml"
                    cfg.write_text(mirror_config(env, alias, SOURCE_TOPIC, run_dir, options))
                    cmd = [
                        sys.executable,
                        "-m",
                        "mirror",
                        "run",
                        "-c",
                        str(cfg),
                        "--until-caught-up",
                        "--metrics-port",
                        str(_free_port()),
                    ]
                else:
                    settings = {
                        k: v
                        for k, v in env.producer.items()
                        if k in ("linger.ms", "batch.size", "compression.type", "queue.buffering.max.kbytes")
                    }
                    if what == "ceiling-idem":
                        settings |= {"acks": "all", "enable.idempotence": "true"}
                    cmd = [
                        sys.executable,
                        "-m",
                        "bench.ceiling",
                        "--src",
                        env.src,
                        "--dst",
                        env.dst,
                        "--topic",
                        SOURCE_TOPIC,
                        "--target-topic",
                        target,
                        "--partitions",
                        ",".join(str(p) for p in range(args.partitions)),
                        "--batch",
                        str(env.batch),
                        "-C",
                        "fetch.queue.backoff.ms=20",
                        *[f"-X{k}={v}" for k, v in settings.items()],
                    ]
                groups, total, wall = sample(cmd, ROOT, penv)
                span = load.target_span(env.dst, target, args.partitions)
                la = os.getloadavg()
                print(
                    f"\n{what} rep {rep + 1}: {span.records:,} records, {span.records / span.seconds:,.0f} records/s, "
                    f"CPU {total:.2f} s ({span.records / total:,.0f} records/CPU-s), wall {wall:.1f} s, load "
                    f"{la[0]:.2f}"
                )
                for name, cpu in sorted(groups.items(), key=lambda kv: -kv[1]):
                    if cpu >= 0.01:
                        print(f"  {cpu:6.2f} s  {100 * cpu / total:5.1f}%  {name}")
    finally:
        dev.down()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
