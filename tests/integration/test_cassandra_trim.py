"""The Cassandra store trims many partitions' superseded rows as SQLite does (real Cassandra).

At its first commit a restarted `mirror run` removes, for every partition it copies, the rows
an earlier run stored beyond where this one starts again (`OffsetMapRecorder._reconcile`).
A tip past the cut is lowered to the newest row kept before the rows go, or removed after
them when none is kept.
"""

from __future__ import annotations

from pathlib import Path

from mirror.config import CassandraStoreConfig
from mirror.domain.offsetmap import OffsetSync
from mirror.store.cassandra import CassandraStore
from mirror.store.sqlite import SqliteStore

# partition -> (rows (source, target), tip (source, target) or None, cut)
CASES: dict[int, tuple[list[tuple[int, int]], tuple[int, int] | None, int]] = {
    0: ([(0, 0), (5, 4), (10, 8)], (19, 17), 7),  # tip past the cut, a row kept: lowered to (5, 4)
    1: ([(3, 3), (8, 9)], (12, 13), 1),  # tip past the cut, no row kept: removed with the rows
    2: ([(0, 0), (5, 4)], (6, 5), 9),  # tip below the cut: nothing goes
    3: ([(0, 2), (4, 7)], None, 2),  # no tip: the rows beyond the cut go
    4: ([], None, 0),  # nothing stored
}


def _fill(store: CassandraStore | SqliteStore, flow: str) -> None:
    for p, (rows, tip, _cut) in CASES.items():
        store.write_syncs(
            flow,
            [OffsetSync("t", p, s, t) for s, t in rows],
            [OffsetSync("t", p, *tip)] if tip is not None else [],
        )


def _state(store: CassandraStore | SqliteStore, flow: str) -> dict[int, tuple[list[OffsetSync], OffsetSync | None]]:
    return {p: (store.syncs(flow, "t", p), store.tip(flow, "t", p)) for p in CASES}


def test_cassandra_trims_many_partitions_as_sqlite_does(cassandra, unique: str, tmp_path: Path) -> None:
    cuts = {("t", p): cut for p, (_rows, _tip, cut) in CASES.items()}
    cas = CassandraStore(
        CassandraStoreConfig(
            kind="cassandra", contact_points=[cassandra.contact_point], keyspace=f"trim_{unique}", consistency="ONE"
        )
    )
    lite = SqliteStore(tmp_path / "o.db")
    try:
        for store in (cas, lite):
            _fill(store, "f")
            store.delete_syncs_after_many("f", cuts)
        got = _state(cas, "f")
        assert got == _state(lite, "f")
        assert got[0] == ([OffsetSync("t", 0, 0, 0), OffsetSync("t", 0, 5, 4)], OffsetSync("t", 0, 5, 4))
        assert got[1] == ([], None)
        assert got[2][1] == OffsetSync("t", 2, 6, 5) and len(got[2][0]) == 2
        assert got[3] == ([OffsetSync("t", 3, 0, 2)], None)
        # The one-partition form is the same operation.
        _fill(cas, "g")
        cas.delete_syncs_after("g", "t", 0, 7)
        assert _state(cas, "g")[0] == got[0]
    finally:
        cas.close()
        lite.close()
