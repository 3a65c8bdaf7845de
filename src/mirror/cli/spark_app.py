"""The Spark application spark-submit runs: one flow, as `mirror spark run` mirrors it.

    spark-submit ... mirror_spark_app.py -c CONFIG --flow NAME [--until-caught-up] ...
    python -m mirror.cli.spark_app -c CONFIG --flow NAME ...     (the same, under spark-submit)

`mirror spark submit` writes the command line; the master, the jars and the executors'
Python come from it, not from here. Errors end as they do in the CLI: `Error: ...` on one
line and the exit code of `mirror.errors` (spark-submit exits with the driver's status).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from mirror.errors import ExitCode, MirrorError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mirror_spark_app.py", description="Mirror one flow as a Spark application (run by spark-submit)."
    )
    p.add_argument("-c", "--config", required=True, type=Path, help="Topology YAML file.")
    p.add_argument("--flow", required=True, help="The flow to mirror.")
    p.add_argument(
        "--until-caught-up", action="store_true", help="Mirror what the source holds at start, commit, exit 0."
    )
    p.add_argument("--checkpoint", type=Path, default=None, help="Spark checkpoint directory of this flow.")
    p.add_argument(
        "--max-records-per-batch", type=_positive, default=None, help="Cap a micro-batch (maxOffsetsPerTrigger)."
    )
    p.add_argument("--metrics-port", type=int, default=None, help="Serve Prometheus metrics on this port.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="More log output (-vv for debug).")
    p.add_argument("--debug", action="store_true", help="Show tracebacks and debug logs.")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    level = logging.DEBUG if args.debug or args.verbose > 1 else logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        return _run(args)
    except MirrorError as exc:
        if args.debug:
            raise
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code


def _run(args: argparse.Namespace) -> int:
    from mirror.cli.signals import stop_on_signals
    from mirror.config import load
    from mirror.spark.checkpoint import default_checkpoint, own_checkpoint
    from mirror.spark.job import run_flow
    from mirror.spark.jvm import describe_paths
    from mirror.spark.session import submitted_master

    config = load(args.config)
    (flow,) = config.select_flows((args.flow,))
    # The driver's checkpoint held before it joins spark-submit's JVM: a second driver of the
    # flow is refused (exit 3) before its SparkContext starts; run_flow holds it again.
    checkpoint = args.checkpoint or default_checkpoint(config, flow)
    with stop_on_signals() as signals, own_checkpoint(checkpoint, flow):
        job = run_flow(
            config,
            flow,
            master=submitted_master(),
            checkpoint=checkpoint,
            until_caught_up=args.until_caught_up,
            max_records_per_batch=args.max_records_per_batch,
            metrics_port=args.metrics_port,
            stop=signals.stop,
            quiet=not args.debug,
            submitted=True,
        )
    print(
        f"flow {flow.name}: {job.records} records mirrored on Spark ({job.skipped} already on the target; "
        f"{describe_paths(job.paths)})",
        file=sys.stderr,
    )
    return ExitCode.INTERRUPTED if signals.interrupted else ExitCode.OK


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not >= 1")
    return value


if __name__ == "__main__":
    raise SystemExit(main())
