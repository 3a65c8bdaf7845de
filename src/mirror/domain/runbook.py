"""Executable runbooks: the Markdown format `mirror drill` runs, and its expectations (pure).

A runbook stays a document for people. What makes it executable is small and visible:

- a step is a level-2 heading that starts with a number (`## 3. Plan, and read the plan`);
- its fenced `sh` blocks hold `mirror …` commands, one per line (`\\` continues a line,
  `# …` is a comment, `> FILE` saves the output); other fences (`bash`, `yaml`, …) are for
  people and never run;
- an `expect:` line under a block says what its commands must do, e.g.
  `expect: exit 0; .unmirrored == 0; .source_of_truth == "source-offsets"; within 60s`
  (no line means `exit 0`);
- a `manual: ACTION …` line marks what a person does (stop the application, …); in a drill
  the tool plays it with its own workload (`ACTIONS`).

Why this shape: the same file is what the on-call engineer reads at 3 a.m. and what CI
runs every night, so the day a command stops parsing is found by CI, not in the outage.
Nothing here does I/O; `mirror.drill` runs what this module parses.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mirror.errors import UsageError

# What a `manual:` line may ask the drill to play, and what each stands for.
ACTIONS: dict[str, str] = {
    "stop-group": "stop the group's consumers on the primary (the recovery clock starts)",
    "start-group": "start the group's consumers on the DR cluster (the clock stops at their first record)",
    "stop-dr-group": "stop the group's consumers on the DR cluster",
    "kill-primary": "the primary's broker dies (SIGKILL; only a dev broker the drill can prove it started)",
    "start-primary": "the primary comes back (restart the dev broker killed before)",
    "note": "nothing the drill can play (a call, a decision); recorded and skipped",
}
VARIABLES = ("CONFIG", "FLOW", "GROUP", "PRIMARY", "DR")
_OPS = ("==", "!=", "<=", ">=", "<", ">")
_STEP = re.compile(r"^##\s+(\d+)[.)]?\s+(.*\S)\s*$")
_HEADING = re.compile(r"^(#{1,6})\s")
_FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+-]*)")
_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


class RunbookError(UsageError):
    """The runbook itself is wrong: names the file and line (exit 2)."""

    def __init__(self, source: str, line: int, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{source}:{line}: {message}", hint=hint)
        self.source, self.line = source, line


# ---------------------------------------------------------------------------- expectations


@dataclass(frozen=True)
class Condition:
    """`PATH OP VALUE` on the command's --json output; `[*]` in PATH means every element."""

    path: str
    op: str
    value: str  # a JSON literal or a $VARIABLE, resolved when checked

    def __str__(self) -> str:
        return f"{self.path} {self.op} {self.value}"


@dataclass(frozen=True)
class Expectation:
    exits: tuple[int, ...] = (0,)
    conditions: tuple[Condition, ...] = ()
    within: float | None = None  # retry the command until it holds, for this many seconds
    text: str = "exit 0"

    @property
    def needs_json(self) -> bool:
        return bool(self.conditions)


def _split_clauses(text: str) -> list[str]:
    out, cur, quote = [], [], ""
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
            cur.append(ch)
        elif ch == ";":
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if quote:
        raise ValueError(f"unclosed quote in {text!r}")
    out.append("".join(cur).strip())
    return [c for c in out if c]


_PATH_TOKEN = re.compile(r"\.([A-Za-z_][\w-]*)|\[(\d+|\*|[A-Za-z_][\w-]*=[^\]]+)\]")


def _path_tokens(path: str) -> list[str]:
    if not path.startswith("."):
        raise ValueError(f"a path starts with '.' (got {path!r})")
    tokens, pos = [], 0
    if path == ".":
        return []
    while pos < len(path):
        m = _PATH_TOKEN.match(path, pos)
        if not m:
            raise ValueError(f"cannot read the path {path!r} at {path[pos:]!r}")
        tokens.append(m.group(0))
        pos = m.end()
    return tokens


def _duration(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|m)?", text.strip())
    if not m:
        raise ValueError(f"a duration is like 30s or 2m (got {text!r})")
    n = float(m.group(1))
    return n / 1000 if m.group(2) == "ms" else n * 60 if m.group(2) == "m" else n


