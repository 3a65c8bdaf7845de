"""Source gaps (pure): where a position outside the log resumes, and how failover translates
a group inside a recorded gap."""

from __future__ import annotations

from mirror.domain.gaps import GapReason, SourceGap, gap_inside, resume_outside_log
from mirror.domain.offsetmap import OffsetSync, translate


def test_a_position_before_the_log_start_skips_to_it_and_names_the_range() -> None:
    r = resume_outside_log("t", 0, 100, 150, 200)
    assert r.offset == 150
    assert r.gap == SourceGap("t", 0, 100, 149, GapReason.RETENTION)
    assert r.gap.count == 50
    assert r.gap.describe().startswith("t[0]: source records 100..149 (50) were never mirrored: deleted")


def test_a_position_past_the_log_end_resumes_where_the_source_writes_next_skipping_nothing() -> None:
    r = resume_outside_log("t", 0, 120, 0, 100)
    assert (r.offset, r.gap, r.truncated) == (100, None, 20)


def test_a_position_inside_the_log_stays() -> None:
    assert resume_outside_log("t", 0, 120, 100, 200).offset == 120


def test_gap_inside_finds_the_gap_holding_a_position() -> None:
    gaps = [SourceGap("t", 0, 10, 19, GapReason.RETENTION), SourceGap("t", 0, 40, 49, GapReason.RETENTION)]
    assert gap_inside(gaps, 45) is gaps[1]
    assert gap_inside(gaps, 20) is None
    assert gap_inside(gaps, None) is None


def test_a_group_inside_a_gap_starts_at_the_first_copied_record_and_the_rest_counts_as_skipped() -> None:
    # 0..99 copied to 0..99, 100..149 deleted before they were copied, 150.. copied to 100..
    rows = [OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 150, 100)]
    gap = SourceGap("t", 0, 100, 149, GapReason.RETENTION)
    tr = translate(rows, 120, 150, mirrored_end=200, source_end=200, gap=gap)
    assert (tr.target_offset, tr.skipped, tr.unmirrored, tr.exact) == (100, 30, 30, True)


def test_a_gap_with_nothing_copied_after_it_yet_starts_at_the_target_end() -> None:
    rows = [OffsetSync("t", 0, 0, 0)]
    tip = OffsetSync("t", 0, 99, 99)
    gap = SourceGap("t", 0, 100, 149, GapReason.RETENTION)
    tr = translate(rows, 100, 100, mirrored_end=150, source_end=150, tip=tip, gap=gap)
    assert (tr.target_offset, tr.skipped) == (100, 50)


def test_a_group_outside_every_gap_translates_as_before() -> None:
    rows = [OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 150, 100)]
    gap = SourceGap("t", 0, 100, 149, GapReason.RETENTION)
    assert translate(rows, 160, 150, gap=gap) == translate(rows, 160, 150)
    assert translate(rows, 160, 150, gap=gap).skipped == 0
