"""MM2's progress records decoded, and turned into offset-map rows that translate exactly
(or, where the source cannot tell, towards re-reading, never skipping)."""

from __future__ import annotations

import json
import random
import struct

import pytest

from mirror.domain.mm2_offsets import (
    Mm2Checkpoint,
    Mm2FormatError,
    Mm2Sync,
    anchors,
    checkpoint_target,
    decode_checkpoint,
    decode_offset_sync,
    latest_checkpoints,
    partition_map,
    resume_positions,
)
from mirror.domain.offsetmap import translate


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def sync_record(topic: str, partition: int, upstream: int, downstream: int) -> tuple[bytes, bytes]:
    return _s(topic) + struct.pack(">i", partition), struct.pack(">qq", upstream, downstream)


def offset_record(
    cluster: str, topic: str, partition: int, offset: int | None, connector: str = "MirrorSourceConnector"
) -> tuple[bytes, bytes | None]:
    key = json.dumps([connector, {"cluster": cluster, "partition": partition, "topic": topic}]).encode()
    return key, None if offset is None else json.dumps({"offset": offset}).encode()


def test_resume_after_the_last_committed_record_newest_wins() -> None:
    records = [
        offset_record("nyc", "orders", 0, 10),
        offset_record("nyc", "orders", 0, 41),
        offset_record("nyc", "orders", 1, 5),
        offset_record("nyc", "orders", 1, None),  # reset: MM2 would start this partition afresh
        offset_record("la", "orders", 2, 99),  # another source cluster's pair
        offset_record("nyc", "orders", 3, 7, connector="MirrorCheckpointConnector"),
    ]
    assert resume_positions(records, "nyc") == {("orders", 0): 42}


def test_garbled_records_are_named() -> None:
    with pytest.raises(Mm2FormatError):
        resume_positions([(b"not json", b"{}")], "nyc")
    with pytest.raises(Mm2FormatError):
        resume_positions([offset_record("nyc", "t", 0, 1)[0:1] + (b'{"nope": 1}',)], "nyc")
    with pytest.raises(Mm2FormatError):
        decode_offset_sync(b"\x00\x05ab", b"")


def test_offset_syncs_and_checkpoints_decode_as_mm2_writes_them() -> None:
    assert decode_offset_sync(*sync_record("orders", 3, 120, 118)) == Mm2Sync("orders", 3, 120, 118)
    key = _s("billing") + _s("orders") + struct.pack(">i", 2)
    value = struct.pack(">h", 0) + struct.pack(">qq", 50, 48) + _s("")
    assert decode_checkpoint(key, value, 1234) == Mm2Checkpoint("billing", "orders", 2, 50, 48, 1234)
    with pytest.raises(Mm2FormatError):
        decode_checkpoint(key, struct.pack(">h", 9) + value[2:], 0)
    older = Mm2Checkpoint("g", "t", 0, 1, 1, 1)
    newer = Mm2Checkpoint("g", "t", 0, 9, 9, 2)
    assert latest_checkpoints([older, newer]) == [newer]


def test_a_restarted_task_supersedes_the_syncs_it_copies_again() -> None:
    syncs = [
        Mm2Sync("t", 0, 0, 0),
        Mm2Sync("t", 0, 100, 100),
        Mm2Sync("t", 0, 200, 200),
        Mm2Sync("t", 0, 150, 230),
        Mm2Sync("t", 0, 250, 330),
    ]
    assert anchors(syncs) == {("t", 0): [(0, 0), (100, 100), (150, 230), (250, 330)]}


def _never_read(start: int, end: int) -> list[int]:
    raise AssertionError(f"read {start}..{end} though the counts settle it")


def test_contiguous_copies_give_one_row_and_read_only_the_last_stretch() -> None:
    reads = []

    def read(start: int, end: int) -> list[int]:
        reads.append((start, end))
        return list(range(start, end))

    pm = partition_map("t", 0, [(0, 0), (100, 100)], 150, read)
    assert [(r.source_offset, r.target_offset) for r in pm.rows] == [(0, 0)]
    assert (pm.tip.source_offset, pm.tip.target_offset) == (149, 149)
    assert reads == [(100, 150)] and pm.read == 50 and pm.inexact == 0


def simulate(rng: random.Random, n: int) -> tuple[list[int], list[tuple[int, int]], dict[int, int]]:
    """A source partition with gaps (markers, aborted or compacted records), MM2's copies
    from target offset 0, and the syncs MM2 would emit, some dropped as under load."""
    offsets, o = [], 0
    for _ in range(n):
        o += 1 if rng.random() > 0.15 else rng.randint(2, 4)
        offsets.append(o)
    truth = {s: t for t, s in enumerate(offsets)}
    syncs, last = [], None
    for t, s in enumerate(offsets):
        skipped = last is not None and s - last != 1
        if t == 0 or (skipped or t - syncs[-1][1] >= 10) and rng.random() > 0.3:
            syncs.append((s, t))
        last = s
    return offsets, syncs, truth


