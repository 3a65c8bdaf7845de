"""Every `mirror COMMAND [SUB] --option` the docs show exists, spelled as `--help` spells it.

Read from README.md, docs/ and runbooks/: code blocks (shell comments dropped, `\\` line
continuations joined) and inline code spans. A command line ends at a pipe, `;`, `&&`, a
redirection or a comment. An old spelling kept as a hidden alias still parses, but the docs
must use the name `--help` shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click

from mirror.cli import cli
from mirror.cli.options import AliasedOption
from mirror.cli.reference import shown_opts

ROOT = Path(__file__).resolve().parents[3]
_FENCE = re.compile(r"^\s*(```|~~~)")
# `mirror` as a program: where a shell command starts (the line's start, after `$ `, `&&`, `|`,
# `;` or `$(`), maybe after VAR=value words, a path (.venv/bin/mirror) or `python -m`.
_PROGRAM = re.compile(r"(?:^|&&|\|\||[;|`]|\$\()\s*(?:\$\s+)?(?:[A-Z_]+=\S*\s+)*(?:\S*/bin/|python3? -m )?mirror(?=\s)")
_END = re.compile(r"\s(?:\||;|&&|>|2>)\s|`|\)$|\)\s")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "runbooks").glob("*.md"))]


def code_texts(text: str) -> Iterator[tuple[int, str]]:
    """(line, text) of each code-block line (continuations joined) and each inline code span."""
    fenced, pending, start = False, "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            if not pending:
                start = n
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            yield start, re.sub(r"(^|\s)#.*", "", pending + line)  # a shell comment is prose
            pending = ""
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield n, span


def invocations(code: str) -> Iterator[list[str]]:
    """The words after each `mirror` run in a piece of code, up to the end of that command."""
    for m in _PROGRAM.finditer(code):
        rest = code[m.end() :]
        end = _END.search(rest)
        # A quoted word is a value (`--command 'failover plan --from'`), never an option.
        yield re.sub(r"'[^']*'|\"[^\"]*\"", "VALUE", rest[: end.start() if end else len(rest)]).split()


def _option_words(words: list[str]) -> list[str]:
    out = []
    for w in words:
        w = w.strip("[](){}|,.'\"")
        if re.fullmatch(r"--?[A-Za-z][A-Za-z0-9-]*(=.*)?", w):
            out.append(w.split("=", 1)[0])
    return out


def check(words: list[str]) -> list[str]:
    """What is wrong with `mirror WORDS` against the click tree (nothing: [])."""
    cmd: click.Command = cli
    path = ["mirror"]
    commands = [cli]
    rest = list(words)
    while rest and rest[0].startswith("-") and rest[0] in ("--debug", "-v", "-vv", "-vvv", "--verbose"):
        rest.pop(0)  # the root's options before the command
    while isinstance(cmd, click.Group) and rest and re.fullmatch(r"[a-z][a-z0-9-]*", rest[0]):
        sub = cmd.get_command(click.Context(cmd), rest[0])
        if sub is None:
            return [f"`{' '.join(path)} {rest[0]}`: no such command"]
        path.append(rest.pop(0))
        cmd = sub
        commands.append(cmd)
    problems = []
    known: dict[str, click.Parameter] = {"-h": cli, "--help": cli}  # type: ignore[dict-item]
    for c in commands:
        for p in c.params:
            for o in [*p.opts, *getattr(p, "secondary_opts", [])]:
                known.setdefault(o, p)
    for o in _option_words(rest):
        if re.fullmatch(r"-v+", o):
            o = "-v"
        p = known.get(o)
        if p is None:
            problems.append(f"`{' '.join(path)} {o}`: no such option")
        elif isinstance(p, AliasedOption) and o in p.aliases:
            problems.append(f"`{' '.join(path)} {o}`: an old spelling; write {'/'.join(shown_opts(p))}")
    return problems


def test_docs_name_only_commands_and_options_that_exist():
    found = []
    for path in doc_files():
        rel = path.relative_to(ROOT)
        for line, code in code_texts(path.read_text(encoding="utf-8")):
            for words in invocations(code):
                found += [f"{rel}:{line}: {p}" for p in check(words)]
    assert not found, "docs name what --help does not have:\n" + "\n".join(sorted(set(found)))


def test_the_check_finds_what_is_wrong():
    assert check(["run", "-c", "x.yaml", "--metrics-port", "9", "--until-caught-up"]) == []
    assert check(["-v", "failover", "plan", "--flow", "f", "[--json]", "(--translate", "|", "--at", "TIME)"]) == []
    assert check(["failover", "nope"]) == ["`mirror failover nope`: no such command"]
    assert check(["lag", "--wach"]) == ["`mirror lag --wach`: no such option"]
    assert check(["monitor", "--port", "9"]) == ["`mirror monitor --port`: an old spelling; write --metrics-port"]
    text = "```\nmirror lag -c c.yaml \\\n  --json | jq .  # mirror lag --nope\n```\nRun `mirror topics --check`.\n"
    assert [list(invocations(code)) for _, code in code_texts(text)] == [
        [["lag", "-c", "c.yaml", "--json"]],
        [["topics", "--check"]],
    ]
