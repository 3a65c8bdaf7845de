"""Runs -> medians, ratios and the issue's targets; the JSON document and the stdout table."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from bench import marginal, pairing
from bench.contenders import EOS_FAST_INTERVAL

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


# (name, a, b, field, phase, how): each compared per rep (bench.pairing), phase "t" throughput
# runs, "l" latency runs, "m" records per CPU second at the margin (bench.marginal).
RATIOS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("mirror/mm2", "mirror", "mm2", "records_per_s", "t", "ratio"),
    ("mirror/ceiling", "mirror", "ceiling", "records_per_s", "t", "ratio"),
    ("mirror-eos/mirror", "mirror-eos", "mirror", "records_per_s", "t", "ratio"),
    ("mirror-eos - mirror p99 latency (ms)", "mirror-eos", "mirror", "p99_ms", "l", "difference"),
    # Exactly-once against exactly-once: MirrorMaker 2 with exactly-once source support.
    ("mirror-eos/mm2-eos", "mirror-eos", "mm2-eos", "records_per_s", "t", "ratio"),
    ("mm2-eos/mm2", "mm2-eos", "mm2", "records_per_s", "t", "ratio"),
    ("mirror-eos/mm2-eos p99 latency", "mirror-eos", "mm2-eos", "p99_ms", "l", "ratio"),
    # The documented low-latency exactly-once setting (a shorter commit_interval).
    ("mirror-eos-fast/mm2-eos", "mirror-eos-fast", "mm2-eos", "records_per_s", "t", "ratio"),
    ("mirror-eos-fast/mm2-eos p99 latency", "mirror-eos-fast", "mm2-eos", "p99_ms", "l", "ratio"),
    ("mirror-eos-fast/mirror", "mirror-eos-fast", "mirror", "records_per_s", "t", "ratio"),
    ("mirror-w2/mm2-t2", "mirror-w2", "mm2-t2", "records_per_s", "t", "ratio"),
    ("mirror-w2/mirror", "mirror-w2", "mirror", "records_per_s", "t", "ratio"),
    ("mirror-w2/ceiling", "mirror-w2", "ceiling", "records_per_s", "t", "ratio"),
    ("mirror/mm2 records per CPU second", "mirror", "mm2", "records_per_cpu_s", "t", "ratio"),
    ("mirror/ceiling records per CPU second", "mirror", "ceiling", "records_per_cpu_s", "t", "ratio"),
    ("mirror/ceiling marginal records per CPU second", "mirror", "ceiling", "", "m", "ratio"),
    ("mirror/mm2 peak RSS", "mirror", "mm2", "peak_rss_mb", "t", "ratio"),
    ("mirror/mm2 p99 latency", "mirror", "mm2", "p99_ms", "l", "ratio"),
    ("mirror/mm2 p50 latency", "mirror", "mm2", "p50_ms", "l", "ratio"),
    # The Spark engine against the job a PySpark user would write, and against `mirror run`.
    ("spark/plain-spark", "spark", "plain-spark", "records_per_s", "t", "ratio"),
    ("spark/plain-spark wall", "spark", "plain-spark", "wall_s", "t", "ratio"),
    ("spark/plain-spark first record", "spark", "plain-spark", "first_record_s", "t", "ratio"),
    ("spark/mirror records per CPU second", "spark", "mirror", "records_per_cpu_s", "t", "ratio"),
    # Start-up excluded: the records between the two sizes over the CPU they cost (--marginal).
    ("spark/mirror marginal records per CPU second", "spark", "mirror", "", "m", "ratio"),
    ("plain-spark/mirror marginal records per CPU second", "plain-spark", "mirror", "", "m", "ratio"),
    ("spark/plain-spark marginal records per CPU second", "spark", "plain-spark", "", "m", "ratio"),
    ("mirror/mirror-nostore", "mirror", "mirror-nostore", "records_per_s", "t", "ratio"),
    # The offset map in Cassandra (opt-in row mirror-cassandra): records/s, and CPU per record
    # of the mirror process (the Cassandra node's own CPU is not counted, as the brokers' is not).
    ("mirror-cassandra/mirror-nostore", "mirror-cassandra", "mirror-nostore", "records_per_s", "t", "ratio"),
    (
        "mirror-cassandra/mirror-nostore records per CPU second",
        "mirror-cassandra",
        "mirror-nostore",
        "records_per_cpu_s",
        "t",
        "ratio",
    ),
    (
        "mirror-cassandra/mirror-nostore marginal records per CPU second",
        "mirror-cassandra",
        "mirror-nostore",
        "",
        "m",
        "ratio",
    ),
    ("mirror-cassandra/mirror", "mirror-cassandra", "mirror", "records_per_s", "t", "ratio"),
)


def _paired_ratios(
    runs: dict[str, list[dict[str, Any]]],
    lat_runs: dict[str, list[dict[str, Any]]],
    margins: dict[str, dict[int, float]],
) -> tuple[dict[str, float | None], dict[str, list[float]]]:
    """Every RATIOS entry from the runs of the same rep (bench.pairing), and the per-rep values."""
    out: dict[str, float | None] = {}
    each: dict[str, list[float]] = {}
    for name, a, b, field, phase, how in RATIOS:
        if phase == "m":
            xa, xb = margins.get(a, {}), margins.get(b, {})
        else:
            source = runs if phase == "t" else lat_runs
            xa, xb = pairing.by_rep(source.get(a, []), field), pairing.by_rep(source.get(b, []), field)
        if how == "ratio":
            values = pairing.ratios(xa, xb)
            summary = pairing.log_median(values)
            out[name] = round(summary, 3) if summary is not None else None
        else:
            values = pairing.differences(xa, xb)
            summary = pairing.median(values)
            out[name] = round(summary, 1) if summary is not None else None
        if values:
            each[name] = [round(v, 3) for v in values]
    return out, each


def summarise(
    *,
    params: dict[str, Any],
    machine: dict[str, Any],
    specs: Sequence[Any],
    runs: dict[str, list[dict[str, Any]]],
    lat_runs: dict[str, list[dict[str, Any]]],
    meta: dict[str, Any],
    marginal_runs: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The JSON document. `marginal_runs`: each contender's runs on the smaller topic
    (`--marginal`), for the records per CPU second at the margin."""
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

    def tput(key: str) -> float | None:
        return _median(by_key.get(key), "records_per_s")

    margins = marginal.per_contender(runs, marginal_runs or {}, params.get("records"), params.get("marginal"))
    ratios, ratios_by_rep = _paired_ratios(runs, lat_runs, margins)

    nostore = by_key.get("mirror-nostore")
    overhead = _overhead(nostore, ratios["mirror/mirror-nostore"], tput("mirror"), tput("mirror-nostore"))
    overhead_cassandra = _overhead(
        nostore, ratios["mirror-cassandra/mirror-nostore"], tput("mirror-cassandra"), tput("mirror-nostore")
    )
    if overhead_cassandra["available"]:
        # CPU seconds per record with the store over those without, less one (whole run; --marginal).
        for name, key in (
            ("records per CPU second", "cpu_per_record_pct"),
            ("marginal records per CPU second", "marginal_cpu_per_record_pct"),
        ):
            ratio = ratios[f"mirror-cassandra/mirror-nostore {name}"]
            overhead_cassandra[key] = round(100.0 * (1 / ratio - 1), 1) if ratio else None

    per_worker_rss = [_median(by_key.get(k), "peak_rss_per_process_mb") for k in ("mirror", "mirror-w2")]
    targets = [
        _target("one worker >= 2x MirrorMaker 2 throughput", ratios["mirror/mm2"], lambda v: v >= 2.0),
        _target("one worker >= 70% of the raw ceiling", ratios["mirror/ceiling"], lambda v: v >= 0.7),
        *(_bounded(name, ratios[key], op, bound) for name, key, op, bound in PERFORMANCE_3),
        _target(
            "exactly_once p99 latency at most one commit interval (1 s) above at-least-once (ms)",
            ratios["mirror-eos - mirror p99 latency (ms)"],
            lambda v: v <= 1000.0,
        ),
        _target(
            "p99 latency no worse than MirrorMaker 2 (ratio <= 1)", ratios["mirror/mm2 p99 latency"], lambda v: v <= 1.0
        ),
        _target("offset map costs <= 3% of throughput (overhead %)", overhead.get("overhead_pct"), lambda v: v <= 3.0),
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
        "offset_store_overhead_cassandra": overhead_cassandra,
        "marginal": _marginal_section(margins, marginal_runs or {}, params),
        "ratios": ratios,
        # Each ratio's value in every rep both contenders ran (what `ratios` summarises).
        "ratios_by_rep": ratios_by_rep,
        "targets": targets,
    }


