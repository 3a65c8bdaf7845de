"""The SQLite offset store: rows, tips, checkpoints and windows on a local file, opened by several workers at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mirror.config import SqliteStoreConfig
from mirror.domain.offsetmap import Checkpoint, OffsetSync
from mirror.errors import OffsetStoreError
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


def test_sync_window_and_group_patterns(tmp_path: Path) -> None:
    from mirror.run.checkpointer import matching_groups, sync_window

    store = SqliteStore(tmp_path / "o.db")
    store.write_syncs("f", [OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 20, 10)])
    assert sync_window(store, "f", "t", 0, 15) == [OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 20, 10)]
    assert sync_window(store, "f", "t", 0, 25) == [OffsetSync("t", 0, 20, 10)]
    assert sync_window(store, "f", "t", 1, 5) == []
    assert matching_groups(
        ["billing.*", "analytics"], ["billing-a", "analytics", "analytics2", "mirror.f"], exclude={"mirror.f"}
    ) == ["billing-a", "analytics"]


def test_workers_opening_one_new_store_at_once_all_succeed(tmp_path: Path) -> None:
    """`--workers N` starts N processes that open the same new file together; switching it to
    WAL failed some of them at once with "database is locked" (busy handler not consulted)
    until the open was retried. Before the fix: ~1 round in 4 had a failure."""
    script = Path(__file__).resolve().parents[2] / "support" / "store_race.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "40", "6"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_bulk_windows_match_the_one_by_one_reads(tmp_path: Path) -> None:
    """`sync_windows` (three statements for any number of partitions) answers what
    `floor_sync`/`next_sync`/`floor_sync(NEWEST)` answer partition by partition."""
    from mirror.store import NEWEST, SqliteStore, sync_window, sync_windows

    store = SqliteStore(tmp_path / "w.db")
    store.write_syncs(
        "f",
        [OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 20, 10), OffsetSync("t", 0, 40, 35), OffsetSync("u", 3, 7, 9)],
    )
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
    assert sync_windows(store, "f", {("t", 0): 0})[("t", 0)].rows == [
        OffsetSync("t", 0, 0, 0),
        OffsetSync("t", 0, 20, 10),
    ]  # reused temp table
    store.close()


def test_created_target_topics_are_kept_per_flow_and_forgotten_one_by_one(tmp_path: Path) -> None:
    from mirror.run.recorder import OffsetMapRecorder
    from mirror.store.base import CreatedTopic, CreatedTopicStore

    store = SqliteStore(tmp_path / "o.db")
    assert isinstance(store, CreatedTopicStore)
    recorder = OffsetMapRecorder(store, "f", registry=None)
    recorder.on_targets_created("f", {"nyc.a": ("a", "id-a"), "nyc.b": ("b", "")})
    found = store.created_topics("f")
    assert [(c.target, c.source, c.topic_id) for c in found] == [("nyc.a", "a", "id-a"), ("nyc.b", "b", "")]
    assert all(isinstance(c, CreatedTopic) and c.time_ms > 0 for c in found)
    assert store.created_topics("other") == []
    # Created again (the target was deleted and the worker made it anew): the newest id counts.
    recorder.on_targets_created("f", {"nyc.a": ("a", "id-a2")})
    store.forget_created_topic("f", "nyc.b")
    assert [(c.target, c.topic_id) for c in store.created_topics("f")] == [("nyc.a", "id-a2")]


def test_a_created_topic_keeps_its_source_cluster_id_and_an_older_file_gains_the_column(tmp_path: Path) -> None:
    import sqlite3

    from mirror.run.recorder import OffsetMapRecorder

    path = tmp_path / "o.db"
    with sqlite3.connect(path) as db:  # the table as it was first written, without the column
        db.execute(
            "CREATE TABLE created_topics (flow TEXT NOT NULL, target TEXT NOT NULL, source TEXT NOT NULL, "
            "topic_id TEXT NOT NULL, time_ms INTEGER NOT NULL, PRIMARY KEY (flow, target)) WITHOUT ROWID"
        )
        db.execute("INSERT INTO created_topics VALUES ('f', 'nyc.old', 'old', 'id-old', 1)")
    db.close()
    store = SqliteStore(path)
    OffsetMapRecorder(store, "f", registry=None).on_targets_created(
        "f", {"nyc.a": ("a", "id-a")}, source_cluster_id="cluster-1"
    )
    found = {c.target: c.source_cluster_id for c in store.created_topics("f")}
    assert found == {"nyc.a": "cluster-1", "nyc.old": ""}
    store.close()
