"""Offset translation (docs/design.md invariants 2-3) and the failover plan math: no network."""

from __future__ import annotations

import pytest

from failover.plan import (
    Method,
    PartitionFacts,
    Truth,
    make_plan,
    mirrored_end_from_target,
    plan_partition,
)
from mirror.domain.offsetmap import OffsetSync, translate


def rows(*pairs: tuple[int, int]) -> list[OffsetSync]:
    return [OffsetSync("orders", 0, s, t) for s, t in pairs]


def test_book_example_infers_between_rows() -> None:
    syncs = rows((495, 500), (596, 600))
    assert translate(syncs, 550, 10_000).target_offset == 555
    assert translate(syncs, 495, 10_000).target_offset == 500
    assert translate(syncs, 596, 10_000).target_offset == 600
    assert translate(syncs, 700, 10_000).target_offset == 704


def test_source_gaps_map_to_next_record() -> None:
    # Source 0..9 mirrored to 0..9; 10..19 compacted away / aborted; 20.. mirrored to 10..
    syncs = rows((0, 0), (20, 10))
    assert translate(syncs, 10, 100).target_offset == 10  # position inside the gap -> next record's copy
    assert translate(syncs, 15, 100).target_offset == 10  # inside the gap too
    assert translate(syncs, 20, 100).target_offset == 10
    assert translate(syncs, 25, 100).target_offset == 15


def test_position_in_gap_never_skips_a_record() -> None:
    # Records 0-4 committed, 5-9 aborted, marker 10, then 11.. : target 0-4 then 5..
    syncs = rows((0, 0), (11, 5))
    for c in range(5, 12):
        # Every position from 5 to 11 starts the group at source 11's copy (target 5).
        assert translate(syncs, c, 100).target_offset == 5, c
    assert translate(syncs, 12, 100).target_offset == 6


def test_target_gaps_duplicates_shift_delta() -> None:
    # A retried produce duplicated one record on the target at 3: delta goes from 0 to 1.
    syncs = rows((0, 0), (3, 4))
    assert translate(syncs, 3, 100).target_offset == 4
    assert translate(syncs, 2, 100).target_offset == 2


def test_clamped_to_target_end_and_unmirrored_counted() -> None:
    syncs = rows((0, 0))
    tr = translate(syncs, 120, 100, mirrored_end=100)
    assert tr.target_offset == 100 and tr.unmirrored == 20 and tr.exact
    tr = translate(syncs, 50, 100, mirrored_end=100, source_end=130)
    assert tr.target_offset == 50 and tr.unmirrored == 30


def test_no_rows_and_before_first_row() -> None:
    tr = translate([], 42, 0)
    assert tr.target_offset == 0 and not tr.exact and tr.unmirrored == 0
    tr = translate([], 42, 0, mirrored_end=40, source_end=50)
    assert tr.unmirrored == 10
    tr = translate(rows((1000, 7)), 10, 500)
    assert tr.target_offset == 7 and not tr.exact


def test_mirrored_end_from_target() -> None:
    assert mirrored_end_from_target(110, OffsetSync("t", 0, 495, 500)) == 105
    assert mirrored_end_from_target(5, None) is None


def facts(**kw: object) -> PartitionFacts:
    base: dict[str, object] = dict(
        source_topic="orders", target_topic="nyc.orders", partition=0, target_low=0, target_high=100
    )
    base.update(kw)
    return PartitionFacts(**base)  # type: ignore[arg-type]


def test_timestamp_boundary_and_missing_time() -> None:
    p = plan_partition(Method.TIMESTAMP, facts(time_offset=40, boundary_records=3, source_offset=60))
    assert p.target_offset == 40 and p.boundary_records == 3
    p = plan_partition(Method.TIMESTAMP, facts(time_offset=-1))
    assert p.target_offset == 100 and p.boundary_records == 0


def test_earliest_latest() -> None:
    assert plan_partition(Method.EARLIEST, facts(target_low=7)).target_offset == 7
    assert plan_partition(Method.LATEST, facts()).target_offset == 100


def test_translate_needs_position() -> None:
    with pytest.raises(ValueError):
        plan_partition(Method.TRANSLATE, facts())


def test_plan_json_shape() -> None:
    plan = make_plan(
        "nyc-to-sf",
        "billing",
        Method.TRANSLATE,
        Truth.CHECKPOINTS,
        [
            facts(partition=1, source_offset=50, syncs=rows((0, 10)), mirrored_end=80, source_end=90),
            facts(partition=0, source_offset=5, syncs=rows((0, 0)), mirrored_end=90, source_end=90),
        ],
        checkpoint_time_ms=1234,
    )
    doc = plan.to_json()
    assert set(doc) >= {"flow", "group", "method", "partitions"}
    assert doc["flow"] == "nyc-to-sf" and doc["group"] == "billing" and doc["method"] == "translate"
    assert doc["source_of_truth"] == "checkpoints" and doc["checkpoint_time_ms"] == 1234
    assert [p["partition"] for p in doc["partitions"]] == [0, 1]
    assert doc["partitions"][1] == {
        "source_topic": "orders",
        "target_topic": "nyc.orders",
        "partition": 1,
        "source_offset": 50,
        "target_offset": 60,
        "unmirrored": 10,
        # From checkpoints: what the group may have consumed after them, at most (100 - 60).
        "may_reread": 40,
    }
    assert doc["unmirrored"] == 10 and doc["may_reread"] == 40 + 95
    assert plan.offsets() == {("nyc.orders", 0): 5, ("nyc.orders", 1): 60}
    assert any("checkpoints" in n for n in doc["notes"])


def test_plan_json_for_at_reports_boundary() -> None:
    plan = make_plan("f", "g", Method.TIMESTAMP, Truth.TIMESTAMPS, [facts(time_offset=3, boundary_records=2)], at_ms=99)
    doc = plan.to_json()
    assert doc["at_ms"] == 99 and doc["boundary_records"] == 2
    assert doc["partitions"][0]["boundary_records"] == 2


def test_exact_live_translation_rereads_nothing() -> None:
    live = make_plan(
        "f",
        "g",
        Method.TRANSLATE,
        Truth.SOURCE,
        [facts(source_offset=50, syncs=rows((0, 10)), mirrored_end=90, source_end=90)],
    )
    assert live.partitions[0].target_offset == 60 and live.may_reread == 0
    at = make_plan("f", "g", Method.TIMESTAMP, Truth.TIMESTAMPS, [facts(time_offset=40)])
    assert at.may_reread == 60  # everything after T may have been read
