"""The replay rule both engines share (mirror.domain.replay): skip only the source records the
target provably holds, and say where their copies are. No network: the target partition is a
list of records."""

from __future__ import annotations

from mirror.domain.replay import (
    Replay,
    SourceRecord,
    StoredRecord,
    delta_changes,
    origin_offset,
    replay_check,
    slice_reader,
)
from mirror.domain.route import HEADER_ORIGIN, Route

R = Route("orders", 0, "src.orders", b"src/orders/0/")
NO_PROVENANCE = Route("orders", 0, "src.orders", None)


def source(first: int, count: int) -> list[SourceRecord]:
    return [(o, 1000 + o, b"k%d" % o, b"v%d" % o) for o in range(first, first + count)]


def copy_of(rec: SourceRecord, at: int, r: Route = R) -> StoredRecord:
    headers = [(HEADER_ORIGIN, (r.origin or b"") + b"%d" % rec[0])]
    return StoredRecord(at, rec[1], rec[2], rec[3], headers)


def target_of(copies: list[StoredRecord]) -> tuple[int, int, list[StoredRecord]]:
    """low, high and the records of a target partition holding `copies` (offsets as given)."""
    return (copies[0].offset if copies else 0), (copies[-1].offset + 1 if copies else 0), copies


def check(batch: list[SourceRecord], copies: list[StoredRecord], r: Route = R, source_end: int | None = None) -> Replay:
    low, high, recs = target_of(copies)
    return replay_check(r, batch, low, high, slice_reader(recs), source_end)


def test_every_copied_record_is_skipped_with_its_target_offset() -> None:
    batch = source(100, 50)
    copies = [copy_of(rec, 7 + i) for i, rec in enumerate(batch[:30])]  # a kill after 30 copies
    got = check(batch, copies)
    assert got.held == 129 and got.placed and got.warning is None
    assert got.pairs == [(100 + i, 7 + i) for i in range(30)]
    assert delta_changes(got.pairs) == [(100, 7)]


def test_copies_of_earlier_records_before_the_run_are_fine() -> None:
    # The committed offset trails the copies: the target also holds copies of records before it.
    earlier, batch = source(90, 10), source(100, 20)
    copies = [copy_of(rec, i) for i, rec in enumerate(earlier + batch[:5])]
    got = check(batch, copies)
    assert got.held == 104 and got.pairs == [(100 + i, 10 + i) for i in range(5)]


def test_a_tail_without_provenance_proves_nothing() -> None:
    batch = source(0, 10)
    copies = [copy_of(rec, i) for i, rec in enumerate(batch)]
    by_hand = StoredRecord(10, 5, b"hand", b"made", [])
    assert check(batch, [*copies, by_hand]) == Replay()
    assert check(batch, copies, r=NO_PROVENANCE) == Replay()
    assert origin_offset(NO_PROVENANCE, copies[0].headers) is None


def test_a_tail_naming_an_offset_before_the_records_skips_nothing() -> None:
    batch = source(100, 10)
    assert check(batch, [copy_of(rec, i) for i, rec in enumerate(source(50, 50))]) == Replay()


def test_a_copy_that_differs_from_its_source_record_skips_nothing() -> None:
    # A source topic created again: offsets restart, the target's copies are of the old records.
    batch = source(0, 10)
    old = [(o, ts, k, b"old " + (v or b"")) for o, ts, k, v in batch]
    got = check(batch, [copy_of(rec, i) for i, rec in enumerate(old)])
    assert got.held == -1 and not got.pairs and got.warning and "differs" in got.warning


def test_a_different_timestamp_alone_skips_nothing() -> None:
    batch = source(0, 3)
    copies = [copy_of(rec, i) for i, rec in enumerate(batch)]
    copies[-1] = StoredRecord(2, 1, copies[-1].key, copies[-1].value, copies[-1].headers)
    assert check(batch, copies).held == -1


def test_a_mismatch_inside_the_run_skips_nothing_before_it() -> None:
    # The anchor matches, but an earlier copy in the run is of another record: the run stops
    # there, and the copy before it (of an earlier offset of this batch, but different) ends it.
    batch = source(0, 6)
    copies = [copy_of(rec, i) for i, rec in enumerate(batch)]
    bad = batch[2]
    copies[2] = copy_of((bad[0], bad[1], bad[2], b"not it"), 2)
    got = check(batch, copies)
    assert got.held == -1 and got.warning and "never reached the target" in got.warning


def test_a_tail_past_the_source_end_skips_nothing() -> None:
    batch = source(0, 5)
    got = check(batch, [copy_of(rec, i) for i, rec in enumerate(batch)], source_end=3)
    assert got.held == -1 and got.warning and "ends at 3" in got.warning


