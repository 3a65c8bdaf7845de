"""Which contender runs when in each rep, and how the runs of one rep are compared.

A shared machine drifts (other jobs start and stop, the brokers warm up, page cache fills),
so a contender that always runs first, or always right after another, is always measured at
the same point of that drift. Each rep therefore runs the contenders in a different order:
forward in even reps, backward in odd ones (so every pair swaps places from one rep to the
next and a linear drift cancels over two reps), the whole order rotated by one every two reps
(so over more reps every contender also takes every position, the first one included).

A ratio between two contenders is taken per rep (the two runs of one rep saw the same part of
the drift), then summarised as the median in log space: for an odd count the middle ratio,
for an even count the geometric mean of the middle two. Unlike a ratio of medians it never
compares one contender's quiet rep with the other's loaded one, and a/b is exactly 1/(b/a).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def rep_order(items: Sequence[T], rep: int) -> list[T]:
    """The order of `items` in rep `rep` (0-based): rotated by rep // 2, reversed in odd reps."""
    if not items:
        return []
    k = (rep // 2) % len(items)
    rotated = [*items[k:], *items[:k]]
    return rotated[::-1] if rep % 2 else rotated


def by_rep(runs: Sequence[Mapping[str, Any]], field: str) -> dict[int, float]:
    """`field` of each successful run, keyed by its rep (runs without one: by their place)."""
    out: dict[int, float] = {}
    for i, r in enumerate(runs):
        value = r.get(field)
        if r.get("ok") and value is not None:
            out[int(r.get("rep", i))] = float(value)
    return out


def per_rep(a: Mapping[int, float], b: Mapping[int, float], op: Callable[[float, float], float | None]) -> list[float]:
    """`op(a, b)` for every rep both have (in rep order); a rep where `op` gives None is left out."""
    out = []
    for rep in sorted(a.keys() & b.keys()):
        value = op(a[rep], b[rep])
        if value is not None:
            out.append(value)
    return out


def _divide(a: float, b: float) -> float | None:
    return a / b if a > 0 and b > 0 else None


def ratios(a: Mapping[int, float], b: Mapping[int, float]) -> list[float]:
    """a / b of each rep both ran (positive values only)."""
    return per_rep(a, b, _divide)


def differences(a: Mapping[int, float], b: Mapping[int, float]) -> list[float]:
    return per_rep(a, b, lambda x, y: x - y)


def log_median(values: Sequence[float]) -> float | None:
    """The median of positive ratios taken in log space (see the module doc); None if none."""
    if not values:
        return None
    return math.exp(statistics.median(math.log(v) for v in values))


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None
