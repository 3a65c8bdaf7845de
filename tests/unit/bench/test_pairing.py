"""bench/pairing.py: each rep's order, and ratios taken within a rep."""

from __future__ import annotations

import itertools

import pytest

from bench import pairing

KEYS = ["mirror", "plain-spark", "spark"]


def test_the_order_is_forward_then_backward_and_rotates_every_two_reps():
    assert [pairing.rep_order(KEYS, rep) for rep in range(4)] == [
        ["mirror", "plain-spark", "spark"],
        ["spark", "plain-spark", "mirror"],
        ["plain-spark", "spark", "mirror"],
        ["mirror", "spark", "plain-spark"],
    ]
    assert pairing.rep_order(KEYS, 5) == pairing.rep_order(KEYS, 5)  # deterministic
    assert pairing.rep_order([], 3) == []


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_every_pair_swaps_places_from_one_rep_to_the_next(n: int):
    items = list(range(n))
    for rep in range(2 * n):
        this, following = pairing.rep_order(items, rep), pairing.rep_order(items, rep + 1)
        assert sorted(this) == items  # each contender once per rep
        if rep % 2 == 0:  # a rep and its reversed successor: linear drift cancels for every pair
            for a, b in itertools.combinations(items, 2):
                assert (this.index(a) < this.index(b)) != (following.index(a) < following.index(b))


@pytest.mark.parametrize("n", [2, 3, 4])
def test_over_enough_reps_every_contender_runs_first(n: int):
    items = list(range(n))
    assert {pairing.rep_order(items, rep)[0] for rep in range(2 * n)} == set(items)


def _runs(*values: float | None) -> list[dict]:
    return [{"rep": i, "ok": v is not None, "records_per_s": v} for i, v in enumerate(values)]


def test_ratios_pair_the_runs_of_one_rep_and_leave_out_a_rep_either_failed():
    a = pairing.by_rep(_runs(100.0, 50.0, None, 90.0), "records_per_s")
    b = pairing.by_rep(_runs(80.0, 40.0, 70.0, None), "records_per_s")
    assert pairing.ratios(a, b) == [1.25, 1.25]


def test_the_log_median_is_symmetric_and_robust():
    values = [1.1, 1.3, 0.9, 5.0]
    up = pairing.log_median(values)
    down = pairing.log_median([1 / v for v in values])
    assert up is not None and down is not None
    assert up * down == pytest.approx(1.0)  # a/b is exactly 1/(b/a)
    assert up == pytest.approx((1.1 * 1.3) ** 0.5)  # the middle two; the outlier does not pull
    assert pairing.log_median([2.0, 3.0, 100.0]) == pytest.approx(3.0)
    assert pairing.log_median([]) is None


def test_differences_per_rep():
    a, b = {0: 900.0, 1: 1300.0, 2: 5.0}, {0: 200.0, 1: 100.0}
    assert pairing.differences(a, b) == [700.0, 1200.0]
    assert pairing.median(pairing.differences(a, b)) == 950.0