def test_copies_of_the_first_records_gone_from_the_log_start_skip_nothing() -> None:
    # The target's log start is past the copies of the first records. Its retention may have
    # taken them, or the mirror deleted to the end (a resync) and copies in flight landed after:
    # then 0..3 never landed. The target cannot tell which, so nothing is skipped (a second
    # review found the skip of this case could lose 0..3).
    batch = source(0, 10)
    copies = [copy_of(rec, i) for i, rec in enumerate(batch)][4:]
    got = check(batch, copies)
    assert got.held == -1 and not got.pairs and got.warning and "never landed" in got.warning


def test_a_copy_missing_in_the_middle_ends_the_run() -> None:
    # The copies of 0..2 and 4..5: 3 never reached the target. Source offsets may jump
    # (markers, compaction), so the run alone does not show it; the records in hand do.
    batch = source(0, 6)
    copies = [copy_of(rec, i) for i, rec in enumerate(batch[:3] + batch[4:])]
    got = check(batch, copies)
    assert got.held == -1 and got.warning and "no copy of orders[0] offset 3" in got.warning


def test_slice_reader_reads_a_range_up_to_until() -> None:
    recs = [copy_of(rec, i) for i, rec in enumerate(source(0, 10))]
    read = slice_reader(recs)
    assert [r.offset for r in read(3, 6)] == [3, 4, 5]
    assert [r.offset for r in read(3, 10, until=lambda r: r.offset == 4)] == [3, 4]


OTHER = Route("orders", 0, "src.orders", b"dc2/orders/0/")  # another flow into the same target (fan-in)


def test_records_of_another_flow_before_the_run_prove_nothing_of_the_first_records() -> None:
    # The target holds the copy of 99 (before this batch), then 5 records of another flow,
    # then the copies of 105..109 only: 100..104 provably never reached it (the copy right
    # before them is of 99, not retention: it is still there, above the log start). The
    # read-back window (the last newest - first + 1 = 10 records) starts after the copy of
    # 99, the run reaches the window's start with no copy before it, and the rule skips
    # 100..109 "unplaced" as if the target's retention had removed the copies of 100..104.
    batch = source(100, 10)
    before = [copy_of((99, 1099, b"k99", b"v99"), 0)]
    foreign = [copy_of((500 + i, 1, b"x", b"y"), 1 + i, r=OTHER) for i in range(5)]
    run = [copy_of(rec, 6 + i) for i, rec in enumerate(batch[5:])]
    got = check(batch, before + foreign + run)
    assert got.held < 100, f"skipped up to {got.held} (placed={got.placed}) though 100..104 have no copy"


def test_records_by_hand_before_the_run_prove_nothing_of_the_first_records() -> None:
    # The same with records produced by hand (no provenance header) in between, and the
    # window starting right at the run: nothing read shows that 100..104 ever landed.
    batch = source(100, 10)
    before = [copy_of((99, 1099, b"k99", b"v99"), 0)]
    by_hand = [StoredRecord(1 + i, 5, b"hand", b"made", []) for i in range(5)]
    run = [copy_of(rec, 6 + i) for i, rec in enumerate(batch[5:])]
    got = check(batch, before + by_hand + run)
    assert got.held < 100, f"skipped up to {got.held} (placed={got.placed}) though 100..104 have no copy"


def test_a_repeated_run_of_copies_proves_nothing_of_the_first_records() -> None:
    # One writer, two attempts that each landed 105..109 but not 100..104 (a producer without
    # the gapless guarantee, a retried Spark task): the window (last 10 records) holds the two
    # runs only, the read stops at the first copy of 109, and that run reaches the window's
    # start: 100..109 are skipped "unplaced" though the copy of 99 right before shows that
    # 100..104 never landed.
    batch = source(100, 10)
    before = [copy_of((99, 1099, b"k99", b"v99"), 0)]
    runs = [copy_of(rec, 1 + i) for i, rec in enumerate(batch[5:] + batch[5:])]
    got = check(batch, before + runs)
    assert got.held < 100, f"skipped up to {got.held} (placed={got.placed}) though 100..104 have no copy"


def test_log_append_time_copies_of_a_recreated_topics_records_alike_skip_nothing() -> None:
    # A source topic deleted and created again (unnoticed: no store keeps its id, or the Spark
    # engine), grown past the offset the target's last copy names. Its records are events
    # alike in key and value (a tick, a click with no payload), and the target topic stamps
    # its own timestamps (LogAppendTime), so `same` compares key and value only: the old
    # incarnation's copies pass for copies of the new records, and 10 new events are never
    # copied. The module's promise: "those never match, and nothing is skipped".
    batch = [(o, 50_000 + o, None, b"tick") for o in range(10)]
    old = [
        StoredRecord(
            i, 9_000 + i, None, b"tick", [(HEADER_ORIGIN, (R.origin or b"") + b"%d" % i)], log_append_time=True
        )
        for i in range(10)
    ]
    got = check(batch, old, source_end=20)
    assert got.held == -1, f"skipped up to {got.held}: the old incarnation's copies taken for the new records"
