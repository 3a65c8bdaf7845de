"""Runs -> medians, ratios and the issue's targets; the JSON document and the stdout table."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

SCHEMA = "mirror-bench/1"

# Fields every available throughput row carries as {median, min, max} (the smoke test checks them).
THROUGHPUT_FIELDS = (
    "records_per_s",
    "mb_per_s",
    "peak_rss_mb",
    "peak_rss_per_process_mb",
    "cpu_s",
    "records_per_cpu_s",
    "wall_s",
    "first_record_s",
)
LATENCY_FIELDS = ("p50_ms", "p99_ms", "max_ms")


def _stats(values: Sequence[float | None]) -> dict[str, float] | None:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {
        "median": round(statistics.median(vals), 2),
        "min": round(min(vals), 2),
        "max": round(max(vals), 2),
        "n": len(vals),
    }


def _median(row: dict[str, Any] | None, field: str) -> float | None:
    if not row or not row.get(field):
        return None
    return row[field]["median"]


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _difference(a: float | None, b: float | None) -> float | None:
    return round(a - b, 1) if a is not None and b is not None else None


def summarise(
    *,
    params: dict[str, Any],
    machine: dict[str, Any],
    specs: Sequence[Any],
    runs: dict[str, list[dict[str, Any]]],
    lat_runs: dict[str, list[dict[str, Any]]],
    meta: dict[str, Any],
) -> dict[str, Any]:
    rows = []
    for spec in specs:
        row: dict[str, Any] = {"key": spec.key, "label": spec.label, "available": spec.kind != "unavailable"}
        if not row["available"]:
            row["reason"] = spec.reason
            rows.append(row)
            continue
        rs = runs.get(spec.key, [])
        ok = [r for r in rs if r.get("ok")]
        row["runs"] = rs
        row["ok_runs"] = len(ok)
        for f in THROUGHPUT_FIELDS:
            row[f] = _stats([r.get(f) for r in ok])
        if spec.kind == "spark":
            row["peak_rss_pyspark_worker_mb"] = _stats([r.get("peak_rss_pyspark_worker_mb") for r in ok])
        errors = [r["error"] for r in rs if r.get("error")]
        if errors:
            row["errors"] = errors
        rows.append(row)
    by_key = {r["key"]: r for r in rows}

    latency = []
    for key, rs in lat_runs.items():
        ok = [r for r in rs if r.get("ok")]
        row = {
            "key": key,
            "label": by_key[key]["label"],
            "rate": rs[0]["rate"] if rs else None,
            "runs": rs,
            "ok_runs": len(ok),
        }
        for f in LATENCY_FIELDS:
            row[f] = _stats([r.get(f) for r in ok])
        latency.append(row)
    lat_by_key = {r["key"]: r for r in latency}

    def tput(key: str) -> float | None:
        return _median(by_key.get(key), "records_per_s")

    ratios = {
        "mirror/mm2": _ratio(tput("mirror"), tput("mm2")),
        "mirror/ceiling": _ratio(tput("mirror"), tput("ceiling")),
        "mirror-eos/mirror": _ratio(tput("mirror-eos"), tput("mirror")),
        "mirror-eos - mirror p99 latency (ms)": _difference(
            _median(lat_by_key.get("mirror-eos"), "p99_ms"), _median(lat_by_key.get("mirror"), "p99_ms")
        ),
        # Exactly-once against exactly-once: MirrorMaker 2 with exactly-once source support.
        "mirror-eos/mm2-eos": _ratio(tput("mirror-eos"), tput("mm2-eos")),
        "mm2-eos/mm2": _ratio(tput("mm2-eos"), tput("mm2")),
        "mirror-eos/mm2-eos p99 latency": _ratio(
            _median(lat_by_key.get("mirror-eos"), "p99_ms"), _median(lat_by_key.get("mm2-eos"), "p99_ms")
        ),
        "mirror-w2/mm2-t2": _ratio(tput("mirror-w2"), tput("mm2-t2")),
        "mirror-w2/mirror": _ratio(tput("mirror-w2"), tput("mirror")),
        "mirror-w2/ceiling": _ratio(tput("mirror-w2"), tput("ceiling")),
        "mirror/mm2 records per CPU second": _ratio(
            _median(by_key.get("mirror"), "records_per_cpu_s"), _median(by_key.get("mm2"), "records_per_cpu_s")
        ),
        "mirror/mm2 peak RSS": _ratio(
            _median(by_key.get("mirror"), "peak_rss_mb"), _median(by_key.get("mm2"), "peak_rss_mb")
        ),
        "mirror/mm2 p99 latency": _ratio(
            _median(lat_by_key.get("mirror"), "p99_ms"), _median(lat_by_key.get("mm2"), "p99_ms")
        ),
        "mirror/mm2 p50 latency": _ratio(
            _median(lat_by_key.get("mirror"), "p50_ms"), _median(lat_by_key.get("mm2"), "p50_ms")
        ),
        # The Spark engine against the job a PySpark user would write, and against `mirror run`.
        "spark/plain-spark": _ratio(tput("spark"), tput("plain-spark")),
        "spark/plain-spark wall": _ratio(
            _median(by_key.get("spark"), "wall_s"), _median(by_key.get("plain-spark"), "wall_s")
        ),
        "spark/plain-spark first record": _ratio(
            _median(by_key.get("spark"), "first_record_s"), _median(by_key.get("plain-spark"), "first_record_s")
        ),
        "spark/mirror records per CPU second": _ratio(
            _median(by_key.get("spark"), "records_per_cpu_s"), _median(by_key.get("mirror"), "records_per_cpu_s")
        ),
    }

    nostore = by_key.get("mirror-nostore")
    if nostore and nostore["available"] and tput("mirror-nostore") and tput("mirror"):
        on, off = tput("mirror"), tput("mirror-nostore")
        overhead = {
            "available": True,
            "with_store_records_per_s": on,
            "without_store_records_per_s": off,
            "overhead_pct": round(100.0 * (1 - on / off), 1),
        }
    else:
        overhead = {"available": False, "reason": (nostore or {}).get("reason") or "not measured in this run"}

    per_worker_rss = [_median(by_key.get(k), "peak_rss_per_process_mb") for k in ("mirror", "mirror-w2")]
    targets = [
        _target("one worker >= 2x MirrorMaker 2 throughput", ratios["mirror/mm2"], lambda v: v >= 2.0),
        _target("one worker >= 70% of the raw ceiling", ratios["mirror/ceiling"], lambda v: v >= 0.7),
        _target("exactly_once >= 0.8x at-least-once throughput", ratios["mirror-eos/mirror"], lambda v: v >= 0.8),
        _target(
            "exactly_once p99 latency at most one commit interval (1 s) above at-least-once (ms)",
            ratios["mirror-eos - mirror p99 latency (ms)"],
            lambda v: v <= 1000.0,
        ),
        _target(
            "p99 latency no worse than MirrorMaker 2 (ratio <= 1)", ratios["mirror/mm2 p99 latency"], lambda v: v <= 1.0
        ),
        _target("offset map costs <= 5% of throughput (overhead %)", overhead.get("overhead_pct"), lambda v: v <= 5.0),
        _target(
            "peak RSS <= 200 MB per worker process (MB)",
            max((v for v in per_worker_rss if v is not None), default=None),
            lambda v: v <= 200.0,
        ),
        _target(
            "mirror spark run >= 1.2x the plain PySpark job's records/s",
            ratios["spark/plain-spark"],
            lambda v: v >= 1.2,
        ),
        _target(
            "mirror spark run's wall time no longer than the plain job's (ratio <= 1)",
            ratios["spark/plain-spark wall"],
            lambda v: v <= 1.0,
        ),
        _target(
            "mirror spark run's first record no later than the plain job's (ratio <= 1)",
            ratios["spark/plain-spark first record"],
            lambda v: v <= 1.0,
        ),
        _target(
            "Spark engine >= 0.5x mirror run's records per CPU second",
            ratios["spark/mirror records per CPU second"],
            lambda v: v >= 0.5,
        ),
        _target(
            "mirror spark run's Python workers <= 200 MB RSS each (MB)",
            _median(by_key.get("spark"), "peak_rss_pyspark_worker_mb"),
            lambda v: v <= 200.0,
        ),
    ]

    complete = all(
        (not r["available"] and r.get("reason"))
        or (r["available"] and r["ok_runs"] > 0 and all(r[f] is not None for f in THROUGHPUT_FIELDS))
        for r in rows
    ) and all(r["ok_runs"] > 0 and all(r[f] is not None for f in LATENCY_FIELDS) for r in latency)

    return {
        "schema": SCHEMA,
        **meta,
        "complete": complete,
        "machine": machine,
        "params": params,
        "throughput": rows,
        "latency": latency,
        "offset_store_overhead": overhead,
        "ratios": ratios,
        "targets": targets,
    }


def _target(name: str, value: float | None, ok: Any) -> dict[str, Any]:
    return {"target": name, "value": value, "met": None if value is None else bool(ok(value))}


# ---------------------------------------------------------------------------- table


def _fmt(stat: dict[str, float] | None, digits: int = 0, scale: float = 1.0) -> str:
    if not stat:
        return "-"
    f = f"{{:,.{digits}f}}"
    return f"{f.format(stat['median'] * scale)} [{f.format(stat['min'] * scale)}-{f.format(stat['max'] * scale)}]"


def render(res: dict[str, Any]) -> str:
    p, m = res["params"], res["machine"]
    lines = [
        f"mirror benchmark  {res['started_at']}  ({res['duration_s']:.0f} s)  complete={res['complete']}",
        f"load: {p['records']:,} records x {p['record_size']} B over {p['partitions']} partitions; "
        f"{p['reps']} run(s) per contender, median [min-max]",
        f"machine: {m['cpus']} CPUs ({m['cpu_model']}), load average at start {m['load_avg'][0]:.2f}, at "
        f"end {m.get('load_avg_end', [0])[0]:.2f}",
        "",
    ]
    head = (
        "contender",
        "records/s",
        "MB/s",
        "peak RSS MB",
        "max RSS/proc MB",
        "CPU s",
        "records/CPU s",
        "wall s",
        "1st record s",
    )
    table = [head]
    for r in res["throughput"]:
        if not r["available"]:
            table.append((r["label"], r["reason"]))
            continue
        if not r["ok_runs"]:
            table.append((r["label"], "FAILED: " + (r.get("errors") or ["?"])[0].splitlines()[0][:100]))
            continue
        table.append(
            (
                r["label"],
                _fmt(r["records_per_s"]),
                _fmt(r["mb_per_s"], 1),
                _fmt(r["peak_rss_mb"]),
                _fmt(r["peak_rss_per_process_mb"]),
                _fmt(r["cpu_s"], 1),
                _fmt(r["records_per_cpu_s"]),
                _fmt(r["wall_s"], 1),
                _fmt(r["first_record_s"], 1),
            )
        )
    lines += _grid(table)
    if res["latency"]:
        lines += [
            "",
            f"end-to-end latency at {res['params'].get('latency_rate_used') or 0:,.0f} records/s for "
            f"{p['latency_duration']:g} s after {p.get('latency_warmup', 0):g} s of warm-up (produce -> "
            "target append), "
            f"median [min-max] of {p['latency_reps']} run(s)",
        ]
        lt = [("contender", "p50 ms", "p99 ms", "max ms")]
        for r in res["latency"]:
            lt.append((r["label"], _fmt(r["p50_ms"], 1), _fmt(r["p99_ms"], 1), _fmt(r["max_ms"], 1)))
        lines += _grid(lt)
    o = res["offset_store_overhead"]
    lines += [
        "",
        "offset store overhead: "
        + (
            f"{o['overhead_pct']}% (on {o['with_store_records_per_s']:,.0f} vs off "
            f"{o['without_store_records_per_s']:,.0f} records/s)"
            if o["available"]
            else o["reason"]
        ),
    ]
    lines += ["", "ratios (medians): " + ", ".join(f"{k} = {v}" for k, v in res["ratios"].items() if v is not None)]
    lines += ["", "targets (reported, not asserted):"]
    for t in res["targets"]:
        mark = {True: "met", False: "MISSED", None: "n/a"}[t["met"]]
        lines.append(f"  [{mark:6}] {t['target']}: {t['value'] if t['value'] is not None else '-'}")
    return "\n".join(lines)


def _grid(rows: list[tuple[str, ...]]) -> list[str]:
    """Aligned columns; a two-cell row (label, note) spans the rest of the line."""
    full = [r for r in rows if len(r) == len(rows[0])]
    widths = [max(len(str(r[i])) for r in full) for i in range(len(rows[0]))]
    widths[0] = max(widths[0], *(len(str(r[0])) for r in rows))
    out = []
    for n, r in enumerate(rows):
        out.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out
