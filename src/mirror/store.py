"""Offset-map storage: the embedded SQLite backend, and `open_store` for either backend.

SQLite is the default for one host: no server to run, and WAL with `synchronous=FULL`
makes every write durable (fsynced) before the call returns, which is what invariant 1
needs (the engine commits source offsets right after `write_syncs` returns). Cassandra
lives in `mirror.cassandra_store`, imported only when a config asks for it.

Beyond the `OffsetStore` protocol both backends answer `floor_sync` (the newest row with
`source_offset <= C`, one indexed query) and `next_sync` (the row after it: translating a
position inside a source gap needs it), keep the newest known source end offset per
partition (what the checkpointer saw last; an unplanned failover's estimate of what never
arrived) and count rows (storage growth is a promise: DESIGN.md invariant 4).
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from .config import CassandraStoreConfig, SqliteStoreConfig
from .errors import OffsetStoreError
from .offsetmap import Checkpoint, OffsetStore, OffsetSync

SourceEnds = Mapping[tuple[str, int], int]


class FullOffsetStore(OffsetStore, Protocol):
    """What both backends offer beyond the engine's contract (failover and tests use it)."""

    def floor_sync(self, flow: str, topic: str, partition: int, position: int) -> OffsetSync | None: ...

    def next_sync(self, flow: str, topic: str, partition: int, position: int) -> OffsetSync | None:
        """The oldest row with `source_offset > position` (where a gap ends)."""
        ...

    def delete_syncs(self, flow: str, partitions: Sequence[tuple[str, int]]) -> None:
        """Forget the rows of these source partitions (their target topic was recreated)."""
        ...

    def delete_syncs_after(self, flow: str, topic: str, partition: int, source_offset: int) -> None:
        """Forget rows with `source_offset` greater than this (superseded by a re-mirror)."""
        ...

    def write_source_ends(self, flow: str, ends: SourceEnds, time_ms: int) -> None: ...

    def source_ends(self, flow: str) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) -> (source end offset, time_ms it was seen)."""
        ...

    def sync_count(self, flow: str) -> int: ...

    def describe(self) -> str: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS offset_syncs (
    flow TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    source_offset INTEGER NOT NULL, target_offset INTEGER NOT NULL,
    PRIMARY KEY (flow, topic, partition, source_offset)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints (
    flow TEXT NOT NULL, grp TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    source_offset INTEGER NOT NULL, target_offset INTEGER NOT NULL, time_ms INTEGER NOT NULL,
    PRIMARY KEY (flow, grp, topic, partition)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS source_ends (
    flow TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    source_end INTEGER NOT NULL, time_ms INTEGER NOT NULL,
    PRIMARY KEY (flow, topic, partition)
) WITHOUT ROWID;
"""


OPEN_BUDGET = 30.0  # seconds an open may wait for other processes opening the same file


