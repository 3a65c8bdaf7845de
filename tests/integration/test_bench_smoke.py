"""`python -m bench --quick` runs end to end and writes a complete result (not a speed test).

The harness starts its own pair of clusters (on free ports, like the session fixture), so
this test does not use the `clusters` fixture. It checks shape and completeness: every
contender row has its figures, every run copied every record intact, and the rows that
cannot run say why. Speed is never asserted (docs/design.md: measured by bench/, not by tests).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.contenders import catalogue
from bench.report import LATENCY_FIELDS, THROUGHPUT_FIELDS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_quick_bench_writes_a_complete_result(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        # Smaller than --quick's own sizes: this checks the harness's shape, not the speed.
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--records",
            "5000",
            "--latency-duration",
            "2",
            "--latency-warmup",
            "0.5",
            "--out",
            str(out),
            "--workdir",
            str(tmp_path / "work"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(out.read_text())

    assert res["schema"] == "mirror-bench/1"
    assert res["params"]["quick"] is True
    rows = {r["key"]: r for r in res["throughput"]}
    assert {"mirror", "mirror-w2", "mm2", "ceiling", "mirror-nostore"} <= rows.keys()
    # The Spark rows run in the default bench (the standalone one when named); --quick leaves
    # them out: JVM start-up would double this quick run.
    spark_rows = {s.key: s for s in catalogue(True, None) if s.kind == "spark"}
    assert set(spark_rows) == {
        "plain-spark",
        "spark",
        "spark-base",
        "spark-eos",
        "spark-standalone",
        "spark-standalone-w2",
    }
    assert sorted(k for k, s in spark_rows.items() if s.opt_in) == [
        "spark-base",
        "spark-eos",
        "spark-standalone",
        "spark-standalone-w2",
    ]
    assert not set(spark_rows) & rows.keys()
    # So is mm2-eos (a default row): the mm2 code path with transactions, and another ~30 s
    # of JVM start-up and shutdown (tests/unit/bench/test_mm2.py covers its settings).
    assert not {"mm2-eos", "mm2-eos-i1s", "mirror-eos-fast"} & rows.keys()

    for key in ("mirror", "mirror-w2", "mm2", "ceiling"):
        row = rows[key]
        assert row["available"], f"{key}: {row.get('reason')}"
        assert row["ok_runs"] == res["params"]["reps"], f"{key}: {row.get('errors')}"
        for run in row["runs"]:
            assert run["verified"] and run["records"] == res["params"]["records"], (key, run)
        for field in THROUGHPUT_FIELDS:
            stat = row[field]
            assert stat is not None and stat["min"] <= stat["median"] <= stat["max"], (key, field, stat)
    nostore = rows["mirror-nostore"]
    assert nostore.get("reason") or nostore["ok_runs"] == res["params"]["reps"]

    lat = {r["key"]: r for r in res["latency"]}
    assert set(lat) == {"mirror", "mirror-eos", "mm2", "ceiling"}
    for key, row in lat.items():
        assert row["ok_runs"] == res["params"]["latency_reps"], (key, row["runs"])
        for field in LATENCY_FIELDS:
            assert row[field] is not None and row[field]["median"] >= 0, (key, field)

    for name in (
        "mirror/mm2",
        "mirror/ceiling",
        "mirror/mm2 p99 latency",
        "mirror-eos/mirror",
        "mirror-eos - mirror p99 latency (ms)",
    ):
        assert res["ratios"][name] is not None, name
    assert [t["target"] for t in res["targets"]]
    assert res["complete"] is True
    # The table went to stdout with every row.
    for row in res["throughput"]:
        assert row["label"] in proc.stdout
