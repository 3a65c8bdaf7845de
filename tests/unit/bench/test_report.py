"""bench/report.py: the exactly-once rows' ratios in the table footer."""

from __future__ import annotations

from bench.contenders import catalogue
from bench.harness import Params
from bench.report import render, summarise


def _run(rate: float) -> dict:
    return {"ok": True, "records_per_s": rate, "mb_per_s": 1.0, "peak_rss_mb": 100.0, "cpu_s": 1.0, "wall_s": 1.0}


def _lat(p99: float) -> dict:
    return {"ok": True, "rate": 10.0, "p50_ms": p99 / 2, "p99_ms": p99, "max_ms": p99}


def test_mirror_eos_is_compared_with_mm2_eos_and_mm2_eos_with_mm2():
    specs = [s for s in catalogue(True, None) if s.key in ("mirror-eos", "mm2", "mm2-eos")]
    res = summarise(
        params={**Params(reps=1, latency_reps=1).__dict__, "latency_rate_used": 10.0},
        machine={"cpus": 2, "cpu_model": "x", "load_avg": [1.0, 1.0, 1.0]},
        specs=specs,
        runs={"mirror-eos": [_run(30_000.0)], "mm2": [_run(20_000.0)], "mm2-eos": [_run(10_000.0)]},
        lat_runs={"mirror-eos": [_lat(1200.0)], "mm2-eos": [_lat(600.0)]},
        meta={"started_at": "t", "finished_at": "t", "duration_s": 1.0, "phases": {}},
    )
    assert res["ratios"]["mirror-eos/mm2-eos"] == 3.0
    assert res["ratios"]["mm2-eos/mm2"] == 0.5
    assert res["ratios"]["mirror-eos/mm2-eos p99 latency"] == 2.0
    assert "mirror-eos/mm2-eos = 3.0" in render(res)
