"""The layer rules of docs/design.md, enforced: import-linter's contracts in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert lint, "lint-imports not found: run `make setup` (import-linter is in the test extra)"
    out = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_no_import_cycle_in_the_module_graph():
    """Type-only imports and imports inside functions count (tools/import_cycles.py)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "import_cycles.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_the_cycle_check_finds_every_cycle_and_only_cycles():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from import_cycles import cycles
    finally:
        sys.path.remove(str(ROOT / "tools"))
    chain = {"a": {"b"}, "b": {"c"}, "c": set()}
    assert cycles(chain) == []
    assert cycles({**chain, "c": {"a"}}) == [["a", "b", "c"]]
    two = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c", "x"}}  # "x": outside the graph
    assert cycles(two) == [["a", "b"], ["c", "d"]]
