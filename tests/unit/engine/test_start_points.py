"""`StartPoints`: which partitions `start_from` moves, and where (an in-memory source admin)."""

from __future__ import annotations

from mirror.config import parse
from mirror.engine.start_points import StartPoints
from mirror.errors import ClusterUnavailable
from mirror.kafka import OFFSET_BEGINNING

NOW = 1_795_838_580_000


def _flow(start_from: str):
    text = f"""\
clusters:
  a: {{bootstrap: 127.0.0.1:9092}}
  b: {{bootstrap: 127.0.0.1:9093}}
flows:
  - {{name: one, source: a, target: b, topics: {{include: [x]}}, start_from: "{start_from}"}}
"""
    return parse(text, env={}).flows[0]


class Source:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.asked: list[int | None] = []

    def end_offsets(self, parts):
        if self.fail:
            raise ClusterUnavailable("a: no answer")
        return {tp: 100 for tp in parts}

    def offsets_for_times(self, parts, ms):
        self.asked.append(ms)
        return {tp: (40 if tp[1] == 0 else -1) for tp in parts}


def test_only_partitions_the_group_never_committed_move() -> None:
    src = Source()
    points = StartPoints(_flow("-1h"), lambda: src, now_ms=lambda: NOW)
    committed = {("x", 0): None, ("x", 1): None, ("x", 2): 7, ("x", 3): None}
    starts = {("x", 3): 5}  # started elsewhere for another reason (not the beginning): left alone
    got = points.choose(list(committed), starts, committed)
    assert got == {("x", 0): 40, ("x", 1): 100}  # nothing that recent in x[1]: its end
    assert src.asked == [NOW - 3_600_000]


def test_latest_is_the_end_at_first_then_the_flows_start() -> None:
    src = Source()
    points = StartPoints(_flow("latest"), lambda: src, now_ms=lambda: NOW)
    assert points.choose([("x", 0)], {}, {("x", 0): None}) == {("x", 0): 100}
    assert src.asked == []
    # A topic that appears later (its target just created): from its first record after the flow started.
    assert points.choose([("y", 0)], {("y", 0): OFFSET_BEGINNING}, {("y", 0): None}) == {("y", 0): 40}
    assert src.asked == [NOW]


def test_earliest_and_unknown_offsets_and_an_unanswering_source_move_nothing() -> None:
    assert StartPoints(_flow("earliest"), Source, now_ms=lambda: NOW).choose([("x", 0)], {}, {("x", 0): None}) == {}
    points = StartPoints(_flow("latest"), Source, now_ms=lambda: NOW)
    assert points.choose([("x", 0)], {}, None) == {}  # the group's offsets unreadable
    failing = StartPoints(_flow("latest"), lambda: Source(fail=True), now_ms=lambda: NOW)
    assert failing.choose([("x", 0)], {}, {("x", 0): None}) == {}