def _overhead(
    nostore: dict[str, Any] | None, ratio: float | None, on: float | None, off: float | None
) -> dict[str, Any]:
    """An offset store's cost: 1 - (records/s with it / without), paired per rep as every ratio."""
    if nostore and nostore["available"] and ratio is not None:
        return {
            "available": True,
            "with_store_records_per_s": on,
            "without_store_records_per_s": off,
            "overhead_pct": round(100.0 * (1 - ratio), 1),
        }
    return {"available": False, "reason": (nostore or {}).get("reason") or "not measured in this run"}


def _marginal_section(
    margins: dict[str, dict[int, float]], small_runs: dict[str, list[dict[str, Any]]], params: dict[str, Any]
) -> dict[str, Any] | None:
    """The JSON's `marginal` section: each contender's runs on the smaller topic and its records
    per CPU second at the margin, per rep and summarised (None when the run had no `--marginal`)."""
    if not params.get("marginal") or not small_runs:
        return None
    rows = {
        key: {
            "runs": runs,
            "records_per_cpu_s_by_rep": {str(rep): round(v, 1) for rep, v in margins.get(key, {}).items()},
            "records_per_cpu_s": _stats(list(margins.get(key, {}).values())),
        }
        for key, runs in small_runs.items()
    }
    return {"records": params.get("records"), "small_records": params["marginal"], "rows": rows}


