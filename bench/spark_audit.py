"""`python -m bench.spark_audit`: the wall time of `mirror audit` (a Spark batch job) on a mirrored backlog.

Starts a pair of clusters, preloads the source (`--records` x `--record-size` over
`--partitions`, 1,000,000 x 512 B over 12 by default, the throughput phase's load), mirrors
it with `mirror run --until-caught-up` (the fastest engine: the audit compares source and
target whichever engine copied them), then runs `mirror audit --json` (local mode) and
reports its wall time, the records it compared on each side and whether it found them equal.
The load average is printed with the figures; the JSON goes to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.contenders import ROOT, mirror_config
from bench.harness import RESULTS, SOURCE_TOPIC, preloaded_env


def _mirror(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirror", *args], cwd=ROOT, capture_output=True, text=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.spark_audit", description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--record-size", type=int, default=512)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    from mirror.devenv.kafka import DevClusters

    workdir = Path(tempfile.mkdtemp(prefix="mirror-audit-bench-"))
    dev = DevClusters(workdir / "clusters")
    load_start = os.getloadavg()
    try:
        env = preloaded_env(dev, workdir, args.records, args.partitions, args.record_size)
        run_dir = env.workdir / "au"
        run_dir.mkdir(parents=True, exist_ok=True)
        cfg = run_dir / "mirror.yaml"
        cfg.write_text(mirror_config(env, "au", SOURCE_TOPIC, run_dir, {}))
        copied = _mirror("run", "-c", str(cfg), "--until-caught-up")
        if copied.returncode != 0:
            print(f"mirror run failed: {copied.stderr.strip()[-400:]}", file=sys.stderr)
            return 1
        audit_start = os.getloadavg()
        t0 = time.monotonic()
        audited = _mirror("audit", "-c", str(cfg), "--flow", "au", "--json")
        wall = time.monotonic() - t0
    finally:
        dev.down()
        shutil.rmtree(workdir, ignore_errors=True)
    try:
        report = json.loads(audited.stdout)
    except ValueError:
        print(
            f"mirror audit gave no report (exit {audited.returncode}): {audited.stderr.strip()[-400:]}", file=sys.stderr
        )
        return 1
    parts = report.get("partitions", [])
    result = {
        "records": args.records,
        "record_size": args.record_size,
        "partitions": args.partitions,
        "audit_wall_s": wall,
        "exit_code": audited.returncode,
        "source_records": sum(p.get("source_count", 0) for p in parts),
        "target_records": sum(p.get("target_count", 0) for p in parts),
        "equal": all(p.get("equal") for p in parts),
        "load_average": {"start": load_start, "audit_start": audit_start, "end": os.getloadavg()},
    }
    out = args.out or RESULTS / f"spark-audit-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"mirror audit of {args.records:,} x {args.record_size} B over {args.partitions} partitions: "
        f"{wall:.1f} s wall (exit {audited.returncode}; {result['source_records']:,} source and "
        f"{result['target_records']:,} target records compared, equal: {result['equal']}); load average "
        f"{audit_start[0]:.1f} at its start, {result['load_average']['end'][0]:.1f} at its end\nJSON: {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