def expected_target(offsets: list[int], truth: dict[int, int], position: int) -> int:
    """Where a group at source `position` (next record to read) resumes on the target."""
    return next((truth[s] for s in offsets if s >= position), len(offsets))


@pytest.mark.parametrize("seed", range(20))
def test_translation_is_exact_everywhere_mm2_copied(seed: int) -> None:
    rng = random.Random(seed)
    offsets, syncs, truth = simulate(rng, 300)
    resume = offsets[rng.randrange(150, 300)] + 1
    mine = [s for s in offsets if s < resume]

    def read(start: int, end: int) -> list[int]:
        return [s for s in offsets if start <= s < end]

    pm = partition_map("t", 0, syncs, resume, read)
    for position in range(offsets[0], resume + 1):
        got = translate(pm.rows, position, target_end=len(mine), tip=pm.tip).target_offset
        assert got == expected_target(mine, truth, position), (seed, position)


@pytest.mark.parametrize("seed", range(10))
def test_records_gone_from_the_source_err_towards_rereading(seed: int) -> None:
    rng = random.Random(seed)
    offsets, syncs, truth = simulate(rng, 200)
    resume = offsets[-1] + 1
    pm = partition_map("t", 0, syncs, resume, lambda start, end: [])  # retention took them all
    assert pm.inexact > 0
    for position in range(offsets[0], resume + 1):
        got = translate(pm.rows, position, target_end=len(offsets), tip=pm.tip).target_offset
        assert got <= expected_target(offsets, truth, position), (seed, position)


def test_copies_made_twice_by_a_restart_translate_to_the_later_copies() -> None:
    # Records 0..99 copied to 0..99; the task restarted from committed offset 60 and copied
    # 60..149 again to 100..189. MM2 committed up to 149.
    syncs = anchors([Mm2Sync("t", 0, 0, 0), Mm2Sync("t", 0, 60, 100), Mm2Sync("t", 0, 140, 180)])[("t", 0)]
    pm = partition_map("t", 0, syncs, 150, lambda start, end: list(range(start, end)))
    assert translate(pm.rows, 30, 190, tip=pm.tip).target_offset == 30
    assert translate(pm.rows, 70, 190, tip=pm.tip).target_offset == 110
    assert translate(pm.rows, 150, 190, tip=pm.tip).target_offset == 190


def test_syncs_past_where_mm2_committed_are_left_out() -> None:
    # Killed: MM2 copied up to 199 but committed only up to 119; the mirror copies 120.. again.
    pm = partition_map("t", 0, [(0, 0), (100, 100), (180, 180)], 120, lambda start, end: list(range(start, end)))
    assert (pm.tip.source_offset, pm.tip.target_offset) == (119, 119)
    assert [(r.source_offset, r.target_offset) for r in pm.rows] == [(0, 0)]


def test_no_syncs_no_rows() -> None:
    assert partition_map("t", 0, [], 50, _never_read).rows == []


def test_checkpoints_translate_again_with_the_imported_rows() -> None:
    pm = partition_map("t", 0, [(0, 0), (10, 9)], 20, lambda start, end: [s for s in range(start, end) if s != 5])
    cp = Mm2Checkpoint("g", "t", 0, upstream=8, downstream=1, time_ms=0)  # MM2 rounds down to its last sync
    assert checkpoint_target(cp, pm, target_end=19) == 7
    assert checkpoint_target(cp, None, target_end=19) == 1


def test_records_gone_before_a_restart_never_translate_past_their_copies() -> None:
    # Records 0..59 copied to 0..59 with one sync at (0, 0); MM2 committed up to 49 and
    # restarted there, copying 50..79 again to 60..89 (its first sync (50, 60)). Retention
    # has since taken source records 0..39. The next sync's delta (10) belongs to the new
    # lifetime: applied to 40..49 it lands past their only copies (40..49).
    syncs = anchors([Mm2Sync("t", 0, 0, 0), Mm2Sync("t", 0, 50, 60)])[("t", 0)]
    pm = partition_map("t", 0, syncs, 80, lambda start, end: list(range(max(start, 40), end)))
    assert pm.inexact == 1
    for position in range(0, 50):
        got = translate(pm.rows, position, target_end=90, tip=pm.tip).target_offset
        assert got <= position, position  # the copy of `position` is at `position`
