"""`mirror dev up|status|down`: real local clusters for development and demos."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from mirror import config as cfg
from mirror.cli import config_option, json_option
from mirror.devenv.kafka import DEFAULT_BASE_PORT, DEFAULT_HOME, DevClusters
from mirror.devenv.security import Material, Security, password_var
from mirror.devenv.spark import MAX_WORKERS
from mirror.errors import UsageError

home_option = click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_HOME,
    show_default=True,
    envvar="MIRROR_DEV_HOME",
    help="Data, logs and pid files of the dev clusters (`mirror drill --dev-home` reads the same variable).",
)


@click.group()
def dev() -> None:
    """Run real Kafka (and Cassandra) clusters on 127.0.0.1."""


@dev.command()
@click.option(
    "--clusters",
    default="nyc,sf",
    show_default=True,
    help="Comma-separated cluster names; cluster i listens on base-port + 100*i.",
)
@click.option("--cassandra", is_flag=True, help="Also run one Cassandra node (on base-port - 50).")
@click.option(
    "--spark",
    is_flag=True,
    help="Also run a Spark standalone master and its workers (1 core each; master on base-port - 30).",
)
@click.option(
    "--spark-workers",
    type=click.IntRange(1, MAX_WORKERS),
    default=1,
    show_default=True,
    help="Spark workers (one executor each); given again to a running cluster, the missing ones are added.",
)
@click.option(
    "--base-port",
    type=click.IntRange(1024, 65000),
    default=DEFAULT_BASE_PORT,
    show_default=True,
    help="Port of the first cluster's first broker; the other clusters and services are placed from it.",
)
@click.option(
    "--broker-config",
    "broker_config",
    multiple=True,
    metavar="KEY=VALUE",
    help="A server.properties line for every broker (repeatable), e.g. auto.create.topics.enable=false. "
    "Brokers otherwise run with Kafka's defaults.",
)
@click.option(
    "--security",
    type=click.Choice([s.value for s in Security]),
    default=Security.PLAINTEXT.value,
    show_default=True,
    help="Client listener: TLS (dev CA, made at first start) and/or SASL/SCRAM-SHA-512 users admin, mirror "
    "and nogrants, "
    "with ACLs enforced. `dev status --json` shows the mirror user's client settings and the 0600 password file.",
)
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --security: grant the mirror user what `mirror acls -c CONFIG` lists (as `dev grant` does).",
)
@home_option
def up(
    clusters: str,
    cassandra: bool,
    spark: bool,
    spark_workers: int,
    base_port: int,
    broker_config: tuple[str, ...],
    security: str,
    config_path: Path | None,
    home: Path,
) -> None:
    """Start the clusters; return once each answers metadata and accepts a topic."""
    names = [n.strip() for n in clusters.split(",") if n.strip()]
    if not names or len(set(names)) != len(names):
        raise click.BadParameter("give distinct, comma-separated names, e.g. nyc,sf", param_hint="--clusters")
    result = DevClusters(home).up(
        names,
        base_port,
        cassandra=cassandra,
        broker_config=parse_broker_config(broker_config),
        security=security,
        spark=spark,
        spark_workers=spark_workers,
    )
    for name, c in result.status["clusters"].items():
        if name in names:
            what = "already running" if name in result.already_running else "started"
            click.echo(f"{name}: {c['bootstrap']} ({what}; log {c['log']})")
    cas = result.status.get("cassandra")
    if cassandra and cas:
        what = "already running" if "cassandra" in result.already_running else "started"
        click.echo(f"cassandra: {cas['contact_point']} ({what}; log {cas['log']})")
    sp = result.status.get("spark")
    if spark and sp:
        what = "already running" if "spark" in result.already_running else "started"
        click.echo(
            f"spark: {sp['master']}, {sp['workers']} worker{'s' if sp['workers'] > 1 else ''} ({what}; "
            f"logs in {sp['log']})"
        )
    if config_path is not None and security != Security.PLAINTEXT.value:
        _grant(home, config_path)
    if result.status.get("passwords"):
        click.echo(
            f"passwords: {result.status['passwords']} (mode 0600; `mirror dev status --json` shows the client settings)"
        )
    click.echo(f"Stop with: mirror dev down --home {home}")


def parse_broker_config(items: tuple[str, ...]) -> dict[str, str]:
    """`KEY=VALUE` pairs; a later KEY wins. Anything else is a usage error naming the item."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or any(c.isspace() for c in key) or "\n" in value:
            raise click.BadParameter(
                f"{item!r} is not KEY=VALUE (e.g. auto.create.topics.enable=false)", param_hint="--broker-config"
            )
        out[key] = value.strip()
    return out


@dev.command()
@home_option
@json_option
def status(home: Path, as_json: bool) -> None:
    """Show the clusters under --home and whether they run."""
    info = DevClusters(home).status()
    if as_json:
        out = {
            "clusters": {
                n: {
                    "bootstrap": c["bootstrap"],
                    "running": c["running"],
                    "security": c["security"],
                    "client": c["client"],
                }
                for n, c in info["clusters"].items()
            },
            "cassandra": {
                k: v for k, v in info["cassandra"].items() if k in ("contact_point", "running", "username", "password")
            }
            if info["cassandra"]
            else None,
            "spark": {"master": info["spark"]["master"], "running": info["spark"]["running"]}
            if info["spark"]
            else None,
        }
        out["passwords"] = info["passwords"]
        click.echo(json.dumps(out, indent=2))
        return
    if not info["clusters"]:
        click.echo(f"no dev clusters under {home}")
    for name, c in info["clusters"].items():
        click.echo(f"{name}: {c['bootstrap']} {'running' if c['running'] else 'stopped'}")
    if info["cassandra"]:
        c = info["cassandra"]
        click.echo(f"cassandra: {c['contact_point']} {'running' if c['running'] else 'stopped'}")
    if info["spark"]:
        click.echo(f"spark: {info['spark']['master']} {'running' if info['spark']['running'] else 'stopped'}")


def _grant(home: Path, config_path: Path) -> None:
    dev_clusters = DevClusters(home)
    material = Material(dev_clusters.home)
    if not material.passwords_file.exists():
        raise UsageError(
            f"no secured dev clusters under {home}", hint="start them with `mirror dev up --security sasl_ssl`"
        )
    # The file may name the dev passwords as ${VAR}: supply them (in memory only) so it loads.
    env = {**os.environ, **{password_var(u): p for u, p in material.passwords().items()}}
    done = dev_clusters.grant(cfg.load(config_path, env=env))
    if not done:
        raise UsageError(
            f"no cluster of {config_path} is a secured dev cluster under {home}",
            hint="check the bootstrap addresses against `mirror dev status`",
        )
    for name, count in done.items():
        click.echo(f"{name}: granted User:mirror {count} ACLs (see `mirror acls -c {config_path}`)")


@dev.command()
@config_option
@home_option
def grant(config_path: Path, home: Path) -> None:
    """Grant the mirror user, on the secured dev clusters a config names, what `mirror acls` lists."""
    _grant(home, config_path)


@dev.command()
@home_option
def down(home: Path) -> None:
    """Stop exactly the processes `up` started (data is kept)."""
    stopped = DevClusters(home).down()
    click.echo(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
