"""Translation at its edges: the pure math, and the tip's storage.

Offset-map rows are stored once per commit interval, so they trail the target; past the
stored *tip* a translation must re-read, never skip. Partitions with no row at all
translate to the exact target offset where that is knowable.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mirror.domain.acks import AckBatch
from mirror.domain.offsetmap import OffsetSync, translate
from mirror.run.recorder import OffsetMapRecorder
from mirror.store import SqliteStore, sync_window


def rows(*pairs: tuple[int, int]) -> list[OffsetSync]:
    return [OffsetSync("t", 0, s, t) for s, t in pairs]


def transactional_layout(txns: int, size: int) -> dict[int, int]:
    """Source offset -> target offset of each record: `txns` transactions of `size` records,
    each followed by its commit marker (a source offset with no copy)."""
    out, target = {}, 0
    for t in range(txns):
        for i in range(size):
            out[t * (size + 1) + i] = target
            target += 1
    return out


def exact(layout: dict[int, int], position: int, target_end: int) -> int:
    """Where a group at source `position` must resume: the copy of the first record at or after it."""
    return min((t for s, t in layout.items() if s >= position), default=target_end)


def delta_rows(layout: dict[int, int], upto: int) -> list[OffsetSync]:
    """What the recorder stores for the records up to `upto`: a row wherever the delta changes."""
    out, last = [], None
    for s in sorted(layout):
        if s > upto:
            break
        if layout[s] - s != last:
            out.append(OffsetSync("t", 0, s, layout[s]))
            last = layout[s] - s
    return out


# ---------------------------------------------------------------------------- rows trailing the target: the tip bounds a translation


def test_trailing_rows_over_translate_without_the_tip_and_re_read_with_it() -> None:
    # 8 transactions of 4 records (markers at 4, 9, 14, ...); the first 5 are stored, the
    # target already holds all 32 copies (the rows of transactions 6-8 trail).
    layout = transactional_layout(8, 4)
    stored = delta_rows(layout, 23)
    assert stored == rows((0, 0), (5, 4), (10, 8), (15, 12), (20, 16))
    tip = OffsetSync("t", 0, 23, 19)
    # A group that read 8 records past the stored rows sits at 34; its next record (35) is at 28.
    assert exact(layout, 34, 32) == 28
    assert translate(stored, 34, 32).target_offset == 30  # the defect: 2 records skipped
    assert translate(stored, 34, 32, tip=tip).target_offset == 20  # re-reads the 8, skips none
    assert translate(stored, 24, 32, tip=tip).target_offset == 20  # right after the tip's marker: exact
    assert translate(stored, 23, 32, tip=tip).target_offset == 19
    assert translate(stored, 11, 32, tip=tip).target_offset == 9  # inside the stored rows: exact


@pytest.mark.parametrize("seed", range(20))
def test_never_past_the_exact_offset_and_exact_up_to_the_tip(seed: int) -> None:
    rng = random.Random(seed)
    layout = transactional_layout(rng.randint(1, 12), rng.randint(1, 5))
    records = sorted(layout)
    target_end = len(records)
    tip_at = rng.choice(records)  # the newest record whose rows were stored
    stored = delta_rows(layout, tip_at)
    tip = OffsetSync("t", 0, tip_at, layout[tip_at])
    for c in range(records[-1] + 3):
        got = translate(sync_window_of(stored, c), c, target_end, tip=tip).target_offset
        want = exact(layout, c, target_end)
        assert got <= want, (c, got, want)
        if c <= tip_at + 1:
            assert got == want, (c, got, want)
        else:  # re-reads at most what was mirrored after the tip
            assert got == layout[tip_at] + 1


def sync_window_of(stored: list[OffsetSync], position: int) -> list[OffsetSync]:
    """What `store.sync_window` returns: the floor row and the one after it."""
    floor = [r for r in stored if r.source_offset <= position][-1:]
    nxt = [r for r in stored if r.source_offset > position][:1]
    return floor + nxt


def test_a_tip_older_than_the_rows_still_bounds_the_translation() -> None:
    # Rows stored beyond the tip (a write of the tip failed after the rows): still never past.
    layout = transactional_layout(4, 3)  # records 0-2, 4-6, 8-10, 12-14
    stored = delta_rows(layout, 14)
    tip = OffsetSync("t", 0, 6, layout[6])
    assert translate(stored, 13, 12, tip=tip).target_offset == layout[6] + 1
    assert translate(stored, 5, 12, tip=tip).target_offset == 4


# ---------------------------------------------------------------------------- partitions with no row: the exact target offset where it is knowable


def test_empty_on_both_sides_is_the_target_end() -> None:
    tr = translate([], 0, 0, source_log=(0, 0), target_start=0)
    assert (tr.target_offset, tr.exact) == (0, True)


def test_source_emptied_below_the_group_goes_to_the_target_end_not_zero() -> None:
    # Source log start = end = 5 (records deleted), group at 5; target emptied the same way
    # (start = end = 3): MirrorMaker 2's 0 is out of range there.
    tr = translate([], 5, 3, source_log=(5, 5), target_start=3)
    assert (tr.target_offset, tr.exact) == (3, True)


def test_group_that_read_everything_skips_whatever_the_target_holds() -> None:
    tr = translate([], 40, 12, source_log=(0, 40), target_start=0)
    assert (tr.target_offset, tr.exact) == (12, True)


def test_nothing_mirrored_yet_into_an_empty_target() -> None:
    # The group has read nothing the source still holds: everything lands from the target end on.
    tr = translate([], 3, 7, source_log=(5, 20), target_start=7)
    assert (tr.target_offset, tr.exact) == (7, True)
    # It read records that are not mirrored yet: same start (it re-reads them), but not exact.
    tr = translate([], 10, 7, source_log=(5, 20), target_start=7)
    assert (tr.target_offset, tr.exact) == (7, False)


def test_unknown_content_on_the_target_starts_at_its_beginning() -> None:
    # No row, records left to read on the source, and a target that holds something: re-read.
    tr = translate([], 10, 50, source_log=(0, 20), target_start=4)
    assert (tr.target_offset, tr.exact) == (4, False)
    tr = translate([], 10, 50, target_start=4)  # source unknown (gone, no checkpoint of its end)
    assert (tr.target_offset, tr.exact) == (4, False)


# ---------------------------------------------------------------------------- the tip's storage


def test_recorder_stores_the_tip_with_the_rows_and_sqlite_replaces_it(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "o.db")
    rec = OffsetMapRecorder(store, "f", registry=None)
    b = AckBatch("f", "t", 0, "src.t", 0, 9, count=8, syncs=[(0, 0), (5, 4)])  # records 0-3, 5-8
    rec.on_acked([b])
    rec.before_commit("f", {("t", 0): 10})
    assert store.tip("f", "t", 0) == OffsetSync("t", 0, 8, 7)
    rec.on_acked([AckBatch("f", "t", 0, "src.t", 10, 14, count=4, syncs=[(10, 8)])])
    rec.before_commit("f", {("t", 0): 15})
    assert store.syncs("f", "t", 0) == rows((0, 0), (5, 4), (10, 8))
    assert store.tip("f", "t", 0) == OffsetSync("t", 0, 13, 11)
    # The same delta, no new row: the tip still moves.
    rec.on_acked([AckBatch("f", "t", 0, "src.t", 14, 20, count=6)])
    rec.before_commit("f", {("t", 0): 20})
    assert store.sync_count("f") == 3 and store.tip("f", "t", 0) == OffsetSync("t", 0, 19, 17)
    # Rows superseded by a re-mirror lower the tip to the newest row kept (never a tip
    # above rows that are gone); a recreated target drops both.
    store.delete_syncs_after("f", "t", 0, 5)
    assert store.tip("f", "t", 0) == OffsetSync("t", 0, 5, 4) and sync_window(store, "f", "t", 0, 12) == rows((5, 4))
    store.write_syncs("f", [], [OffsetSync("t", 0, 6, 5)])
    store.delete_syncs("f", [("t", 0)])
    assert store.tip("f", "t", 0) is None and store.syncs("f", "t", 0) == []
    store.close()


def test_a_reset_partition_forgets_its_pending_tip(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "o.db")
    rec = OffsetMapRecorder(store, "f", registry=None)
    rec.on_acked([AckBatch("f", "t", 0, "src.t", 0, 9, count=9, syncs=[(0, 0)])])
    rec.on_reset("f", [("t", 0)])
    rec.before_commit("f", {})
    assert store.tip("f", "t", 0) is None
    store.close()


def test_plan_without_the_source_keeps_the_checkpoints_translation_of_an_unmapped_partition() -> None:
    from failover.plan import Method, PartitionFacts, plan_partition

    # Checkpointed when the source was empty at 5 and the target at 3; the mirror copied 4
    # records since (their rows never stored): the group has not read them, so not 7.
    facts = PartitionFacts("t", "src.t", 0, 3, 7, source_offset=5, source_end=5, checkpoint_offset=3)
    assert plan_partition(Method.TRANSLATE, facts).target_offset == 3
    # Live, with the source's log read after the target's: the group read everything.
    facts = PartitionFacts("t", "src.t", 0, 3, 7, source_offset=9, source_end=9, source_log=(5, 9))
    plan = plan_partition(Method.TRANSLATE, facts)
    assert (plan.target_offset, plan.exact) == (7, True)
