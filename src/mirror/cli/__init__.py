"""The `mirror` command: a thin layer over the core.

Errors are handled here and only here: a `MirrorError` becomes `Error: …` on stderr and
its exit code; a traceback is shown only with `--debug`. Command groups live in their own
modules; `failover` and `canary` are separate packages mounted at the root.

A command passes through: this module (the root group, `AppContext`: config loaded on first
use, errors turned into exit codes), then `options` (old option spellings) and `times`
(`--at TIME`), then its own module, in the order an operator meets them: `validate`,
`topics`, `acls`; `run` and `spark` (`spark_app`: what spark-submit runs), with `signals`
for the commands that run until stopped; `lag`, `monitor`, `audit`, `canary`; `failover`
and `failover_site` (the site forms), `drill`, `import_mm2`; `dev` for local clusters.
`reference` renders docs/cli.md from the commands.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from mirror import config as cfg
from mirror.errors import ExitCode, MirrorError

log = logging.getLogger("mirror")


class AppContext:
    """Built once per invocation; the config is loaded (and validated) on first use."""

    def __init__(self, debug: bool, verbose: int = 0) -> None:
        self.debug = debug
        self.verbose = verbose  # handed on to `run --workers` children, which log on their own
        self._config: cfg.Config | None = None
        self.config_path: Path | None = None
        self.config_warnings: list[cfg.ConfigWarning] = []

    def config(self, path: str | Path, *, offline: bool = False, warn: bool = True) -> cfg.Config:
        """The file, validated (`offline`: see `config.parse`); its warnings are logged unless
        `warn` is False (the caller prints `config_warnings` itself)."""
        if self._config is None or self.config_path != Path(path):
            self.config_warnings = []
            self._config = cfg.load(path, offline=offline, warnings=self.config_warnings)
            self.config_path = Path(path)
            for w in self.config_warnings if warn else ():
                log.warning("%s: %s", path, w)
        return self._config


pass_app = click.make_pass_decorator(AppContext)

config_option = click.option(
    "-c",
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="MIRROR_CONFIG",
    help="Topology YAML file (env MIRROR_CONFIG).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def setup_logging(verbose: int, debug: bool) -> None:
    level = logging.DEBUG if debug or verbose > 1 else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # WARNING stays the default (a one-shot command's stderr is for what went wrong), but a
    # daemon's start, rebalance and stop lines show at every level: a healthy `mirror run`
    # whose logs are empty looks like a dead one (mirror.engine.lifecycle).
    logging.getLogger("mirror.lifecycle").setLevel(min(level, logging.INFO))
    if not debug and verbose < 3:
        # librdkafka's per-retry connection chatter; the project reports reachability itself.
        logging.getLogger("mirror.librdkafka").setLevel(logging.WARNING)
        # The Cassandra driver logs a refused login or an unreachable node with a traceback
        # per attempt; the offset store reports it once, as one line.
        logging.getLogger("cassandra").setLevel(logging.CRITICAL)


class _LazyGroup(click.Group):
    """Imports a subcommand's module only when it is used (fast `--help`, no Spark import for `lag`)."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self._lazy:
            module, _, attr = self._lazy[name].partition(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


_COMMANDS = {
    "validate": "mirror.cli.validate:validate",
    "acls": "mirror.cli.acls:acls",
    "dev": "mirror.cli.dev:dev",
    "lag": "mirror.cli.lag:lag",
    "monitor": "mirror.cli.monitor:monitor",
    "canary": "mirror.cli.canary:canary",
    "run": "mirror.cli.run:run",
    "topics": "mirror.cli.topics:topics",
    "failover": "mirror.cli.failover:failover",
    "failback": "mirror.cli.failover:failback",
    "drill": "mirror.cli.drill:drill",
    "spark": "mirror.cli.spark:spark",
    "audit": "mirror.cli.audit:audit",
    "import-mm2": "mirror.cli.import_mm2:import_mm2",
    "config": "mirror.cli.config_cmd:config",
}


@click.group(cls=_LazyGroup, lazy=_COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="MIRROR_DEBUG", help="Show tracebacks and debug logs.")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.version_option(package_name="mirror", prog_name="mirror")
@click.pass_context
def cli(ctx: click.Context, debug: bool, verbose: int) -> None:
    """Mirror Kafka topics between clusters and fail consumer groups over between them."""
    setup_logging(verbose, debug)
    ctx.obj = AppContext(debug, verbose)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script and `python -m mirror`; returns the exit status."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:]) or os.environ.get("MIRROR_DEBUG") == "1"
    try:
        rv = cli.main(args=list(argv) if argv is not None else None, prog_name="mirror", standalone_mode=False)
        return int(rv) if isinstance(rv, int) else ExitCode.OK
    except MirrorError as exc:
        if debug:
            raise
        click.echo(f"Error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("Interrupted.", err=True)
        return ExitCode.INTERRUPTED
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        return ExitCode.INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code


def entry() -> None:
    """The process's entry (the `mirror` script, `python -m mirror`): `main`, then an exit that
    skips the C library's exit handlers.

    A librdkafka client still alive at exit (one held by a daemon thread, which Python never
    frees) keeps its broker threads running while OpenSSL's exit handler frees what they use:
    on a TLS listener the process then dies of SIGSEGV after printing its answer, and the
    operator reads -11 instead of the exit code (seen once in CI, `failover plan` refused a
    grant). Every command has finished its work when `main` returns (runs drained, committed,
    their Spark session stopped), so only buffers are left to flush.
    """
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`mirror lag | head`) has nothing left to take
            pass
    os._exit(code)
