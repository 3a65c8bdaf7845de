"""`mirror canary run` and `mirror canary once`."""

from __future__ import annotations

import json
from pathlib import Path

import click
from prometheus_client import CollectorRegistry

from canary.prober import FlowProber, Prober
from mirror import config as cfg
from mirror.cli import AppContext, config_option, json_option, pass_app
from mirror.cli.signals import stop_on_signals
from mirror.errors import MirrorError
from mirror.metrics import CanaryMetrics, serve


class CanaryFailed(MirrorError):
    """A canary round lost probes or saw duplicates (exit 1, for scripts and runbooks)."""


@click.group()
def canary() -> None:
    """End-to-end probes through each flow: latency, loss, duplicates."""


@canary.command()
@config_option
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve /metrics on this port (default: metrics.port + 1, beside `mirror monitor` on metrics.port).",
)
@click.option("--host", default=None, help="Address to bind (default: metrics.host in the config).")
@click.option("--flow", "flows", multiple=True, help="Only this flow (repeatable); default all.")
@pass_app
def run(app: AppContext, config_path: Path, metrics_port: int | None, host: str | None, flows: tuple[str, ...]) -> None:
    """Probe every flow every canary.interval until stopped; serve the results on /metrics."""
    config = app.config(config_path)
    with stop_on_signals() as signals:
        registry = CollectorRegistry()
        prober = Prober(config, config.select_flows(flows), metrics=CanaryMetrics(registry))
        server = serve(
            serving_port(config, metrics_port),
            config.metrics.host if host is None else host,
            registry,
        )
        try:
            prober.run(signals.stop)
        finally:
            server.shutdown()


def serving_port(config: cfg.Config, metrics_port: int | None) -> int:
    """`--metrics-port`, else the port after `metrics.port`, `mirror monitor`'s default: both run
    beside each other on one host, as the container stack and docs/monitoring.md run them."""
    if metrics_port is not None:
        return metrics_port
    port = config.metrics.port
    if port == 0:  # any free port, for both
        return 0
    return port + 1 if port < 65535 else port - 1


@canary.command()
@config_option
@click.option("--flow", "flows", multiple=True, help="Only this flow (repeatable); default all.")
@json_option
@pass_app
def once(app: AppContext, config_path: Path, flows: tuple[str, ...], as_json: bool) -> None:
    """Send one probe per partition through each flow and wait up to canary.max_latency for them.

    Exit 0 when every probe arrived once within canary.max_latency; 1 when one was lost, late
    or duplicated, or a cluster did not answer; 2 on a config or usage error.
    """
    config = app.config(config_path)
    results = []
    for flow in config.select_flows(flows):
        prober = FlowProber(config, flow)
        try:
            results.append(prober.once())
        finally:
            prober.close()
    if as_json:
        click.echo(json.dumps({"flows": [r.to_json() for r in results]}, indent=2))
    else:
        for r in results:
            d = r.to_json()
            lat = d["latency_seconds"]
            p99 = "-" if lat["p99"] is None else f"{lat['p99'] * 1000:.0f}ms"
            click.echo(
                f"flow {r.flow}: {'OK' if r.ok else 'FAILED'}  {r.source_topic} -> {r.target_topic}  "
                f"sent {d['sent']} received {d['received']} lost {d['lost']} late {d['late']} duplicated "
                f"{d['duplicated']}  p99 {p99}"
            )
    bad = [r.flow for r in results if not r.ok]
    if bad:
        raise CanaryFailed(
            f"canary probes lost, late or duplicated on flow(s) {', '.join(bad)}", hint="see runbooks/canary-alert.md"
        )
