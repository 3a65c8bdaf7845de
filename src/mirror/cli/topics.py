"""`mirror topics`: source -> target topic mapping, partition counts, replication, config drift."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from mirror.cli import AppContext, config_option, json_option, pass_app
from mirror.config import Config, FlowConfig
from mirror.domain.topics import match_topics
from mirror.engine.targets import compare_topics
from mirror.kafka import Admin
from mirror.run.aclsync import AclSyncer
from mirror.store import open_store


@click.command()
@config_option
@click.option("--flow", "flows", multiple=True, help="Only this flow (repeatable); default all.")
@json_option
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 when any target topic is missing or differs from its source, or (sync_acls) an ACL drifts (cron, CI).",
)
@pass_app
def topics(app: AppContext, config_path: Path, flows: tuple[str, ...], as_json: bool, check: bool) -> int:
    """Show each flow's topics on both clusters and where the target differs from the source."""
    config = app.config(config_path)
    result = []
    acl_lines: dict[str, list[str]] = {}
    for flow in config.select_flows(flows):
        source = Admin(flow.source, config.clusters[flow.source])
        target = Admin(flow.target, config.clusters[flow.target])
        reports = compare_topics(source, target, match_topics(config, flow, source.topics()))
        result.append((flow, reports))
        if flow.sync_acls:
            acl_lines[flow.name] = _acl_drift(config, flow, source, target)
    if as_json:
        click.echo(
            json.dumps(
                [
                    {
                        "flow": f.name,
                        "source": f.source,
                        "target": f.target,
                        "sync_topic_configs": f.sync_topic_configs,
                        "topics": [{**asdict(r), "ok": r.ok} for r in reps],
                        "acl_drift": acl_lines.get(f.name, []),
                    }
                    for f, reps in result
                ],
                indent=2,
            )
        )
    else:
        for flow, reps in result:
            click.echo(f"flow {flow.name}: {flow.source} -> {flow.target}")
            if not reps:
                click.echo("  no matching topics")
                continue
            w = max(len(r.source) for r in reps)
            tw = max(len(r.target) for r in reps)
            click.echo(f"  {'SOURCE':<{w}}  {'TARGET':<{tw}}  PARTITIONS  RF    DRIFT")
            for r in reps:
                parts = f"{r.source_partitions}/{'-' if r.target_partitions is None else r.target_partitions}"
                rf = f"{r.source_replication}/{'-' if r.target_replication is None else r.target_replication}"
                notes = []
                if r.target_partitions is None:
                    notes.append("not created yet (the mirror creates it)")
                elif r.target_partitions < r.source_partitions:
                    notes.append("fewer partitions (the mirror grows it)")
                if r.drift:
                    notes.append(
                        ", ".join(f"{k}: {a or 'default'} -> {b or 'default'}" for k, (a, b) in r.drift.items())
                    )
                    if not flow.sync_topic_configs:
                        notes[-1] += " (sync_topic_configs: false)"
                drift = "; ".join(notes) or "-"
                click.echo(f"  {r.source:<{w}}  {r.target:<{tw}}  {parts:<10}  {rf:<4}  {drift}")
        for flow, _ in result:
            for line in acl_lines.get(flow.name, []):
                click.echo(f"  {line}")
    differ = [r.target for _, reps in result for r in reps if not r.ok]
    differ += [f"{len(v)} ACLs of flow {k}" for k, v in acl_lines.items() if v]
    if check and differ:
        click.echo(
            f"{len(differ)} target topic{'s' if len(differ) > 1 else ''} missing or different from the source: "
            f"{', '.join(differ[:10])}{' ...' if len(differ) > 10 else ''}",
            err=True,
        )
        return 1
    return 0


def _acl_drift(config: Config, flow: FlowConfig, source: Admin, target: Admin) -> list[str]:
    """A `sync_acls` flow's ACL drift, one line each (the sync's record is in the offset store)."""
    store = open_store(config.offset_store)
    try:
        return AclSyncer(config, flow, store, source=source, target=target).drift().lines()
    finally:
        store.close()
