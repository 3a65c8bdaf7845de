"""`python tools/unit_sizes.py [PATH ...]`: no class over 400 lines, no function over 80.

A class or function that long has grown a second job (CONVENTIONS.md, principle 15). Sizes
are counted as `ast` sees them, from the `class`/`def` line to the unit's last line
(decorators not counted), after `ruff format`. One line per offender; exit 1 if any.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CLASS_LIMIT = 400
FUNCTION_LIMIT = 80


def offenders(path: Path) -> list[str]:
    """`path:line: kind name is N lines (limit L)` for every unit of one file over its limit, in line order."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                stack.append((child, prefix))
                continue
            name = prefix + child.name
            size = (child.end_lineno or child.lineno) - child.lineno + 1
            kind, limit = ("class", CLASS_LIMIT) if isinstance(child, ast.ClassDef) else ("function", FUNCTION_LIMIT)
            if size > limit:
                found.append((child.lineno, f"{path}:{child.lineno}: {kind} {name} is {size} lines (limit {limit})"))
            stack.append((child, name + "."))
    return [line for _, line in sorted(found)]


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [Path("src")]
    files = sorted(f for root in roots for f in ([root] if root.is_file() else root.rglob("*.py")))
    found = [line for f in files for line in offenders(f)]
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
