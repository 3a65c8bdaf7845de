"""Lag arithmetic and the Burrow judgement of a gathered observation (no network)."""

from __future__ import annotations

from mirror.domain.lag import (
    FlowLag,
    PartitionLag,
    effective_position,
    judge,
    lag_records,
    lag_seconds,
    unmirrored,
)
from mirror.domain.lag_status import Evaluator


def test_lag_records_counts_only_records_that_still_exist():
    assert lag_records(1000, 0) == 1000
    assert lag_records(1000, 1000) == 0
    assert lag_records(1000, None, start=200) == 800  # never committed: starts at log start
    assert lag_records(1000, 100, start=200) == 800  # 100..199 expired: not waiting any more
    assert lag_records(10, 50) == 0  # truncated/recreated partition: never negative


def test_effective_position():
    assert effective_position(None, 7) == 7
    assert effective_position(3, 7) == 7
    assert effective_position(9, 7) == 9


def test_lag_seconds_is_record_age_and_never_negative():
    assert lag_seconds(1_000.0, 990_000) == 10.0
    assert lag_seconds(1_000.0, 1_005_000) == 0.0


def test_unmirrored_is_what_a_group_would_miss():
    # group read up to 900, mirror acked up to 950, end 1000: 950..999 at risk
    assert unmirrored(1000, 900, 950) == 50
    # group ahead of the mirror: everything it has not read is also not mirrored
    assert unmirrored(1000, 980, 950) == 20
    assert unmirrored(1000, 1000, 950) == 0
    assert unmirrored(1000, None, 0) == 0


def _flow(t: float, position: int, end: int, active: bool | None) -> FlowLag:
    p = PartitionLag("orders", "nyc.orders", 0, 0, end, position, position, lag_records(end, position), 0.0, "record")
    q = PartitionLag("orders", "nyc.orders", 1, 0, 5, 5, 5, 0, 0.0, "caught-up")
    return FlowLag("f", "nyc", "sf", t, [p, q], mirror_active=active)


def test_judge_sets_partition_and_flow_status():
    ev = Evaluator()
    out = None
    for i in range(4):
        out = judge(ev, _flow(100.0 + 10 * i, 10, 1010, active=False))
    assert out.status == "STOP"
    assert [p.status for p in out.partitions] == ["STOP", "OK"]
    assert out.lag_records == 1000
    assert out.to_json()["partitions"][0]["status"] == "STOP"
