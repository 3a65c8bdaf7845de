"""Options whose old spellings still parse but are no longer shown.

One meaning has one name across commands (`--metrics-port`, `--out`); a script written
against an older spelling keeps working, while `--help`, error messages and docs/cli.md
show only the current name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


class AliasedOption(click.Option):
    """A click option that also accepts `aliases`, left out of help and error messages."""

    def __init__(self, param_decls: Sequence[str], *, aliases: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__([*param_decls, *aliases], **kwargs)
        self.aliases = tuple(aliases)

    @contextmanager
    def _shown(self) -> Iterator[None]:
        opts = self.opts
        self.opts = [o for o in opts if o not in self.aliases]
        try:
            yield
        finally:
            self.opts = opts

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        with self._shown():
            return super().get_help_record(ctx)

    def get_error_hint(self, ctx: click.Context | None) -> str:
        with self._shown():
            return super().get_error_hint(ctx)  # type: ignore[arg-type]  # ctx may be None since click 8.4

    def shown_opts(self) -> list[str]:
        return [o for o in self.opts if o not in self.aliases]


def option(*param_decls: str, aliases: Sequence[str] = (), **kwargs: Any) -> Callable[[F], F]:
    """`click.option` with hidden old spellings: `option("--out", "out", aliases=["--report"])`."""
    return click.option(*param_decls, cls=AliasedOption, aliases=aliases, **kwargs)
