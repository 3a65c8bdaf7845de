"""No import cycle in mirror, failover and canary: type-only imports count (they are design
dependencies too), and so do imports inside functions.

import-linter's contracts (pyproject.toml) say which layer may import which; none of its
contract types forbids a cycle among siblings it is not told to order (`layers` and
`independence` need every module named, which a new module would escape). So this walks the
graph import-linter builds (grimp) and reports every strongly connected set of modules, with
one import chain round it. Run by `make lint` and by tests/unit/test_layers.py.

Usage: python tools/import_cycles.py [ROOT ...]   (default: the three packages)
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mirror", "failover", "canary")


def cycles(imports: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm, iterative),
    each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in imports:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    members.append(m)
                    if m == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return sorted(found)


def graph(packages: Iterable[str] = PACKAGES) -> grimp.ImportGraph:
    for folder in (ROOT / "src", ROOT):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    return grimp.build_graph(*packages, exclude_type_checking_imports=False, cache_dir=None)


def report(g: grimp.ImportGraph) -> list[str]:
    """One line per cycle: its modules, and a chain from the first back to itself."""
    imports = {m: g.find_modules_directly_imported_by(m) for m in g.modules}
    lines = []
    for members in cycles(imports):
        first = members[0]
        back = min(
            (g.find_shortest_chain(importer=m, imported=first) or (m, first) for m in imports[first] if m in members),
            key=len,
        )
        lines.append(f"{len(members)} modules: {', '.join(members)}\n  e.g. {first} -> {' -> '.join(back)}")
    return lines


def main(argv: list[str]) -> int:
    found = report(graph(argv or PACKAGES))
    for line in found:
        print(f"import cycle: {line}")
    print(f"{len(found)} import cycles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
