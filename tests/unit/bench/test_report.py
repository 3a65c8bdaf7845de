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


def _spark_run(rep: int, rate: float, cpu: float, position: int) -> dict:
    return {
        **_run(rate),
        "rep": rep,
        "cpu_s": cpu,
        "records_per_cpu_s": 1_000_000 / cpu,
        "first_record_s": 10.0,
        "position": position,
    }


def _spark_result() -> dict:
    specs = [s for s in catalogue(True, None) if s.key in ("mirror", "plain-spark", "spark")]
    # Rep 0 was quiet, rep 1 loaded: within each rep spark is 1.25x plain-spark.
    runs = {
        "mirror": [_spark_run(0, 200_000.0, 5.0, 0), _spark_run(1, 150_000.0, 5.5, 2)],
        "plain-spark": [_spark_run(0, 80_000.0, 30.0, 1), _spark_run(1, 40_000.0, 31.0, 1)],
        "spark": [_spark_run(0, 100_000.0, 31.0, 2), _spark_run(1, 50_000.0, 33.0, 0)],
    }
    small = {
        "mirror": [_spark_run(0, 0, 1.5, 1), _spark_run(1, 0, 2.0, 3)],
        "plain-spark": [_spark_run(0, 0, 23.0, 2), _spark_run(1, 0, 24.0, 2)],
        "spark": [_spark_run(0, 0, 24.0, 4), _spark_run(1, 0, 26.0, 0)],
    }
    return summarise(
        params={**Params(reps=2, latency_reps=0, marginal=300_000).__dict__, "latency_rate_used": None},
        machine={"cpus": 2, "cpu_model": "x", "load_avg": [1.0, 1.0, 1.0]},
        specs=specs,
        runs=runs,
        lat_runs={},
        marginal_runs=small,
        meta={
            "started_at": "t",
            "finished_at": "t",
            "duration_s": 1.0,
            "phases": {},
            "orders": {"throughput": [["mirror", "plain-spark", "spark"], ["spark", "plain-spark", "mirror"]]},
        },
    )


def test_spark_ratios_are_paired_per_rep_and_each_rep_is_kept():
    res = _spark_result()
    assert res["ratios"]["spark/plain-spark"] == 1.25
    assert res["ratios_by_rep"]["spark/plain-spark"] == [1.25, 1.25]
    assert res["ratios_by_rep"]["spark/mirror records per CPU second"] == [round(5.0 / 31.0, 3), round(5.5 / 33.0, 3)]
    text = render(res)
    assert "throughput order per rep: 1: mirror, plain-spark, spark; 2: spark, plain-spark, mirror" in text
    assert "spark/plain-spark = 1.25" in text


def test_records_per_cpu_second_at_the_margin_for_each_contender_and_against_each_other():
    res = _spark_result()
    rows = res["marginal"]["rows"]
    assert res["marginal"]["small_records"] == 300_000
    assert rows["spark"]["records_per_cpu_s_by_rep"] == {"0": 100_000.0, "1": 100_000.0}  # 700k / 7 CPU s
    assert rows["mirror"]["records_per_cpu_s_by_rep"] == {"0": 200_000.0, "1": 200_000.0}  # 700k / 3.5 CPU s
    assert rows["plain-spark"]["records_per_cpu_s"]["median"] == 700_000 / 7
    assert res["ratios"]["spark/mirror marginal records per CPU second"] == 0.5
    assert res["ratios"]["spark/plain-spark marginal records per CPU second"] == 1.0
    assert "records per CPU second at the margin" in render(res)


def test_without_marginal_runs_there_is_no_marginal_section():
    specs = [s for s in catalogue(True, None) if s.key == "mirror"]
    res = summarise(
        params={**Params(reps=1).__dict__, "latency_rate_used": None},
        machine={"cpus": 2, "cpu_model": "x", "load_avg": [1.0, 1.0, 1.0]},
        specs=specs,
        runs={"mirror": [_run(1.0)]},
        lat_runs={},
        meta={"started_at": "t", "finished_at": "t", "duration_s": 1.0, "phases": {}},
    )
    assert res["marginal"] is None
    assert res["ratios"]["spark/mirror marginal records per CPU second"] is None
    assert "at the margin" not in render(res)


def _store_run(rep: int, rate: float, cpu: float) -> dict:
    return {**_run(rate), "rep": rep, "cpu_s": cpu, "records_per_cpu_s": 1_000_000 / cpu, "first_record_s": 1.0}


def test_the_cassandra_offset_map_has_its_own_overhead_line_paired_per_rep():
    nostore = {"offset_store": {"kind": "none"}}
    specs = [s for s in catalogue(True, nostore) if s.key in ("mirror", "mirror-nostore", "mirror-cassandra")]
    # Rep 1 ran on a busier machine; within each rep Cassandra costs 4 % of records/s and 25 % CPU per record.
    runs = {
        "mirror": [_store_run(0, 198_000.0, 4.1), _store_run(1, 99_000.0, 4.2)],
        "mirror-nostore": [_store_run(0, 200_000.0, 4.0), _store_run(1, 100_000.0, 4.0)],
        "mirror-cassandra": [_store_run(0, 192_000.0, 5.0), _store_run(1, 96_000.0, 5.0)],
    }
    res = summarise(
        params={**Params(reps=2, latency_reps=0).__dict__, "latency_rate_used": None},
        machine={"cpus": 2, "cpu_model": "x", "load_avg": [1.0, 1.0, 1.0]},
        specs=specs,
        runs=runs,
        lat_runs={},
        meta={"started_at": "t", "finished_at": "t", "duration_s": 1.0, "phases": {}},
    )
    assert res["ratios_by_rep"]["mirror-cassandra/mirror-nostore"] == [0.96, 0.96]
    cas = res["offset_store_overhead_cassandra"]
    assert cas["overhead_pct"] == 4.0
    assert cas["cpu_per_record_pct"] == 25.0
    assert cas["marginal_cpu_per_record_pct"] is None  # no --marginal runs
    assert res["offset_store_overhead"]["overhead_pct"] == 1.0  # SQLite's line is unchanged
    text = render(res)
    assert (
        "offset store overhead (Cassandra): 4.0% (on 144,000 vs off 150,000 records/s); +25.0% CPU per record" in text
    )


def test_without_the_cassandra_row_there_is_no_cassandra_line():
    res = _spark_result()
    assert res["offset_store_overhead_cassandra"]["available"] is False
    assert "(Cassandra)" not in render(res)