def parse_expectation(text: str) -> Expectation:
    """`exit 0|2; .a.b == 1; .xs[*].n >= 0; .groups[group=$GROUP].unmirrored == 0; within 60s`."""
    exits: tuple[int, ...] = (0,)
    conditions: list[Condition] = []
    within = None
    for clause in _split_clauses(text):
        if clause.startswith("exit"):
            codes = clause[4:].strip()
            if not re.fullmatch(r"\d+(\s*\|\s*\d+)*", codes):
                raise ValueError(f"`exit` takes codes like `exit 0` or `exit 0|2` (got {clause!r})")
            exits = tuple(int(c) for c in codes.split("|"))
        elif clause.startswith("within"):
            within = _duration(clause[6:])
        elif clause.startswith("."):
            m = re.fullmatch(r"(\S+)\s*(==|!=|<=|>=|<|>)\s*(.+)", clause)
            if not m:
                raise ValueError(f"a condition is `PATH OP VALUE` with OP one of {' '.join(_OPS)} (got {clause!r})")
            path, op, value = m.group(1), m.group(2), m.group(3).strip()
            _path_tokens(path)
            if not _VAR.fullmatch(value):
                try:
                    json.loads(value)
                except ValueError:
                    raise ValueError(f"{value!r} is not a JSON value (strings need double quotes) or a $VARIABLE") from None
            conditions.append(Condition(path, op, value))
        else:
            raise ValueError(f"unknown clause {clause!r} (expected `exit N`, `.path OP value` or `within 60s`)")
    return Expectation(exits, tuple(conditions), within, text.strip())


def _resolve(doc: Any, tokens: Sequence[str], variables: Mapping[str, str]) -> list[Any]:
    """Every value the path reaches (several through `[*]`); KeyError when it reaches none."""
    values = [doc]
    for tok in tokens:
        nxt: list[Any] = []
        for v in values:
            if tok.startswith("."):
                if not isinstance(v, dict) or tok[1:] not in v:
                    raise KeyError(f"no field {tok[1:]!r}")
                nxt.append(v[tok[1:]])
            elif tok == "[*]":
                if not isinstance(v, list):
                    raise KeyError("[*] on something that is not a list")
                nxt.extend(v)
            elif tok[1:-1].isdigit():
                i = int(tok[1:-1])
                if not isinstance(v, list) or i >= len(v):
                    raise KeyError(f"no element {tok}")
                nxt.append(v[i])
            else:
                key, _, want = tok[1:-1].partition("=")
                want = substitute(want.strip().strip('"'), variables)
                found = [e for e in (v if isinstance(v, list) else []) if isinstance(e, dict) and str(e.get(key)) == want]
                if not found:
                    raise KeyError(f"no element with {key}={want}")
                nxt.append(found[0])
        values = nxt
    return values


def _compare(actual: Any, op: str, expected: Any) -> bool:
    if op == "==":
        return bool(actual == expected)
    if op == "!=":
        return bool(actual != expected)
    if not isinstance(actual, (int, float)) or isinstance(actual, bool) or not isinstance(expected, (int, float)):
        return False
    return {"<": actual < expected, "<=": actual <= expected, ">": actual > expected, ">=": actual >= expected}[op]


def check(expect: Expectation, exit_code: int, output: str, variables: Mapping[str, str] | None = None) -> list[str]:
    """What did not hold, one sentence each; empty when the command did what was expected."""
    variables = variables or {}
    failures = []
    if exit_code not in expect.exits:
        failures.append(f"exit {exit_code}, expected {'|'.join(map(str, expect.exits))}")
    if not expect.conditions:
        return failures
    try:
        doc = json.loads(output)
    except ValueError:
        return [*failures, "the output is not JSON (add --json to the command)"]
    for cond in expect.conditions:
        var = _VAR.fullmatch(cond.value)
        if var:
            want: Any = variables.get(var.group(1) or var.group(2), cond.value)
        else:
            want = json.loads(cond.value)
        try:
            values = _resolve(doc, _path_tokens(cond.path), variables)
        except KeyError as exc:
            failures.append(f"{cond}: {exc.args[0]}")
            continue
        bad = [v for v in values if not _compare(v, cond.op, want)]
        if bad or not values:
            got = json.dumps(bad[0] if bad else None)
            failures.append(f"{cond}: got {got}" + (f" ({len(bad)} of {len(values)} elements)" if len(values) > 1 else ""))
    return failures


# ---------------------------------------------------------------------------- commands


def substitute(text: str, variables: Mapping[str, str]) -> str:
    """`$NAME` / `${NAME}` from `variables`; unknown names are left as they are."""
    return _VAR.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), text)


def variables_in(text: str) -> set[str]:
    return {m.group(1) or m.group(2) for m in _VAR.finditer(text)}


@dataclass(frozen=True)
class Command:
    """One `mirror …` line: its words after `mirror`, and the file `> FILE` sends its output to."""

    line: int
    text: str
    argv: tuple[str, ...]
    redirect: str | None = None

    def resolved(self, variables: Mapping[str, str]) -> tuple[list[str], str | None]:
        argv = [substitute(a, variables) for a in self.argv]
        return argv, substitute(self.redirect, variables) if self.redirect else None


