"""Records per CPU second at the margin: what the records between two sizes cost, start-up excluded.

A Spark job pays ~20 CPU seconds to start (JVM, session, planning) before its first record,
so its records per CPU second over a whole run says more about the size of the load than
about the engine. With `--marginal N` every contender also copies an N-record topic in the
same reps (ordered by the same rules, bench.pairing), and the figure is

    (records - N) / (CPU s of the full-size run - CPU s of the N-record run)

per contender and rep (both runs of one rep: the same part of the machine's drift). A rep
whose difference is not positive (the noise larger than the work) gives no figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench import pairing


def per_rep(
    big: list[dict[str, Any]], small: list[dict[str, Any]], records: int | None, small_records: int | None
) -> dict[int, float]:
    """Rep -> records per CPU second at the margin, from one contender's runs at both sizes."""
    if not records or not small_records or records <= small_records:
        return {}
    extra = records - small_records
    cpu_big, cpu_small = pairing.by_rep(big, "cpu_s"), pairing.by_rep(small, "cpu_s")
    return {
        rep: extra / (cpu_big[rep] - cpu_small[rep])
        for rep in sorted(cpu_big.keys() & cpu_small.keys())
        if cpu_big[rep] > cpu_small[rep]
    }


def per_contender(
    runs: Mapping[str, list[dict[str, Any]]],
    small_runs: Mapping[str, list[dict[str, Any]]],
    records: int | None,
    small_records: int | None,
) -> dict[str, dict[int, float]]:
    """Every contender that ran at both sizes -> its `per_rep` figures."""
    return {key: per_rep(runs.get(key, []), small, records, small_records) for key, small in small_runs.items()}
