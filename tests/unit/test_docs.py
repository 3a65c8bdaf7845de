"""README.md, docs/ and runbooks/ stay scannable: no sentence over 60 words, no bullet over 120.

What counts, so a writer can predict the checker:
- fenced code blocks (```) are skipped, and so are headings;
- an inline code span or a link counts as the words of its visible text (a span is one word);
- a table row counts cell by cell: each cell is text of its own;
- a bullet or numbered item runs to the next item, blank line or heading; its words are
  counted in total, and each of its sentences on its own;
- a sentence ends at `.`, `!`, `?` or `:` followed by a space and a capital letter, a digit, a
  backtick, a parenthesis or a quote (so "e.g. foo" does not end one), or at the end of its
  paragraph, bullet or cell.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_SENTENCE = 60
MAX_BULLET = 120


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "runbooks").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    """A run of prose: a paragraph, a bullet or a table cell, with the line it starts on."""

    kind: str  # "paragraph", "bullet" or "cell"
    line: int
    text: str


_ITEM = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+")
_FENCE = re.compile(r"^\s*(```|~~~)")


def blocks(text: str) -> Iterator[Block]:
    """The prose blocks of a Markdown text, code blocks and headings left out."""
    kind, start, lines = "", 0, []  # the block being gathered
    fenced = False

    def flush() -> Iterator[Block]:
        if lines:
            yield Block(kind, start, " ".join(s.strip() for s in lines))

    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            yield from flush()
            lines = []
            fenced = not fenced
            continue
        if fenced:
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("|"):
            yield from flush()
            lines = []
            if stripped.startswith("|") and not re.fullmatch(r"\|[\s:|-]*\|?", stripped):
                for cell in _cells(stripped):
                    yield Block("cell", n, cell)
            continue
        item = _ITEM.match(line)
        if item:
            yield from flush()
            kind, start, lines = "bullet", n, [line[item.end() :]]
        elif lines:
            lines.append(line)
        else:
            kind, start, lines = "paragraph", n, [line]
    yield from flush()


def _cells(row: str) -> list[str]:
    # A `|` inside a code span is not a cell border.
    row = re.sub(r"`[^`]*`", lambda m: m.group(0).replace("|", "/"), row)
    return [c.strip() for c in row.strip().strip("|").split("|") if c.strip()]


def _plain(text: str) -> str:
    """Code spans become one word, links their text, emphasis marks go."""
    text = re.sub(r"`[^`]*`", "CODE", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return text.replace("**", "").replace("__", "")


_END = re.compile(r"(?<=[.!?:])\s+(?=[A-Z0-9`(\"'])")


def sentences(text: str) -> list[str]:
    return [s for s in _END.split(_plain(text)) if s.strip()]


def words(text: str) -> int:
    return len(_plain(text).split())


def offenders(text: str, name: str) -> list[str]:
    found = []
    for b in blocks(text):
        if b.kind == "bullet" and words(b.text) > MAX_BULLET:
            found.append(f"{name}:{b.line}: a bullet of {words(b.text)} words (at most {MAX_BULLET}): {b.text[:70]}...")
        for s in sentences(b.text):
            n = len(s.split())
            if n > MAX_SENTENCE:
                found.append(f"{name}:{b.line}: a sentence of {n} words (at most {MAX_SENTENCE}): {s[:70]}...")
    return found


def test_docs_scan():
    """Long explanations become short paragraphs, tables or numbered steps."""
    found = [o for p in doc_files() for o in offenders(p.read_text(encoding="utf-8"), str(p.relative_to(ROOT)))]
    assert not found, f"{len(found)} too long:\n" + "\n".join(found)


def test_the_checker_counts_what_it_says():
    text = "\n".join(
        [
            "# A heading " + "word " * 70,
            "",
            "```",
            "code " * 200,
            "```",
            "",
            "Short one, e.g. this. Another `a b c d` one: Then a third.",
            "",
            "- a bullet",
            "  that continues",
            "- another",
            "",
            "| a cell | `x | y` |",
            "|---|---|",
        ]
    )
    got = list(blocks(text))
    assert [(b.kind, b.line) for b in got] == [
        ("paragraph", 7),
        ("bullet", 9),
        ("bullet", 11),
        ("cell", 13),
        ("cell", 13),
    ]
    assert got[1].text == "a bullet that continues"
    assert sentences(got[0].text) == ["Short one, e.g. this.", "Another CODE one:", "Then a third."]
    assert words(got[0].text) == 10


@pytest.mark.parametrize(("length", "bad"), [(MAX_SENTENCE, False), (MAX_SENTENCE + 1, True)])
def test_a_long_sentence_is_found(length, bad):
    text = "Word " * (length - 1) + "end.\n\n- " + "A short one. " * (MAX_BULLET // 3) + "\n"
    assert bool(offenders(text, "probe.md")) == bad
    many = "- " + "X. " * (MAX_BULLET + 1) + "\n"
    assert offenders(many, "probe.md") == [f"probe.md:1: a bullet of 121 words (at most {MAX_BULLET}): {many[2:72]}..."]
