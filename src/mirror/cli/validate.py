"""`mirror validate`: check the config and print the plan.

Online, every cluster a flow names is asked for its topics, all at once (each within its
own `timeout`): a cluster that does not answer makes the file not valid here and now, since
a DR tool that says "valid" beside a dead cluster tells the operator the wrong thing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from mirror.cli import AppContext, config_option, json_option, pass_app
from mirror.config import Config, FlowConfig
from mirror.domain.acls import resource_for, visibility_probes
from mirror.domain.naming import MAX_TOPIC_NAME
from mirror.domain.topics import match_topics, unmirrorable_topics
from mirror.errors import ClusterUnavailable, ExitCode, MirrorError
from mirror.kafka import Admin


@click.command()
@config_option
@click.option(
    "--offline",
    is_flag=True,
    help="Check the file only; do not connect to the clusters (unset ${VAR}s are warnings).",
)
@json_option
@pass_app
def validate(app: AppContext, config_path: Path, offline: bool, as_json: bool) -> int:
    """Check the config and print, per flow, the topics it mirrors and their target names.

    Exit 0 when valid; 1 when a cluster a flow names did not answer; 2 when the file is wrong
    (including a matched topic whose target name Kafka would refuse).
    """
    config = app.config(config_path, offline=offline, warn=False)
    warnings = [str(w) for w in app.config_warnings]
    unreachable: dict[str, str] = {}
    problems: list[str] = []
    plan = [_entry(flow) for flow in config.flows]
    if not offline:
        admins, listed, unreachable = _reach(config)
        for entry, flow in zip(plan, config.flows):
            if flow.source in listed:
                problems += _online_flow(entry, config, flow, admins[flow.source], listed[flow.source])
            else:
                entry["error"] = unreachable[flow.source]
    reasons = [*unreachable.values(), *problems]
    rc = ExitCode.USAGE if problems else ExitCode.FAILURE if unreachable else ExitCode.OK
    if as_json:
        doc = {"valid": not reasons, "problems": reasons, "warnings": warnings, "flows": plan}
        click.echo(json.dumps(doc, indent=2))
        return rc
    for w in warnings:
        click.echo(f"Warning: {w}", err=True)
    verdict = "valid" if not reasons else "NOT valid"
    click.echo(f"{config_path}: {verdict} ({len(config.clusters)} clusters, {len(config.flows)} flows)")
    for entry in plan:
        _print_entry(entry)
    for reason in reasons:
        click.echo(f"Error: {reason}", err=True)
    return rc


def _entry(flow: FlowConfig) -> dict[str, Any]:
    return {
        "flow": flow.name,
        "source": flow.source,
        "target": flow.target,
        "rename": flow.rename.value,
        "topics": None,
    }


def _reach(config: Config) -> tuple[dict[str, Admin], dict[str, dict[str, int]], dict[str, str]]:
    """Every cluster a flow names, asked for its topics concurrently: their admins, the topics
    of those that answered, and why each other one did not."""
    names = list(dict.fromkeys(c for f in config.flows for c in (f.source, f.target)))
    admins = {n: Admin(n, config.cluster(n)) for n in names}
    pending: dict[str, Callable[[], dict[str, int]]] = {n: a.request_topics() for n, a in admins.items()}
    listed: dict[str, dict[str, int]] = {}
    unreachable: dict[str, str] = {}
    for name, wait in pending.items():
        try:
            listed[name] = wait()
        except MirrorError as exc:  # unreachable, a refused login, or a listing refused
            unreachable[name] = f"{exc} [bootstrap {config.cluster(name).bootstrap}]"
    return admins, listed, unreachable


def _online_flow(
    entry: dict[str, Any], config: Config, flow: FlowConfig, admin: Admin, topics: dict[str, int]
) -> list[str]:
    """Fill the flow's plan from its source's topics; returns the problems found there."""
    # A topic the principal may not Describe is left out of listings: a pattern no listed topic
    # matches is asked for by name (a regex: its prefix), so a missing grant is not taken for a
    # missing topic.
    probes = visibility_probes(flow.topics.include, topics)
    try:
        hidden = set(admin.hidden_topics(sorted(set(probes.values()))))
    except ClusterUnavailable:
        hidden = set()
    entry["not_allowed"] = sorted(
        n if resource_for("topic", p)[0].pattern == "literal" else f"{n}* (matching {p!r})"
        for p, n in probes.items()
        if n in hidden
    )
    entry["topics"] = [m.__dict__ for m in match_topics(config, flow, topics)]
    return [
        f"flows.{flow.name}: topic {m.source!r} would be mirrored as {m.target!r} ({len(m.target)} characters), "
        f"longer than Kafka's limit of {MAX_TOPIC_NAME} (`mirror run` skips it; use a shorter cluster name, "
        "exclude it, or rename: identity)"
        for m in unmirrorable_topics(config, flow, topics)
    ]


def _print_entry(entry: dict[str, Any]) -> None:
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
