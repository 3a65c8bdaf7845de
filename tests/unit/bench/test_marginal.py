"""bench/marginal.py: records per CPU second between two sizes, per contender and rep."""

from __future__ import annotations

import pytest

from bench import marginal


def _runs(*cpu: float | None) -> list[dict]:
    return [{"rep": i, "ok": c is not None, "cpu_s": c} for i, c in enumerate(cpu)]


def test_the_records_between_the_sizes_over_the_cpu_they_cost_in_the_same_rep():
    # spark: 22.66 CPU s at 300k, 30.97 at 1M (rep 0); 24.0 and 30.0 (rep 1)
    got = marginal.per_rep(_runs(30.97, 30.0), _runs(22.66, 24.0), 1_000_000, 300_000)
    assert got == {0: pytest.approx(700_000 / 8.31), 1: pytest.approx(700_000 / 6.0)}


def test_a_rep_missing_a_size_or_costing_less_at_the_larger_size_gives_no_figure():
    got = marginal.per_rep(_runs(30.0, None, 20.0), _runs(25.0, 24.0, 21.0), 1_000_000, 300_000)
    assert list(got) == [0]
    assert marginal.per_rep(_runs(30.0), _runs(25.0), 300_000, 300_000) == {}
    assert marginal.per_rep(_runs(30.0), _runs(25.0), 1_000_000, None) == {}


def test_only_contenders_that_ran_the_smaller_topic_have_figures():
    got = marginal.per_contender(
        {"mirror": _runs(5.0), "spark": _runs(31.0)}, {"spark": _runs(24.0)}, 1_000_000, 300_000
    )
    assert set(got) == {"spark"} and got["spark"][0] == pytest.approx(100_000)
