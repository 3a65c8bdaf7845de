"""`mirror lag`: how far behind each flow is, per partition, and its groups' failover readiness."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import click

from mirror.cli import AppContext, config_option, json_option, pass_app
from mirror.domain.lag import FlowLag, judge
from mirror.domain.lag_status import NOT_JUDGED, Evaluator
from mirror.kafka import Admin, PartitionReader
from mirror.monitor.gather import TimestampCache, gather_flow
from mirror.store import open_optional


@click.command()
@config_option
@click.option("--flow", "flows", multiple=True, help="Only this flow (repeatable); default all.")
@json_option
@click.option("--watch", is_flag=True, help="Refresh in place until Ctrl-C; status becomes meaningful after a few rounds.")
@click.option("--interval", type=click.FloatRange(0.1), default=5.0, show_default=True, help="Seconds between refreshes with --watch.")
@click.option("--count", type=click.IntRange(1), default=None, help="With --watch: stop after this many refreshes.")
@pass_app
def lag(app: AppContext, config_path: Path, flows: tuple[str, ...], as_json: bool, watch: bool, interval: float, count: int | None) -> None:
    """Per partition: source end, mirrored position, target end, lag in records and seconds, status."""
    config = app.config(config_path)
    selected = config.select_flows(flows)
    admins: dict[str, Admin] = {}

    def admin(name: str) -> Admin:
        if name not in admins:
            admins[name] = Admin(name, config.clusters[name])
        return admins[name]

    readers = {f.name: PartitionReader(f"{f.source}-lag-{f.name}", config.clusters[f.source]) for f in selected}
    caches = {f.name: TimestampCache() for f in selected}
    evaluators = {f.name: Evaluator(min_span=3 * f.commit_interval) for f in selected}
    store = open_optional(config)
    stop = threading.Event()
    rounds = 0
    try:
        while True:
            rounds += 1
            results = []
            for f in selected:
                raw = gather_flow(config, f, source=admin(f.source), target=admin(f.target), reader=readers[f.name], store=store, cache=caches[f.name], strict=True)
                results.append(judge(evaluators[f.name], raw))
            if as_json:
                # One line, by the C encoder: `indent=` would use the pure-Python one, seconds at thousands of partitions.
                click.echo(json.dumps({"flows": [r.to_json() for r in results]}))
            else:
                if watch:
                    click.clear()
                click.echo(render(results))
            if not watch or (count is not None and rounds >= count) or stop.wait(interval):
                break
    finally:
        for r in readers.values():
            r.close()
        if store is not None:
            store.close()


def _fmt_secs(value: float | None) -> str:
    if value is None:
        return "?"
    if value < 120:
        return f"{value:.1f}s"
    if value < 7200:
        return f"{value / 60:.1f}m"
    return f"{value / 3600:.1f}h"


def _table(rows: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell; numeric columns (header included) right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    numeric = [all(r[i][:1].isdigit() or r[i] in ("-", "?") for r in rows[1:]) for i in range(len(widths))]
    return ["  " + "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric)).rstrip() for r in rows]


def render(results: list[FlowLag]) -> str:
    out: list[str] = []
    for r in results:
        running = {True: "mirror running", False: "no mirror running", None: "mirror liveness unknown"}[r.mirror_active]
        judged = not any(p.reason == NOT_JUDGED for p in r.partitions) or r.status != "OK"
        out.append(f"flow {r.flow}: {r.source} -> {r.target}  status {r.status if judged else '? (use --watch)'}  lag {r.lag_records} records, {_fmt_secs(r.lag_seconds)}  ({running})")
        rows = [["TOPIC", "PART", "SOURCE-END", "MIRRORED", "TARGET-END", "LAG", "LAG-TIME", "STATUS"]]
        for p in r.partitions:
            rows.append([
                p.source_topic, str(p.partition), str(p.source_end), "-" if p.position is None else str(p.position),
                "-" if p.target_end is None else str(p.target_end), str(p.lag_records),
                _fmt_secs(p.lag_seconds) + ("*" if p.lag_basis == "next-existing" else ""), "?" if p.reason == NOT_JUDGED else p.status,
            ])
        out += _table(rows) if r.partitions else ["  no topics match"]
        if r.groups:
            out.append("  groups (ready = nothing the group has not read is missing on the target):")
            grows = [["GROUP", "SOURCE-LAG", "TARGET-LAG", "UNMIRRORED", "TARGET-MEMBERS", "CHECKPOINT-AGE", "READY"]]
            for g in r.groups:
                grows.append([
                    g.group, str(g.source_lag), str(g.target_lag), str(g.unmirrored),
                    "?" if g.target_members is None else str(g.target_members),
                    "-" if g.checkpoint_age is None else _fmt_secs(g.checkpoint_age),
                    "yes" if g.unmirrored == 0 else "no",
                ])
            out += ["  " + line for line in _table(grows)]
        if any(p.lag_basis == "next-existing" for p in r.partitions):
            out.append("  * the record at the mirrored position is gone (compacted or expired); age of the next one that exists")
        for e in r.errors:
            out.append(f"  warning: {e}")
        out.append("")
    return "\n".join(out).rstrip()
