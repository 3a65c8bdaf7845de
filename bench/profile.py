"""`python -m bench.profile`: where `mirror run` spends its time on the catch-up path.

Starts a pair of clusters, preloads the source, and runs one `mirror run --until-caught-up`
under py-spy (a sampling profiler: no code change, little overhead, sees native frames
with --native). Writes a flame graph (SVG) and the collapsed stacks under bench/results/,
and prints the functions with the most samples, by self time and by total time.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import load
from bench.contenders import ROOT, mirror_config
from bench.harness import RESULTS, SOURCE_TOPIC, _free_port, preloaded_env


def _top(collapsed: Path, n: int = 25) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int]:
    self_counts: collections.Counter[str] = collections.Counter()
    total_counts: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        c = int(count)
        samples += c
        frames = stack.split(";")
        self_counts[frames[-1]] += c
        for f in set(frames):
            total_counts[f] += c
    return self_counts.most_common(n), total_counts.most_common(n), samples


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--record-size", type=int, default=512)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument("--native", action="store_true", help="include native (librdkafka, C extension) frames")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--prelude", default="", help='Python run before mirror starts, e.g. "gc.disable()" (to try a fix)')
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)

    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("py-spy not found: run `make bench-setup` (installs the bench extra)", file=sys.stderr)
        return 2

    from mirror.devenv.kafka import DevClusters

    workdir = Path(tempfile.mkdtemp(prefix="mirror-profile-"))
    dev = DevClusters(workdir / "clusters")
    raw = RESULTS / f"profile-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.collapsed"
    RESULTS.mkdir(parents=True, exist_ok=True)
    try:
        env = preloaded_env(dev, workdir, args.records, args.partitions, args.record_size)
        alias = "prof"
        target = f"{alias}.{SOURCE_TOPIC}"
        load.create_target_topic(env.dst, target, args.partitions)
        run_dir = env.workdir / alias
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg = run_dir / "mirror.yaml"
        cfg.write_text(mirror_config(env, alias, SOURCE_TOPIC, run_dir, {}))
        argv = [
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
        if args.workers > 1:
            argv += ["--workers", str(args.workers)]
        if args.prelude:
            # The same CLI with a Python prelude run first (e.g. "gc.disable()"), to test a fix.
            argv = [
                sys.executable,
                "-c",
                f"import gc, runpy, sys; {args.prelude}; sys.argv = ['mirror'] + sys.argv[1:]; "
                "runpy.run_module('mirror', run_name='__main__', alter_sys=True)",
                *argv[3:],
            ]
        t0 = time.monotonic()
        subprocess.run(
            [
                py_spy,
                "record",
                "--rate",
                str(args.rate),
                "--format",
                "raw",
                "-o",
                str(raw),
                *(["--native"] if args.native else []),
                "--subprocesses",
                "--",
                *argv,
            ],
            cwd=ROOT,
            check=True,
        )
        took = time.monotonic() - t0
        span = load.target_span(env.dst, target, args.partitions)
        print(
            f"mirror run under py-spy: {span.records:,} records, {span.records / span.seconds:,.0f} records/s "
            f"(first to last append), {took:.1f} s wall including start-up"
        )
        top_self, top_total, samples = _top(raw)
        print(f"\n{samples} samples; top by self time:")
        for name, c in top_self:
            print(f"  {100.0 * c / samples:5.1f}%  {name}")
        print("\ntop by total time (inclusive):")
        for name, c in top_total:
            print(f"  {100.0 * c / samples:5.1f}%  {name}")
        print(f"\ncollapsed stacks: {raw}  (render with flamegraph.pl, or load into speedscope.app)")
    finally:
        dev.down()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
