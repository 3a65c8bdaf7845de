"""The SQLite offset store and the recorder's commit veto (local file, no network)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from mirror.config import SqliteStoreConfig
from mirror.domain.acks import AckBatch
from mirror.domain.offsetmap import Checkpoint, OffsetSync
from mirror.errors import OffsetStoreError
from mirror.run.recorder import OffsetMapRecorder
from mirror.store import SqliteStore, open_store


def test_sqlite_roundtrip_floor_next_and_checkpoints(tmp_path: Path) -> None:
    store = open_store(SqliteStoreConfig(path=str(tmp_path / "o.db")))
    store.write_syncs("f", [OffsetSync("t", 0, 495, 500), OffsetSync("t", 0, 596, 600), OffsetSync("t", 1, 0, 0)])
    assert [r.source_offset for r in store.syncs("f", "t", 0)] == [495, 596]
    assert store.floor_sync("f", "t", 0, 550) == OffsetSync("t", 0, 495, 500)
    assert store.floor_sync("f", "t", 0, 494) is None
    assert store.next_sync("f", "t", 0, 550) == OffsetSync("t", 0, 596, 600)
    assert store.next_sync("f", "t", 0, 596) is None
    assert store.sync_count("f") == 3 and store.sync_count("other") == 0
    store.write_checkpoints("f", [Checkpoint("g", "t", 0, 10, 15, 2000)])
    store.write_checkpoints("f", [Checkpoint("g", "t", 0, 5, 9, 1000)])  # older: ignored
    assert store.checkpoints("f", "g") == [Checkpoint("g", "t", 0, 10, 15, 2000)]
    store.write_source_ends("f", {("t", 0): 700}, 3000)
    assert store.source_ends("f") == {("t", 0): (700, 3000)}
    store.close()
    # Durable: a new connection (a restarted mirror) sees the rows.
    again = SqliteStore(tmp_path / "o.db")
    assert again.sync_count("f") == 3
    again.close()


def test_sqlite_unopenable_path_is_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(OffsetStoreError):
        SqliteStore(tmp_path / "file" / "o.db")


class FlakyStore:
    """An `OffsetStore` whose writes fail while `down` (stands in for an outage of the backend)."""

    def __init__(self) -> None:
        self.down = False
        self.rows: list[OffsetSync] = []

    def write_syncs(self, flow: str, rows: Sequence[OffsetSync], tips: Sequence[OffsetSync] = ()) -> None:
        if self.down:
            raise OffsetStoreError("store is down")
        self.rows += rows
        self.tips = {(t.topic, t.partition): t for t in tips}

    def close(self) -> None:
        pass


def batch(topic: str, part: int, syncs: list[tuple[int, int]]) -> AckBatch:
    return AckBatch("f", topic, part, f"src.{topic}", syncs[0][0] if syncs else 0, 0, syncs=syncs)


def test_recorder_writes_before_commit_and_vetoes_while_down() -> None:
    store = FlakyStore()
    reg = CollectorRegistry()
    rec = OffsetMapRecorder(store, "f", registry=reg)  # type: ignore[arg-type]
    rec.on_acked([batch("t", 0, [(0, 0)]), batch("t", 1, [])])
    assert store.rows == []  # nothing written on the ack path
    rec.before_commit("f", {("t", 0): 10})
    assert store.rows == [OffsetSync("t", 0, 0, 0)]
    store.down = True
    rec.on_acked([batch("t", 0, [(20, 10)])])
    with pytest.raises(OffsetStoreError):
        rec.before_commit("f", {("t", 0): 30})
    assert reg.get_sample_value("mirror_offset_store_healthy", {"flow": "f"}) == 0
    assert reg.get_sample_value("mirror_offset_store_errors_total", {"flow": "f"}) == 1
    assert rec.pending == 1 and rec.failing_since is not None
    store.down = False
    rec.before_commit("f", {("t", 0): 30})
    assert store.rows[-1] == OffsetSync("t", 0, 20, 10) and rec.pending == 0
    assert reg.get_sample_value("mirror_offset_store_healthy", {"flow": "f"}) == 1
    assert reg.get_sample_value("mirror_offset_sync_rows_total", {"flow": "f"}) == 2


def test_recorder_skips_rows_repeating_the_stored_delta() -> None:
    store = FlakyStore()
    rec = OffsetMapRecorder(store, "f", registry=None)  # type: ignore[arg-type]
    rec.on_acked([batch("t", 0, [(0, 5)])])
    rec.before_commit("f", {})
    # A restarted flow reports its first record as a change even with the same delta.
    rec.on_acked([batch("t", 0, [(100, 105), (200, 200), (300, 305)])])
    rec.before_commit("f", {})
    assert [(r.source_offset, r.target_offset) for r in store.rows] == [(0, 5), (200, 200), (300, 305)]


def test_recorder_reset_deletes_old_rows_before_new_ones(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "o.db")
    rec = OffsetMapRecorder(store, "f", registry=None)
    rec.on_acked([batch("t", 0, [(0, 0), (500, 480)]), batch("t", 1, [(0, 3)])])
    rec.before_commit("f", {})
    rec.on_reset("f", [("t", 0)])
    rec.on_acked([batch("t", 0, [(0, 0)])])  # mirrored again into a new target topic
    rec.before_commit("f", {})
    assert store.syncs("f", "t", 0) == [OffsetSync("t", 0, 0, 0)]
    assert store.syncs("f", "t", 1) == [OffsetSync("t", 1, 0, 3)]


def test_sync_window_and_group_patterns(tmp_path: Path) -> None:
    from mirror.run.checkpointer import matching_groups, sync_window

    store = SqliteStore(tmp_path / "o.db")
    store.write_syncs("f", [OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 20, 10)])
    assert sync_window(store, "f", "t", 0, 15) == [OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 20, 10)]
    assert sync_window(store, "f", "t", 0, 25) == [OffsetSync("t", 0, 20, 10)]
    assert sync_window(store, "f", "t", 1, 5) == []
    assert matching_groups(["billing.*", "analytics"], ["billing-a", "analytics", "analytics2", "mirror.f"], exclude={"mirror.f"}) == ["billing-a", "analytics"]


def test_restart_trims_rows_of_superseded_copies_and_skips_repeats(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "o.db")
    first = OffsetMapRecorder(store, "f", registry=None)
    first.on_acked([batch("t", 0, [(0, 0), (50, 45), (80, 77)])])  # gaps at 45..49 and a duplicate at 77
    first.before_commit("f", {})
    # Crash: committed position was 60. The next run re-mirrors 60.. into new copies (target 90..).
    second = OffsetMapRecorder(store, "f", registry=None)
    second.on_acked([batch("t", 0, [(60, 90)])])
    second.before_commit("f", {})
    assert store.syncs("f", "t", 0) == [OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 50, 45), OffsetSync("t", 0, 60, 90)]
    # A clean restart at the same delta writes nothing new.
    third = OffsetMapRecorder(store, "f", registry=None)
    third.on_acked([batch("t", 0, [(100, 130)])])
    third.before_commit("f", {})
    assert store.sync_count("f") == 3 and third.rows_written == 0



class TrimFailsOnce(SqliteStore):
    """SQLite whose first bulk trim fails (the store away at the first flush of a restart)."""

    failed = False

    def delete_syncs_after_many(self, flow: str, cuts: Mapping[tuple[str, int], int]) -> None:
        if not self.failed:
            self.failed = True
            raise OffsetStoreError("store is down")
        super().delete_syncs_after_many(flow, cuts)


def test_restart_trim_is_retried_after_a_store_failure_and_made_in_bulk(tmp_path: Path) -> None:
    """The superseded rows of every partition go in one call, and a partition counts as
    reconciled only once its trim succeeded: a failed first flush trims at the next one."""
    first = OffsetMapRecorder(SqliteStore(tmp_path / "o.db"), "f", registry=None)
    first.on_acked([batch("t", p, [(0, 0), (50, 45)]) for p in range(3)])
    first.before_commit("f", {})
    store = TrimFailsOnce(tmp_path / "o.db")
    second = OffsetMapRecorder(store, "f", registry=None)
    second.on_acked([batch("t", p, [(30, 90)]) for p in range(3)])  # restarted from 30
    with pytest.raises(OffsetStoreError):
        second.before_commit("f", {})
    second.before_commit("f", {})
    for p in range(3):
        assert store.syncs("f", "t", p) == [OffsetSync("t", p, 0, 0), OffsetSync("t", p, 30, 90)]


def test_workers_opening_one_new_store_at_once_all_succeed(tmp_path: Path) -> None:
    """`--workers N` starts N processes that open the same new file together; switching it to
    WAL failed some of them at once with "database is locked" (busy handler not consulted)
    until the open was retried. Before the fix: ~1 round in 4 had a failure."""
    script = Path(__file__).resolve().parents[1] / "support" / "store_race.py"
    done = subprocess.run([sys.executable, str(script), str(tmp_path), "40", "6"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_bulk_windows_match_the_one_by_one_reads(tmp_path: Path) -> None:
    """`sync_windows` (three statements for any number of partitions) answers what
    `floor_sync`/`next_sync`/`floor_sync(NEWEST)` answer partition by partition."""
    from mirror.store import NEWEST, SqliteStore, sync_window, sync_windows

    store = SqliteStore(tmp_path / "w.db")
    store.write_syncs("f", [OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 20, 10), OffsetSync("t", 0, 40, 35), OffsetSync("u", 3, 7, 9)])
    store.write_syncs("other", [OffsetSync("t", 0, 5, 500)])  # another flow's rows never leak in
    positions = {("t", 0): 25, ("u", 3): 1, ("u", 3 + 1): 4, ("v", 0): 0}
    got = sync_windows(store, "f", positions)
    assert set(got) == set(positions)
    for (t, p), pos in positions.items():
        assert got[(t, p)].rows == sync_window(store, "f", t, p, pos)
        assert got[(t, p)].newest == store.floor_sync("f", t, p, NEWEST)
    assert got[("t", 0)].floor == OffsetSync("t", 0, 20, 10) and got[("t", 0)].next == OffsetSync("t", 0, 40, 35)
    assert got[("u", 3)].floor is None and got[("u", 3)].next == OffsetSync("u", 3, 7, 9)
    assert sync_windows(store, "f", {}) == {}
    assert sync_windows(store, "f", {("t", 0): 0})[("t", 0)].rows == [OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 20, 10)]  # reused temp table
    store.close()
