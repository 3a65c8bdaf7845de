"""`StartPoints`: which partitions `start_from` moves, and where (an in-memory source admin)."""

from __future__ import annotations

import threading
from typing import Any

from mirror import config
from mirror.config import parse
from mirror.engine.start_points import StartPoints
from mirror.engine.worker import FlowWorker
from mirror.errors import ClusterUnavailable
from mirror.kafka import OFFSET_BEGINNING
from tests.unit.engine.fakes import P0, TEXT, Clock, FakeAdmin, FakeConsumer, FakeProducer, Target

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


def test_start_from_latest_does_not_move_a_partition_whose_group_offsets_expired() -> None:
    """docs/design.md: "A partition the group committed is never moved." A `start_from: latest`
    flow mirrored P0 up to 49 (the target holds 0..49) and was stopped for longer than the
    source's offsets.retention.minutes (7 days by default: an empty group's offsets are then
    deleted). Back, the group has no offset, `StartPoints.choose` takes P0 for new, and the
    start it commits (the end, 100) skips 50..99, written while the mirror was stopped:
    never mirrored, and no WARNING, counter or offset-map row says so."""

    class EndsAdmin(FakeAdmin):
        def end_offsets(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], int]:
            return {tp: 100 for tp in parts}

        def offsets_for_times(self, parts: Any, at_ms: int) -> dict[tuple[str, int], int]:
            return {tp: -1 for tp in parts}

    cfg = config.parse(TEXT.replace("commit_interval: 1s", "commit_interval: 1s, start_from: latest"), env={})
    stop, target = threading.Event(), Target()
    target.stored[P0] = list(range(50))  # the earlier run's copies, acknowledged
    consumer = FakeConsumer([P0], [[]], stop, target)  # no committed offset: expired
    admins = {"nyc": {"orders": 1}, "sf": {"nyc.orders": 1}}
    worker = FlowWorker(
        cfg,
        cfg.flows[0],
        stop=stop,
        clock=Clock(),
        consumer_factory=lambda name, cluster, settings: consumer,
        producer_factory=lambda name, cluster, settings: FakeProducer(target, 100_000),
        admin_factory=lambda name, cluster: EndsAdmin(admins[name]),
    )
    worker.run()
    committed = consumer.last_commit(P0)
    assert committed is None or committed <= 50, f"committed {committed}: 50..{committed - 1} never mirrored"


def test_a_partition_with_copies_on_the_target_keeps_its_history_an_unanswering_target_moves_nothing() -> None:
    """Group offsets expired (or deleted): copies on the target say the flow mirrored the
    partition, so start_from leaves it at the earliest record; an empty target partition is
    new and moves; the target unreadable, none moves (more copied, nothing skipped)."""

    class TargetEnds:
        def __init__(self, ends: dict[tuple[str, int], int] | None) -> None:
            self.ends = ends

        def end_offsets(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], int]:
            if self.ends is None:
                raise ClusterUnavailable("b: no answer")
            return {tp: self.ends.get(tp, 0) for tp in parts}

    committed = {("x", 0): None, ("x", 1): None}
    copies = TargetEnds({("a.x", 0): 50})  # x of cluster a is mirrored as a.x
    points = StartPoints(_flow("latest"), Source, now_ms=lambda: NOW, target=lambda: copies)
    assert points.choose(list(committed), {}, committed) == {("x", 1): 100}
    silent = StartPoints(_flow("latest"), Source, now_ms=lambda: NOW, target=lambda: TargetEnds(None))
    assert silent.choose(list(committed), {}, committed) == {}