def parse_command(text: str, line: int, source: str, *, strict: bool = True) -> Command | None:
    """A shell line as a `mirror` command; None for a non-mirror line when not `strict`.

    Only what runbooks need: words, quotes, `# comment`, `> FILE`. Pipes and `||` are
    people's shell: strict (drill) mode refuses them, lenient mode checks what comes before.
    """
    try:
        words = shlex.split(text, comments=True)
    except ValueError as exc:
        raise RunbookError(source, line, f"cannot split the command line: {exc}") from None
    if not words:
        return None
    if words[0] != "mirror":
        if strict:
            raise RunbookError(source, line, f"only `mirror` commands run in a drill (got {words[0]!r})",
                               hint="fence commands for people as ```bash, not ```sh")
        return None
    for i, w in enumerate(words):
        if w in ("|", "||", "&&", ";", "&") or w.startswith("|"):
            if strict:
                raise RunbookError(source, line, f"{w!r}: a drill step runs one `mirror` command per line, no shell operators",
                                   hint="use an `expect:` line instead of `|| true` or a pipe")
            words = words[:i]
            break
    redirect = None
    if ">" in words:
        i = words.index(">")
        if i + 2 != len(words):
            raise RunbookError(source, line, "`> FILE` must end the command")
        redirect, words = words[i + 1], words[:i]
    return Command(line, text.strip(), tuple(words[1:]), redirect)


# ---------------------------------------------------------------------------- the document


@dataclass(frozen=True)
class Block:
    """A fenced `sh` block of a step and what its commands must do."""

    line: int
    commands: tuple[Command, ...]
    expect: Expectation = Expectation()
    expect_line: int | None = None


@dataclass(frozen=True)
class Manual:
    line: int
    action: str
    text: str


Item = Block | Manual


@dataclass(frozen=True)
class Step:
    number: int
    title: str
    line: int
    items: tuple[Item, ...]

    @property
    def commands(self) -> list[Command]:
        return [c for i in self.items if isinstance(i, Block) for c in i.commands]


@dataclass(frozen=True)
class Runbook:
    source: str
    title: str
    steps: tuple[Step, ...]
    executable: bool  # has `expect:` or `manual:` lines: a drill, not only a document
    other_commands: tuple[Command, ...] = ()  # `mirror` lines outside steps (checked, never run)

    def step(self, number: int) -> Step:
        for s in self.steps:
            if s.number == number:
                return s
        raise KeyError(number)

    def commands(self) -> list[Command]:
        return [c for s in self.steps for c in s.commands] + list(self.other_commands)


@dataclass
class _Open:
    number: int
    title: str
    line: int
    items: list[Item] = field(default_factory=list)


