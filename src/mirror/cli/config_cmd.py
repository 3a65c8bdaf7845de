"""`mirror config`: about the topology file itself (its reference, generated from the model)."""

from __future__ import annotations

import click

from mirror.config_reference import render


@click.group()
def config() -> None:
    """About the topology file itself."""


@config.command()
def reference() -> None:
    """Print the reference of every config key (docs/config.md): type, default, what it does.

    Generated from the config model: `mirror config reference > docs/config.md`.
    """
    click.echo(render(), nl=False)
