"""`mirror acls`: the least privilege each command needs, as `kafka-acls` arguments."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from mirror.cli import AppContext, config_option, json_option, pass_app
from mirror.domain.acls import COMMANDS, principal_for, required_grants


@click.command()
@config_option
@click.option(
    "--command",
    "commands",
    multiple=True,
    type=click.Choice(COMMANDS),
    help="Only these commands (repeatable); all by default.",
)
@click.option(
    "--principal",
    default="User:mirror",
    show_default=True,
    help="For clusters whose client settings name no sasl.username.",
)
@json_option
@pass_app
def acls(app: AppContext, config_path: Path, commands: tuple[str, ...], principal: str, as_json: bool) -> None:
    """Print, per command and cluster, the ACLs the mirror's principal needs."""
    config = app.config(config_path)
    grants = required_grants(config, commands or COMMANDS)
    rows = []
    for g in grants:
        cluster = config.clusters[g.cluster]
        who = principal_for(dict(cluster.client), principal)
        args = ["--bootstrap-server", cluster.bootstrap, *g.kafka_acls_args(who)]
        rows.append(
            {
                "command": g.command,
                "cluster": g.cluster,
                "principal": who,
                "resource_type": g.resource.kind,
                "resource": g.resource.name,
                "pattern_type": g.resource.pattern,
                "operations": list(g.operations),
                "why": g.why,
                "kafka_acls_args": args,
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    current = None
    for r in rows:
        if (r["command"], r["cluster"]) != current:
            current = (r["command"], r["cluster"])
            click.echo(f"# mirror {r['command']} on {r['cluster']}")
        click.echo(f"kafka-acls.sh {shlex.join(r['kafka_acls_args'])}   # {r['why']}")
