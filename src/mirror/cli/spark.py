"""`mirror spark run`: the same flow, mirrored by a Spark Structured Streaming query."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import click

from mirror.cli import AppContext, config_option, parse_key_values, pass_app
from mirror.errors import ExitCode


@click.group()
def spark() -> None:
    """Run a flow's data pipeline on Spark (local mode or a standalone cluster)."""


@spark.command("run")
@config_option
@click.option("--flow", "flow_name", required=True, help="The flow to mirror (one per Spark application).")
@click.option("--master", default=None, help="Spark master URL, e.g. spark://127.0.0.1:7077; default local[*].")
@click.option("--until-caught-up", is_flag=True, help="Mirror what the source holds at start (Trigger.AvailableNow), commit, exit 0.")
@click.option("--checkpoint", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Spark checkpoint directory of this flow (default: <spark.checkpoint_dir>/<flow>, kept across restarts; the flow's group says where to resume).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None, help="Serve Prometheus metrics on this port (the mirror's and Spark's progress).")
@click.option("--max-records-per-batch", type=click.IntRange(1), default=None, help="Cap a micro-batch (Spark's maxOffsetsPerTrigger).")
@click.option("--ui-port", type=click.IntRange(0, 65535), default=None, help="Port of the Spark UI (default 4040; the next free one if taken; 0: any).")
@click.option("--no-ui", is_flag=True, help="Do not start the Spark UI.")
@click.option("--conf", "spark_conf", multiple=True, metavar="KEY=VALUE", help="A Spark setting (repeatable), as spark-submit's --conf, e.g. spark.cores.max=2.")
@pass_app
def run(app: AppContext, config_path: Path, flow_name: str, master: str | None, until_caught_up: bool, checkpoint: Path | None, metrics_port: int | None,
        max_records_per_batch: int | None, ui_port: int | None, no_ui: bool, spark_conf: tuple[str, ...]) -> int:
    """Mirror one flow with Spark until stopped (or caught up); SIGTERM/Ctrl-C stop after the current batch."""
    from mirror.spark.job import UI_PORT, run_flow

    conf = parse_key_values(spark_conf, "--conf", "spark.cores.max=2")
    config = app.config(config_path)
    (flow,) = config.select_flows((flow_name,))
    stop = threading.Event()
    signals: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        signals.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        job = run_flow(config, flow, master=master, checkpoint=checkpoint, until_caught_up=until_caught_up,
                       max_records_per_batch=max_records_per_batch, metrics_port=metrics_port, stop=stop, quiet=not app.debug,
                       ui_port=None if no_ui else UI_PORT if ui_port is None else ui_port, conf=conf)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo(f"flow {flow.name}: {job.records} records mirrored on Spark ({job.skipped} already on the target)", err=True)
    if signal.SIGINT in signals:
        return ExitCode.INTERRUPTED
    return ExitCode.OK