# Issue 37's targets: (what, ratio, ">=" or "<=", bound).
PERFORMANCE_3: tuple[tuple[str, str, str, float], ...] = (
    ("records per CPU second >= 0.90x the raw ceiling's", "mirror/ceiling records per CPU second", ">=", 0.9),
    (
        "... and >= 0.90x per record (--marginal: start-up excluded)",
        "mirror/ceiling marginal records per CPU second",
        ">=",
        0.9,
    ),
    ("exactly_once >= 0.9x at-least-once throughput", "mirror-eos/mirror", ">=", 0.9),
    (
        "exactly_once p99 no worse than MirrorMaker 2 exactly-once's (ratio <= 1)",
        "mirror-eos/mm2-eos p99 latency",
        "<=",
        1.0,
    ),
    (f"... or with {EOS_FAST_INTERVAL} commit_interval (ratio <= 1)", "mirror-eos-fast/mm2-eos p99 latency", "<=", 1.0),
    (
        f"exactly_once with {EOS_FAST_INTERVAL} commit_interval >= 3x MirrorMaker 2 exactly-once's throughput",
        "mirror-eos-fast/mm2-eos",
        ">=",
        3.0,
    ),
    ("exactly_once >= 3x MirrorMaker 2 exactly-once's throughput", "mirror-eos/mm2-eos", ">=", 3.0),
)


def _bounded(name: str, value: float | None, op: str, bound: float) -> dict[str, Any]:
    return _target(name, value, (lambda v: v >= bound) if op == ">=" else (lambda v: v <= bound))


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
    c = res.get("offset_store_overhead_cassandra") or {}
    if c.get("available"):
        cpu = [
            f"{c[k]:+}% {what}"
            for k, what in (
                ("cpu_per_record_pct", "CPU per record"),
                ("marginal_cpu_per_record_pct", "CPU per record at the margin"),
            )
            if c.get(k) is not None
        ]
        lines.append(
            f"offset store overhead (Cassandra): {c['overhead_pct']}% (on {c['with_store_records_per_s']:,.0f} vs "
            f"off {c['without_store_records_per_s']:,.0f} records/s)" + (f"; {', '.join(cpu)}" if cpu else "")
        )
    return "\n".join(lines + _marginal_lines(res) + _footer(res))


def _footer(res: dict[str, Any]) -> list[str]:
    """Each rep's order, the ratios and the targets."""
    lines = []
    orders = res.get("orders", {}).get("throughput")
    if orders:
        each = "; ".join(f"{n + 1}: {', '.join(o)}" for n, o in enumerate(orders))
        lines += ["", f"throughput order per rep: {each}"]
    lines += [
        "",
        "ratios (per rep, then the median in log space; see bench/pairing.py): "
        + ", ".join(f"{k} = {v}" for k, v in res["ratios"].items() if v is not None),
    ]
    lines += ["", "targets (reported, not asserted):"]
    for t in res["targets"]:
        mark = {True: "met", False: "MISSED", None: "n/a"}[t["met"]]
        lines.append(f"  [{mark:6}] {t['target']}: {t['value'] if t['value'] is not None else '-'}")
    return lines


def _marginal_lines(res: dict[str, Any]) -> list[str]:
    m = res.get("marginal")
    if not m:
        return []
    lines = [
        "",
        f"records per CPU second at the margin: ({m['records']:,} - {m['small_records']:,}) records / (CPU s at "
        f"{m['records']:,} - CPU s at {m['small_records']:,}), per rep",
    ]
    table: list[tuple[str, ...]] = [("contender", "CPU s (small topic)", "records/CPU s at the margin", "by rep")]
    labels = {r["key"]: r["label"] for r in res["throughput"]}
    for key, row in m["rows"].items():
        cpu = _stats([r.get("cpu_s") for r in row["runs"] if r.get("ok")])
        by_rep = ", ".join(f"{v:,.0f}" for v in row["records_per_cpu_s_by_rep"].values()) or "-"
        table.append((labels.get(key, key), _fmt(cpu, 1), _fmt(row["records_per_cpu_s"]), by_rep))
    return lines + _grid(table)


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
