"""`mirror monitor`: the long-running lag exporter."""

from __future__ import annotations

from pathlib import Path

import click

from mirror import config as cfg
from mirror.cli import AppContext, config_option, pass_app
from mirror.cli.options import option
from mirror.cli.signals import stop_on_signals
from mirror.monitor import exporter as mon


@click.command()
@config_option
@option(
    "--metrics-port",
    aliases=["--port"],
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve /metrics on this port (default: metrics.port in the config).",
)
@click.option("--host", default=None, help="Address to bind (default: metrics.host in the config).")
@click.option("--flow", "flows", multiple=True, help="Only this flow (repeatable); default all.")
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 3600),
    default=15.0,
    show_default=True,
    help="Seconds between the end of one gather of a flow and the start of the next.",
)
@click.option(
    "--scrape-timeout",
    type=click.FloatRange(0.5, 120),
    default=8.0,
    show_default=True,
    help="Bound on each cluster request of a gather, and how long the first scrape waits for the first gathers.",
)
@pass_app
def monitor(
    app: AppContext,
    config_path: Path,
    metrics_port: int | None,
    host: str | None,
    flows: tuple[str, ...],
    interval: float,
    scrape_timeout: float,
) -> None:
    """Serve lag, flow status and checkpoint ages on /metrics, gathered every --interval in the background."""
    config = app.config(config_path)
    with stop_on_signals() as signals:
        mon.run(
            config,
            port=serving_port(config, metrics_port),
            host=config.metrics.host if host is None else host,
            stop=signals.stop,
            deadline=scrape_timeout,
            interval=interval,
            flows=config.select_flows(flows),
        )


def serving_port(config: cfg.Config, metrics_port: int | None) -> int:
    """`--metrics-port`, else `metrics.port` (`mirror canary run` defaults to the next port)."""
    return config.metrics.port if metrics_port is None else metrics_port