class SqliteStore:
    """`OffsetStore` in one SQLite file; safe to share between the flow and checkpoint threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = self._connect()
        except (OSError, sqlite3.Error) as exc:
            raise OffsetStoreError(f"cannot open the SQLite offset store {str(self.path)!r}: {exc}", hint="check offset_store.path and its directory's permissions") from exc
        self._lock = threading.Lock()

    def _connect(self, budget: float = OPEN_BUDGET) -> sqlite3.Connection:
        """One connection behind a lock: writes are small and batched, so a pool buys nothing.

        Several workers (`--workers N`, or containers sharing a volume) open the same file
        at once. Switching a new file to WAL, and WAL recovery, answer "database is locked"
        at once, without the busy handler; so the whole open is retried for a while.
        """
        deadline = time.monotonic() + budget
        while True:
            db = sqlite3.connect(str(self.path), timeout=budget, isolation_level=None, check_same_thread=False)
            try:
                if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")  # WAL + FULL: fsynced before commit returns
                db.executescript(_SCHEMA)
                return db
            except sqlite3.OperationalError as exc:
                db.close()
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            except BaseException:
                db.close()
                raise
            time.sleep(random.uniform(0.01, 0.05))  # jittered: the openers must not retry in step

    def describe(self) -> str:
        return f"sqlite:{self.path}"

    @contextmanager
    def _tx(self, what: str) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise OffsetStoreError(f"offset store {str(self.path)!r}: cannot {what}: {exc}") from exc

    def _query(self, what: str, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise OffsetStoreError(f"offset store {str(self.path)!r}: cannot {what}: {exc}") from exc

    # -- offset map
    def write_syncs(self, flow: str, rows: Sequence[OffsetSync]) -> None:
        if not rows:
            return
        with self._tx("write offset syncs") as db:
            db.executemany(
                "INSERT OR REPLACE INTO offset_syncs VALUES (?, ?, ?, ?, ?)",
                [(flow, r.topic, r.partition, r.source_offset, r.target_offset) for r in rows],
            )

    def delete_syncs(self, flow: str, partitions: Sequence[tuple[str, int]]) -> None:
        if not partitions:
            return
        with self._tx("delete offset syncs") as db:
            db.executemany("DELETE FROM offset_syncs WHERE flow=? AND topic=? AND partition=?", [(flow, t, p) for t, p in partitions])

    def delete_syncs_after(self, flow: str, topic: str, partition: int, source_offset: int) -> None:
        with self._tx("delete offset syncs") as db:
            db.execute("DELETE FROM offset_syncs WHERE flow=? AND topic=? AND partition=? AND source_offset>?", (flow, topic, partition, source_offset))

    def syncs(self, flow: str, topic: str, partition: int) -> list[OffsetSync]:
        rows = self._query(
            "read offset syncs",
            "SELECT source_offset, target_offset FROM offset_syncs WHERE flow=? AND topic=? AND partition=? ORDER BY source_offset",
            (flow, topic, partition),
        )
        return [OffsetSync(topic, partition, s, t) for s, t in rows]

    def floor_sync(self, flow: str, topic: str, partition: int, position: int) -> OffsetSync | None:
        rows = self._query(
            "read offset syncs",
            "SELECT source_offset, target_offset FROM offset_syncs WHERE flow=? AND topic=? AND partition=? AND source_offset<=? "
            "ORDER BY source_offset DESC LIMIT 1",
            (flow, topic, partition, position),
        )
        return OffsetSync(topic, partition, *rows[0]) if rows else None

    def next_sync(self, flow: str, topic: str, partition: int, position: int) -> OffsetSync | None:
        rows = self._query(
            "read offset syncs",
            "SELECT source_offset, target_offset FROM offset_syncs WHERE flow=? AND topic=? AND partition=? AND source_offset>? "
            "ORDER BY source_offset LIMIT 1",
            (flow, topic, partition, position),
        )
        return OffsetSync(topic, partition, *rows[0]) if rows else None

    def sync_count(self, flow: str) -> int:
        return int(self._query("count offset syncs", "SELECT COUNT(*) FROM offset_syncs WHERE flow=?", (flow,))[0][0])

    # -- checkpoints
    def write_checkpoints(self, flow: str, rows: Sequence[Checkpoint]) -> None:
        if not rows:
            return
        with self._tx("write checkpoints") as db:
            # An older checkpoint never replaces a newer one (two checkpointers, clock order).
            db.executemany(
                "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (flow, grp, topic, partition) DO UPDATE SET "
                "source_offset=excluded.source_offset, target_offset=excluded.target_offset, time_ms=excluded.time_ms "
                "WHERE excluded.time_ms >= checkpoints.time_ms",
                [(flow, c.group, c.topic, c.partition, c.source_offset, c.target_offset, c.time_ms) for c in rows],
            )

    def checkpoints(self, flow: str, group: str) -> list[Checkpoint]:
        rows = self._query(
            "read checkpoints",
            "SELECT topic, partition, source_offset, target_offset, time_ms FROM checkpoints WHERE flow=? AND grp=? ORDER BY topic, partition",
            (flow, group),
        )
        return [Checkpoint(group, t, p, s, o, ms) for t, p, s, o, ms in rows]

    # -- source ends
    def write_source_ends(self, flow: str, ends: SourceEnds, time_ms: int) -> None:
        if not ends:
            return
        with self._tx("write source end offsets") as db:
            db.executemany(
                "INSERT OR REPLACE INTO source_ends VALUES (?, ?, ?, ?, ?)",
                [(flow, t, p, end, time_ms) for (t, p), end in ends.items()],
            )

    def source_ends(self, flow: str) -> dict[tuple[str, int], tuple[int, int]]:
        rows = self._query("read source end offsets", "SELECT topic, partition, source_end, time_ms FROM source_ends WHERE flow=?", (flow,))
        return {(t, p): (e, ms) for t, p, e, ms in rows}

    def close(self) -> None:
        with self._lock:
            self._db.close()


def open_store(config: SqliteStoreConfig | CassandraStoreConfig, *, base_dir: Path | None = None) -> FullOffsetStore:
    """The configured backend. A relative SQLite path is taken from `base_dir` (default: cwd)."""
    if isinstance(config, SqliteStoreConfig):
        path = Path(config.path)
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        return SqliteStore(path)
    from .cassandra_store import CassandraStore

    return CassandraStore(config)
