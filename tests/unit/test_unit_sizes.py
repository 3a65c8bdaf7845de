"""tools/unit_sizes.py: the check `make lint` runs so no class grows over 400 lines or function over 80."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "unit_sizes.py"


def _function(name: str, lines: int, indent: str = "") -> str:
    """A function of exactly `lines` lines (its `def` line included)."""
    return f"{indent}def {name}():\n" + f"{indent}    x = 1\n" * (lines - 1)


def _check(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *map(str, paths)], capture_output=True, text=True, timeout=30)


def test_units_at_their_limits_pass(tmp_path: Path) -> None:
    body = "".join(_function(f"m{i}", 80, "    ") for i in range(4)) + "    y = 2\n" * 79
    (tmp_path / "ok.py").write_text("@decorated\n" * 5 + _function("f", 80) + "class C:\n" + body)
    assert sum(1 for _ in (tmp_path / "ok.py").open()) - 5 - 80 == 400  # after 5 decorators and f: a class of 400

    done = _check(tmp_path)

    assert (done.returncode, done.stdout) == (0, "")


def test_each_offender_is_named_on_one_line_with_its_size(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        _function("short", 3)
        + "class Big:\n"
        + _function("long_method", 81, "    ")
        + "    x = 1\n" * 319
        + _function("too_long", 90)
    )

    done = _check(tmp_path)

    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"{pkg / 'a.py'}:4: class Big is 401 lines (limit 400)",
        f"{pkg / 'a.py'}:5: function Big.long_method is 81 lines (limit 80)",
        f"{pkg / 'a.py'}:405: function too_long is 90 lines (limit 80)",
    ]
