"""docs/cli.md, rendered from the click commands themselves: `python -m mirror.cli.reference > docs/cli.md`.

Pure: it reads the command tree and returns text, sorted by command path, so the same code
always prints the same file (a unit test compares the committed file with it). Hidden
commands, hidden options and the hidden old spellings of an option are left out.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from typing import Any

import click

from mirror.cli.options import AliasedOption
from mirror.errors import ExitCode

REGENERATE = "python -m mirror.cli.reference > docs/cli.md"

_EXIT_MEANINGS = {
    ExitCode.OK: "done",
    ExitCode.FAILURE: "runtime failure: a cluster did not answer in time, a fatal produce error, a check that failed",
    ExitCode.USAGE: "usage or config error: the message names the flag or key",
    ExitCode.UNSAFE: "refused as unsafe: nothing was changed (e.g. a group still active on the target)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C or SIGTERM): work in flight drained and committed where it applies",
}


def walk(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every visible command under `command` (itself first), depth first, sorted by name."""
    yield path, command
    for name, sub in _subcommands(command):
        yield from walk(sub, (*path, name))


def _subcommands(command: click.Command) -> list[tuple[str, click.Command]]:
    if not isinstance(command, click.Group):
        return []
    ctx = click.Context(command)
    subs = [(name, command.get_command(ctx, name)) for name in sorted(command.list_commands(ctx))]
    return [(name, sub) for name, sub in subs if sub is not None and not sub.hidden]


def shown_opts(param: click.Parameter) -> list[str]:
    """The spellings an option is documented by (hidden old spellings left out)."""
    opts = param.shown_opts() if isinstance(param, AliasedOption) else list(param.opts)
    return opts + list(getattr(param, "secondary_opts", []))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _value(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and (param.is_flag or param.count):
        return ""
    if param.metavar:
        return param.metavar
    if isinstance(param.type, click.Choice):
        return "|".join(str(c) for c in param.type.choices)
    if isinstance(param.type, click.Path):
        return "DIR" if not param.type.file_okay else "FILE"
    name = {"integer range": "INTEGER", "float range": "NUMBER", "float": "NUMBER", "text": "TEXT"}
    return name.get(param.type.name, param.type.name.upper())


def _default(param: click.Option) -> str:
    default: Any = param.default
    if param.is_flag or param.count or default in (None, ()) or callable(default):
        return ""
    if type(default).__name__ == "Sentinel":  # click 8.3+: no default given
        return ""
    return f"`{default}`"


def _option_row(param: click.Option) -> str:
    spelling = ", ".join(shown_opts(param))
    value = _value(param)
    name = f"`{spelling} {value}`" if value else f"`{spelling}`"
    notes = []
    if param.required:
        notes.append("required")
    if param.multiple and "repeatable" not in (param.help or ""):
        notes.append("repeatable")
    envvar = param.envvar if isinstance(param.envvar, str) else ", ".join(param.envvar or ())
    if envvar and envvar not in (param.help or ""):
        notes.append(f"env `{envvar}`")
    help_text = _cell(param.help or "")
    if notes:
        help_text += f" ({'; '.join(notes)})"
    return f"| {name} | {_default(param)} | {help_text} |"


def _usage(path: tuple[str, ...], command: click.Command) -> str:
    args = [
        (a.human_readable_name if a.required else f"[{a.human_readable_name}]") + ("..." if a.nargs == -1 else "")
        for a in command.params
        if isinstance(a, click.Argument)
    ]
    sub = ["COMMAND"] if isinstance(command, click.Group) else []
    return " ".join(["mirror", *path, "[OPTIONS]", *args, *sub])


def render_command(path: tuple[str, ...], command: click.Command) -> list[str]:
    out = [f"## {' '.join(('mirror', *path))}", "", "```", _usage(path, command), "```", ""]
    if command.help:
        out += [inspect.cleandoc(command.help).split("\f")[0].replace("\b\n", "").strip(), ""]
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    if options:
        out += ["| option | default | what it does |", "|---|---|---|", *(_option_row(p) for p in options), ""]
    subs = [f"`{' '.join(('mirror', *path, name))}`" for name, _ in _subcommands(command)]
    if subs:
        out += [f"Commands: {', '.join(subs)}.", ""]
    return out


def render(root: click.Command) -> str:
    """The whole of docs/cli.md."""
    out = [
        "# Command reference",
        "",
        f"Generated from the commands' own definitions by `{REGENERATE}`; do not edit it by hand.",
        "`mirror COMMAND --help` prints the same text.",
        "",
        "Every command exits with one of these statuses:",
        "",
        "| exit | meaning |",
        "|---|---|",
        *(f"| {int(code)} | {_cell(what)} |" for code, what in _EXIT_MEANINGS.items()),
        "",
    ]
    for path, command in walk(root):
        out += render_command(path, command)
    return "\n".join(out).rstrip() + "\n"


def main() -> None:
    from mirror.cli import cli

    sys.stdout.write(render(cli))


if __name__ == "__main__":
    main()
