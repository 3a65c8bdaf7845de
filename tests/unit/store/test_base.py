"""`group_sync_windows`: many groups' offset-map windows, each distinct position read once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mirror.domain.offsetmap import OffsetSync
from mirror.store import SqliteStore, group_sync_windows, sync_windows


class CountingStore:
    """The SQLite store, counting its bulk window reads."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.reads: list[dict[Any, int]] = []

    def windows(self, flow: str, positions: dict[Any, int]) -> Any:
        self.reads.append(dict(positions))
        return self.store.windows(flow, positions)


def test_many_groups_windows_match_each_groups_own_in_as_many_reads_as_distinct_positions(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "w.db")
    store.write_syncs("f", [OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 20, 10), OffsetSync("t", 1, 5, 50)])
    positions = {
        "a": {("t", 0): 25, ("t", 1): 5},
        "b": {("t", 0): 25, ("t", 1): 5},  # the same as a: read once
        "c": {("t", 0): 3, ("t", 1): 5},
        "d": {("t", 0): 25},
        "e": {},
    }
    counting = CountingStore(store)
    got = group_sync_windows(counting, "f", positions)  # type: ignore[arg-type]
    assert got == {g: sync_windows(store, "f", offs) for g, offs in positions.items()}
    assert len(counting.reads) == 2  # t[0] stands at two positions, t[1] at one
    assert sum(len(r) for r in counting.reads) == 3
    assert group_sync_windows(counting, "f", {}) == {}  # type: ignore[arg-type]
    store.close()
