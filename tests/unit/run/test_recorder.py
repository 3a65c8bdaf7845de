"""The offset-map recorder: rows written before the commit they allow, the commit vetoed while the store is down,
repeats skipped, a restart's superseded rows trimmed, and its buffer bounded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from mirror.domain.acks import AckBatch
from mirror.domain.offsetmap import OffsetSync
from mirror.errors import OffsetStoreError
from mirror.run.recorder import OffsetMapRecorder
from mirror.store import SqliteStore


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


def test_recorder_backlog_is_bounded():
    class Down:
        def write_syncs(self, flow, rows):
            from mirror.errors import OffsetStoreError

            raise OffsetStoreError("down")

    from mirror.domain.acks import AckBatch, backlog_full

    rec = OffsetMapRecorder(Down(), "f", registry=None)  # type: ignore[arg-type]
    rec.max_pending = 3
    for i in range(5):
        b = AckBatch("f", "t", 0, "x.t", i, i + 1, syncs=[(i, i * 2)])
        rec.on_acked([b])
    assert rec.pending == 5 and rec.backlog_full and backlog_full([rec])
    assert not backlog_full([object()])  # listeners without a buffer never hold reading back
    assert OffsetSync("t", 0, 1, 2).delta == 1