def _logical_lines(lines: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """Join `\\`-continued lines; keep the number of the first."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for n, text in lines:
        if not buf:
            start = n
        if text.rstrip().endswith("\\"):
            buf += text.rstrip()[:-1] + " "
            continue
        out.append((start, buf + text))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def parse_runbook(text: str, source: str) -> Runbook:
    """The steps of a runbook; `RunbookError` (file:line: what) for anything a drill cannot run."""
    lines = text.splitlines()
    executable = any(re.match(r"^\s*(expect|manual):", ln) for ln in lines)
    strict = executable
    title = next((ln.lstrip("# ").strip() for ln in lines if ln.startswith("# ")), source)
    steps: list[_Open] = []
    other: list[Command] = []
    current: _Open | None = None
    fence: tuple[str, str, int] | None = None  # (marker, language, first line)
    body: list[tuple[int, str]] = []

    def close_step() -> None:
        if current is not None and strict and not current.items:
            raise RunbookError(source, current.line, f"step {current.number} ({current.title!r}) has no ```sh command block and no `manual:` line",
                               hint="add the step's `mirror` commands in a ```sh block, or mark it `manual: note …`")

    for n, raw in enumerate(lines, start=1):
        if fence is not None:
            if raw.strip().startswith(fence[0]) and raw.strip().strip(fence[0][0]) == "":
                marker, lang, first = fence
                fence = None
                if lang == "sh":  # only sh blocks run; other fences are for people, never checked
                    _close_sh_block(body, first, current, other, source, strict)
            else:
                body.append((n, raw))
            continue
        m = _FENCE.match(raw)
        if m:
            fence, body = (m.group(1), m.group(2), n), []
            continue
        if _HEADING.match(raw):
            level = len(_HEADING.match(raw).group(1))  # type: ignore[union-attr]
            if level <= 2:
                close_step()
                sm = _STEP.match(raw)
                current = None
                if sm:
                    current = _Open(int(sm.group(1)), sm.group(2), n)
                    if any(s.number == current.number for s in steps):
                        raise RunbookError(source, n, f"step {current.number} appears twice")
                    steps.append(current)
            continue
        stripped = raw.strip()
        if stripped.startswith("expect:"):
            _attach_expectation(current, stripped[len("expect:"):], n, source)
        elif stripped.startswith("manual:"):
            _add_manual(current, stripped[len("manual:"):], n, source)
    if fence is not None:
        raise RunbookError(source, fence[2], "a ``` fence that is never closed")
    close_step()
    if strict and not steps:
        raise RunbookError(source, 1, "no numbered steps (`## 1. Title`)")
    out = tuple(Step(s.number, s.title, s.line, tuple(s.items)) for s in steps)
    if strict:
        for prev, nxt in zip(out, out[1:]):
            if nxt.number <= prev.number:
                raise RunbookError(source, nxt.line, f"step {nxt.number} after step {prev.number}: numbers must increase")
    return Runbook(source, title, out, executable, tuple(other))


def _close_sh_block(body: list[tuple[int, str]], first: int, current: _Open | None, other: list[Command], source: str, strict: bool) -> None:
    """An ```sh block's `mirror` commands: the open step's next item, or checked-only commands outside steps."""
    cmds = [c for ln, t in _logical_lines(body) if (c := parse_command(t, ln, source, strict=strict and current is not None)) is not None]
    if current is None:
        other.extend(cmds)
    elif cmds:
        current.items.append(Block(first, tuple(cmds)))
    elif strict:
        raise RunbookError(source, first, "an ```sh block with no `mirror` command")


def _attach_expectation(current: _Open | None, text: str, n: int, source: str) -> None:
    """An `expect:` line becomes the expectation of the ```sh block right before it."""
    if current is None or not current.items or not isinstance(current.items[-1], Block):
        raise RunbookError(source, n, "`expect:` must follow the ```sh block it is about, inside a numbered step")
    block = current.items[-1]
    if block.expect_line is not None:
        raise RunbookError(source, n, f"a second `expect:` for the block of line {block.line}")
    try:
        exp = parse_expectation(text)
    except ValueError as exc:
        raise RunbookError(source, n, f"expectation does not parse: {exc}") from None
    if exp.needs_json and len(block.commands) != 1:
        raise RunbookError(source, n, "conditions on --json output need a block with exactly one command",
                           hint="split the block so the command the conditions are about stands alone")
    if exp.needs_json and "--json" not in block.commands[0].argv:
        raise RunbookError(source, n, f"conditions on the output of a command without --json (line {block.commands[0].line})")
    current.items[-1] = Block(block.line, block.commands, exp, n)


def _add_manual(current: _Open | None, text: str, n: int, source: str) -> None:
    """A `manual:` line: an action the drill plays in place of the owner."""
    if current is None:
        raise RunbookError(source, n, "`manual:` outside a numbered step")
    words = text.split(None, 1)
    action = words[0].rstrip(":.,") if words else ""
    if action not in ACTIONS:
        raise RunbookError(source, n, f"unknown manual action {action!r}", hint=f"one of: {', '.join(ACTIONS)}")
    current.items.append(Manual(n, action, words[1].strip() if len(words) > 1 else ""))


# ---------------------------------------------------------------------------- what a failover cost


@dataclass(frozen=True)
class Cost:
    """Records lost and duplicated for the drilled group, from sequence numbers.

    `produced[p]`: the sequence numbers the primary acknowledged on partition p;
    `before[p]` / `after[p]`: what the group read on the primary before the cutover and on
    the DR cluster after it. Lost: acknowledged, never read by the group on either side.
    Duplicated: every read beyond the first of a sequence number.
    """

    produced: int
    read_before: int
    read_after: int
    lost: int
    duplicated: int
    per_partition: dict[int, dict[str, int]]


def cost(produced: Mapping[int, Sequence[int]], before: Mapping[int, Sequence[int]], after: Mapping[int, Sequence[int]]) -> Cost:
    parts: dict[int, dict[str, int]] = {}
    for p in sorted(set(produced) | set(before) | set(after)):
        b, a, made = list(before.get(p, ())), list(after.get(p, ())), set(produced.get(p, ()))
        seen = set(b) | set(a)
        parts[p] = {"produced": len(made), "read_before": len(b), "read_after": len(a),
                    "lost": len(made - seen), "duplicated": len(b) + len(a) - len(seen)}
    total = {k: sum(v[k] for v in parts.values()) for k in ("produced", "read_before", "read_after", "lost", "duplicated")}
    return Cost(total["produced"], total["read_before"], total["read_after"], total["lost"], total["duplicated"], parts)
