"""The site plan's table for people: one line per group, details with -v, totals per flow and site."""

from __future__ import annotations

import json

import pytest

from mirror.cli.failover_site import render_site
from tests.unit.failover.test_site import _site


def test_table_one_line_per_group_then_totals(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _site()
    render_site(plan, json.loads(plan.to_text()), details=False)
    lines = capsys.readouterr().out.splitlines()
    rows = [ln for ln in lines if ln.startswith(("billing ", "payroll "))]
    assert len(rows) == 2
    assert rows[0].split()[:7] == ["billing", "sf", "2", "2", "0", "-", "source-offsets"] and rows[0].endswith(" ok")
    assert (
        rows[1].split()[:7] == ["payroll", "sf", "1", "1", "4", "60s", "checkpoints"]
        and "REFUSED: still active" in rows[1]
    )
    assert "flow f1 (nyc -> sf): 2 groups, 3 partitions, miss 3, re-read <= 4, 1 refused" in lines
    assert "site: 2 groups, 3 partitions, miss 3 (never mirrored), re-read <= 4, 1 refused" in lines
    assert not any("nyc.orders[" in ln for ln in lines)


def test_verbose_lists_every_partition(capsys: pytest.CaptureFixture[str]) -> None:
    plan = _site()
    render_site(plan, json.loads(plan.to_text()), details=True)
    out = capsys.readouterr().out
    assert "    f1: nyc.orders[1] source 10 -> target 7 (miss 2, re-read <= 0)" in out
    assert out.count("nyc.orders[") == 3
