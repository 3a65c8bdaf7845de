"""`mirror validate`: check the config and print the plan."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mirror.cli import AppContext, config_option, json_option, pass_app
from mirror.domain.acls import resource_for, visibility_probes
from mirror.domain.topics import match_topics
from mirror.errors import ClusterUnavailable
from mirror.kafka import Admin


@click.command()
@config_option
@click.option("--offline", is_flag=True, help="Check the file only; do not connect to the clusters.")
@json_option
@pass_app
def validate(app: AppContext, config_path: Path, offline: bool, as_json: bool) -> None:
    """Check the config and print, per flow, the topics it mirrors and their target names."""
    config = app.config(config_path)
    plan = []
    for flow in config.flows:
        entry: dict = {
            "flow": flow.name,
            "source": flow.source,
            "target": flow.target,
            "rename": flow.rename.value,
            "topics": None,
        }
        if not offline:
            try:
                admin = Admin(flow.source, config.clusters[flow.source])
                topics = admin.topics()
                # A topic the principal may not Describe is left out of listings: a pattern no
                # listed topic matches is asked for by name (a regex: its prefix), so a missing
                # grant is not taken for a missing topic.
                probes = visibility_probes(flow.topics.include, topics)
                hidden = set(admin.hidden_topics(sorted(set(probes.values()))))
                entry["not_allowed"] = sorted(
                    n if resource_for("topic", p)[0].pattern == "literal" else f"{n}* (matching {p!r})"
                    for p, n in probes.items()
                    if n in hidden
                )
            except ClusterUnavailable as exc:
                entry["error"] = str(exc)
            else:
                entry["topics"] = [m.__dict__ for m in match_topics(config, flow, topics)]
        plan.append(entry)
    if as_json:
        click.echo(json.dumps({"valid": True, "flows": plan}, indent=2))
        return
    click.echo(f"{config_path}: valid ({len(config.clusters)} clusters, {len(config.flows)} flows)")
    for entry in plan:
        click.echo(f"\nflow {entry['flow']}: {entry['source']} -> {entry['target']} (rename: {entry['rename']})")
        if entry.get("not_allowed"):
            click.echo(
                f"  not allowed to Describe on {entry['source']} (not mirrored until granted; see `mirror acls`): "
                f"{', '.join(entry['not_allowed'])}"
            )
        if entry.get("error"):
            click.echo(f"  topics: unknown, {entry['error']}")
        elif entry["topics"] is None:
            click.echo("  topics: not checked (--offline)")
        elif not entry["topics"]:
            click.echo("  topics: none match today")
        else:
            width = max(len(t["source"]) for t in entry["topics"])
            for t in entry["topics"]:
                click.echo(f"  {t['source']:<{width}} -> {t['target']}  ({t['partitions']} partitions)")
