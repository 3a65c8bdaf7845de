"""docs/cli.md is what `python -m mirror.cli.reference` prints, and the renderer shows what a user may type."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from mirror.cli import cli
from mirror.cli.options import option
from mirror.cli.reference import REGENERATE, render, walk

ROOT = Path(__file__).resolve().parents[3]


def test_docs_cli_md_is_generated():
    committed = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert committed == render(cli), f"docs/cli.md differs from the commands: regenerate it with `{REGENERATE}`"


def test_the_module_prints_the_reference():
    out = subprocess.run(
        [sys.executable, "-m", "mirror.cli.reference"], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out == render(cli)


def test_every_visible_command_has_a_section():
    text = render(cli)
    paths = [" ".join(("mirror", *path)) for path, _ in walk(cli)]
    assert {"mirror", "mirror run", "mirror canary once", "mirror failover plan", "mirror dev grant"} <= set(paths)
    for p in paths:
        assert f"\n## {p}\n" in text


def test_hidden_options_commands_and_spellings_are_left_out():
    @click.group()
    def root() -> None:
        """Root."""

    @root.command()
    @option("--metrics-port", aliases=["--port"], type=int, default=None, help="Serve here.")
    @click.option("--secret-knob", is_flag=True, hidden=True)
    @click.option("--interval", type=float, default=15.0, show_default=True, help="Seconds.")
    @click.option("--name", "names", multiple=True, envvar="X_NAME", help="A name.")
    def shown(metrics_port: int | None, secret_knob: bool, interval: float, names: tuple[str, ...]) -> None:
        """Shown command.

        Exit 0 when fine.
        """

    @root.command(hidden=True)
    def internal() -> None:
        """Internal."""

    text = render(root)
    assert "## mirror shown" in text and "Exit 0 when fine." in text
    assert "internal" not in text and "secret-knob" not in text and "--port" not in text
    assert "| `--metrics-port INTEGER` |  | Serve here. |" in text
    assert "| `--interval NUMBER` | `15.0` | Seconds. |" in text
    assert "| `--name TEXT` |  | A name. (repeatable; env `X_NAME`) |" in text
    assert render(root) == text  # deterministic
