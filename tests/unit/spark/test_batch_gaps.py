"""`mirror.spark.gaps`: records deleted past a running query's position, told by the driver."""

from __future__ import annotations

from typing import Any

import pytest

from mirror.domain.gaps import GapPolicy, GapReason, SourceGap
from mirror.errors import SourceGapError
from mirror.kafka.admin import Watermarks
from mirror.spark.gaps import BatchGaps, deleted, unread, without_deleted
from mirror.spark.task import TaskResult

T0, T1 = ("orders", 0), ("orders", 1)


def _result(tp: tuple[str, int], first: int, nxt: int) -> TaskResult:
    return TaskResult(tp[0], tp[1], "src.orders", first, nxt, produced=nxt - first)


class Source:
    def __init__(self, lows: dict[tuple[str, int], int]) -> None:
        self.lows, self.asked = lows, []

    def watermarks(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        self.asked.append(sorted(parts))
        return {tp: Watermarks(self.lows[tp], 1000) for tp in parts}


class Heard:
    def __init__(self) -> None:
        self.gaps: list[SourceGap] = []

    def on_gap(self, flow: str, gap: SourceGap) -> None:
        self.gaps.append(gap)


def test_the_offsets_a_batch_did_not_copy_run_from_its_range_start_to_the_first_copied() -> None:
    begins = {T0: 50, T1: 10}
    ends = {T0: 100, T1: 20}
    # T0 copied from 80; T1 copied nothing (its whole range unread).
    assert unread(begins, ends, [_result(T0, 80, 100)]) == {T0: (50, 80), T1: (10, 20)}
    # A range copied from its start, an empty range, a partition whose start is unknown: nothing.
    assert unread({T0: 50, T1: 20}, {T0: 100, T1: 20, ("x", 0): 5}, [_result(T0, 50, 100)]) == {}


def test_only_the_unread_offsets_below_the_log_start_are_a_gap() -> None:
    uncopied = {T0: (50, 80), T1: (10, 20)}
    gaps = deleted(uncopied, {T0: 80, T1: 15})
    assert gaps == [
        SourceGap("orders", 0, 50, 79, GapReason.RETENTION),
        SourceGap("orders", 1, 10, 14, GapReason.RETENTION),  # 15..19: markers or aborted records still held
    ]
    # Offsets not copied that the log still holds (transaction markers, aborted records): no gap.
    assert deleted({T0: (50, 52)}, {T0: 0}) == []


def test_a_gap_found_after_a_batch_is_logged_once_counted_and_recorded(caplog) -> None:
    recorder, metrics = Heard(), Heard()
    source = Source({T0: 80, T1: 0})
    gaps = BatchGaps("f", source, recorder, metrics)
    found = gaps.report(3, {T0: 50, T1: 0}, {T0: 100, T1: 10}, [_result(T0, 80, 100), _result(T1, 0, 10)])
    assert found == [SourceGap("orders", 0, 50, 79, GapReason.RETENTION)]
    assert recorder.gaps == metrics.gaps == found
    assert source.asked == [[T0]]  # only the partitions with offsets nobody copied
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "WARNING",
            "flow f: orders[0]: source records 50..79 (30) were never mirrored: deleted at the source before "
            "they were copied (retention or delete-records); mirroring on from offset 80",
        )
    ]


def test_a_batch_that_copied_its_whole_range_asks_the_source_nothing() -> None:
    source = Source({T0: 0})
    assert BatchGaps("f", source, Heard()).report(1, {T0: 0}, {T0: 10}, [_result(T0, 0, 10)]) == []
    assert source.asked == []


def test_with_on_source_gap_stop_a_gap_found_after_a_batch_stops_before_anything_is_recorded() -> None:
    recorder = Heard()
    gaps = BatchGaps("f", Source({T0: 80}), recorder)
    gaps.policy = GapPolicy.STOP
    with pytest.raises(SourceGapError, match=r"orders\[0\]: source records 50..79 \(30\).*on_source_gap: stop"):
        gaps.report(3, {T0: 50}, {T0: 100}, [_result(T0, 80, 100)])
    assert recorder.gaps == []


def test_the_jvm_writers_words_for_deleted_records_are_left_to_the_gap_report() -> None:
    deleted_text = "orders-0 offsets 50 to 79 were deleted before they were read"
    truncated = "orders-0 offsets 90 to 99 are past the log's end, 90: it was truncated after the batch was planned"
    assert without_deleted(deleted_text) is None
    assert without_deleted(f"{deleted_text}; {truncated}") == truncated
    assert without_deleted(None) is None
