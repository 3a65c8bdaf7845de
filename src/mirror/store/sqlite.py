"""Offset-map storage: the embedded SQLite backend.

SQLite is the default for one host: no server to run, and WAL with `synchronous=FULL`
makes every write durable (fsynced) before the call returns, which is what invariant 1
needs (the engine commits source offsets right after `write_syncs` returns). Cassandra
lives in `mirror.store.cassandra`, imported only when a config asks for it.

Each partition's tip (its newest acknowledged record, up to which the rows are complete) is
one row, replaced at every write. Beyond the `OffsetStore` protocol both backends answer
`floor_sync` (the newest row with
`source_offset <= C`, one indexed query) and `next_sync` (the row after it: translating a
position inside a source gap needs it), keep the newest known source end offset per
partition (what the checkpointer saw last; an unplanned failover's estimate of what never
arrived) and count rows (storage growth is a promise: docs/design.md invariant 4).
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mirror.domain.gaps import GapReason, SourceGap
from mirror.domain.offsetmap import Checkpoint, OffsetSync
from mirror.errors import OffsetStoreError
from mirror.store.base import CreatedTopic, SourceEnds, SyncWindow

_SCHEMA = """
CREATE TABLE IF NOT EXISTS offset_syncs (
    flow TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    source_offset INTEGER NOT NULL, target_offset INTEGER NOT NULL,
    PRIMARY KEY (flow, topic, partition, source_offset)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS offset_tips (
    flow TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    source_offset INTEGER NOT NULL, target_offset INTEGER NOT NULL,
    PRIMARY KEY (flow, topic, partition)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints (
    flow TEXT NOT NULL, grp TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    source_offset INTEGER NOT NULL, target_offset INTEGER NOT NULL, time_ms INTEGER NOT NULL,
    PRIMARY KEY (flow, grp, topic, partition)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS offset_gaps (
    flow TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    first_offset INTEGER NOT NULL, last_offset INTEGER NOT NULL, reason TEXT NOT NULL,
    PRIMARY KEY (flow, topic, partition, first_offset)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS source_ends (
    flow TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    source_end INTEGER NOT NULL, time_ms INTEGER NOT NULL,
    PRIMARY KEY (flow, topic, partition)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS created_topics (
    flow TEXT NOT NULL, target TEXT NOT NULL, source TEXT NOT NULL, topic_id TEXT NOT NULL,
    time_ms INTEGER NOT NULL, source_cluster_id TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (flow, target)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS acl_syncs (
    flow TEXT NOT NULL, acl TEXT NOT NULL,
    PRIMARY KEY (flow, acl)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS source_topics (
    flow TEXT NOT NULL, topic TEXT NOT NULL, topic_id TEXT NOT NULL,
    PRIMARY KEY (flow, topic)
) WITHOUT ROWID;
"""
# Columns added to a table after it first shipped: (table, column, definition), added where missing.
_ADDED_COLUMNS = (("created_topics", "source_cluster_id", "TEXT NOT NULL DEFAULT ''"),)


OPEN_BUDGET = 30.0  # seconds an open may wait for other processes opening the same file


class SqliteStore:
    """`OffsetStore` in one SQLite file; safe to share between the flow and checkpoint threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = self._connect()
        except (OSError, sqlite3.Error) as exc:
            raise OffsetStoreError(
                f"cannot open the SQLite offset store {str(self.path)!r}: {exc}",
                hint="check offset_store.path and its directory's permissions",
            ) from exc
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
                for table, column, definition in _ADDED_COLUMNS:
                    if column not in {row[1] for row in db.execute(f"PRAGMA table_info({table})")}:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
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
    def write_syncs(self, flow: str, rows: Sequence[OffsetSync], tips: Sequence[OffsetSync] = ()) -> None:
        if not rows and not tips:
            return
        with self._tx("write offset syncs") as db:  # one transaction: rows and their tip together
            db.executemany(
                "INSERT OR REPLACE INTO offset_syncs VALUES (?, ?, ?, ?, ?)",
                [(flow, r.topic, r.partition, r.source_offset, r.target_offset) for r in rows],
            )
            db.executemany(
                "INSERT OR REPLACE INTO offset_tips VALUES (?, ?, ?, ?, ?)",
                [(flow, r.topic, r.partition, r.source_offset, r.target_offset) for r in tips],
            )

    def write_gaps(self, flow: str, gaps: Sequence[SourceGap]) -> None:
        if not gaps:
            return
        with self._tx("write source gaps") as db:
            db.executemany(
                "INSERT OR REPLACE INTO offset_gaps VALUES (?, ?, ?, ?, ?, ?)",
                [(flow, g.topic, g.partition, g.first, g.last, g.reason.value) for g in gaps],
            )

    def gaps(self, flow: str) -> dict[tuple[str, int], list[SourceGap]]:
        rows = self._query(
            "read source gaps",
            "SELECT topic, partition, first_offset, last_offset, reason FROM offset_gaps WHERE flow=? "
            "ORDER BY topic, partition, first_offset",
            (flow,),
        )
        out: dict[tuple[str, int], list[SourceGap]] = {}
        for t, p, first, last, reason in rows:
            out.setdefault((t, p), []).append(SourceGap(t, p, first, last, GapReason(reason)))
        return out

    def tip(self, flow: str, topic: str, partition: int) -> OffsetSync | None:
        rows = self._query(
            "read offset-map tip",
            "SELECT source_offset, target_offset FROM offset_tips WHERE flow=? AND topic=? AND partition=?",
            (flow, topic, partition),
        )
        return OffsetSync(topic, partition, *rows[0]) if rows else None

    def tips(self, flow: str, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], OffsetSync | None]:
        """`tip` of many partitions in one statement (the flow's tips, one row per partition)."""
        want = set(partitions)
        rows = self._query(
            "read offset-map tips",
            "SELECT topic, partition, source_offset, target_offset FROM offset_tips WHERE flow=?",
            (flow,),
        )
        found = {(t, p): OffsetSync(t, p, so, to) for t, p, so, to in rows if (t, p) in want}
        return {k: found.get(k) for k in want}

    def delete_syncs(self, flow: str, partitions: Sequence[tuple[str, int]]) -> None:
        if not partitions:
            return
        with self._tx("delete offset syncs") as db:
            db.executemany(
                "DELETE FROM offset_syncs WHERE flow=? AND topic=? AND partition=?",
                [(flow, t, p) for t, p in partitions],
            )
            db.executemany(
                "DELETE FROM offset_tips WHERE flow=? AND topic=? AND partition=?",
                [(flow, t, p) for t, p in partitions],
            )
            # Checkpoints translated into the old topic mean something else in the new one.
            db.executemany(
                "DELETE FROM checkpoints WHERE flow=? AND topic=? AND partition=?",
                [(flow, t, p) for t, p in partitions],
            )
            db.executemany(
                "DELETE FROM offset_gaps WHERE flow=? AND topic=? AND partition=?",
                [(flow, t, p) for t, p in partitions],
            )

    def delete_syncs_after(self, flow: str, topic: str, partition: int, source_offset: int) -> None:
        self.delete_syncs_after_many(flow, {(topic, partition): source_offset})

    def delete_syncs_after_many(self, flow: str, cuts: Mapping[tuple[str, int], int]) -> None:
        """`delete_syncs_after` for many partitions, in one transaction (one fsync)."""
        if not cuts:
            return
        with self._tx("delete offset syncs") as db:
            for (topic, partition), source_offset in cuts.items():
                self._delete_after(db, flow, topic, partition, source_offset)

    @staticmethod
    def _delete_after(db: sqlite3.Connection, flow: str, topic: str, partition: int, source_offset: int) -> None:
        db.execute(
            "DELETE FROM offset_syncs WHERE flow=? AND topic=? AND partition=? AND source_offset>?",
            (flow, topic, partition, source_offset),
        )
        # A tip past the cut vouches for rows just deleted: lower it to the newest row
        # kept (an acknowledged record the remaining rows are complete for). Deleting it
        # would leave the rows unbounded until the writer's next store write succeeds,
        # and translations made meanwhile (checkpoints, the offset sync) could skip.
        tip = db.execute(
            "SELECT source_offset FROM offset_tips WHERE flow=? AND topic=? AND partition=?", (flow, topic, partition)
        ).fetchone()
        if tip is not None and tip[0] > source_offset:
            kept = db.execute(
                "SELECT source_offset, target_offset FROM offset_syncs WHERE flow=? AND topic=? AND "
                "partition=? ORDER BY source_offset DESC LIMIT 1",
                (flow, topic, partition),
            ).fetchone()
            if kept is None:
                db.execute("DELETE FROM offset_tips WHERE flow=? AND topic=? AND partition=?", (flow, topic, partition))
            else:
                db.execute("INSERT OR REPLACE INTO offset_tips VALUES (?, ?, ?, ?, ?)", (flow, topic, partition, *kept))

    def syncs(self, flow: str, topic: str, partition: int) -> list[OffsetSync]:
        rows = self._query(
            "read offset syncs",
            "SELECT source_offset, target_offset FROM offset_syncs WHERE flow=? AND topic=? AND "
            "partition=? ORDER BY source_offset",
            (flow, topic, partition),
        )
        return [OffsetSync(topic, partition, s, t) for s, t in rows]

    def floor_sync(self, flow: str, topic: str, partition: int, position: int) -> OffsetSync | None:
        rows = self._query(
            "read offset syncs",
            "SELECT source_offset, target_offset FROM offset_syncs WHERE flow=? AND topic=? AND "
            "partition=? AND source_offset<=? "
            "ORDER BY source_offset DESC LIMIT 1",
            (flow, topic, partition, position),
        )
        return OffsetSync(topic, partition, *rows[0]) if rows else None

    def next_sync(self, flow: str, topic: str, partition: int, position: int) -> OffsetSync | None:
        rows = self._query(
            "read offset syncs",
            "SELECT source_offset, target_offset FROM offset_syncs WHERE flow=? AND topic=? AND "
            "partition=? AND source_offset>? "
            "ORDER BY source_offset LIMIT 1",
            (flow, topic, partition, position),
        )
        return OffsetSync(topic, partition, *rows[0]) if rows else None

    def windows(self, flow: str, positions: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], SyncWindow]:
        """Floor, next and newest rows of many partitions: three statements, not three per partition.

        The positions go into a temporary table and SQLite does the per-partition index
        seeks itself (each an O(log n) probe of the primary key), without a Python round
        trip per partition.
        """
        if not positions:
            return {}
        picks = {
            "floor": "MAX(x.source_offset) FROM offset_syncs x WHERE x.flow=? AND x.topic=w.topic AND "
            "x.partition=w.partition AND x.source_offset<=w.position",
            "next": "MIN(x.source_offset) FROM offset_syncs x WHERE x.flow=? AND x.topic=w.topic AND "
            "x.partition=w.partition AND x.source_offset>w.position",
            "newest": "MAX(x.source_offset) FROM offset_syncs x WHERE x.flow=? AND x.topic=w.topic AND "
            "x.partition=w.partition",
        }
        found: dict[str, dict[tuple[str, int], OffsetSync]] = {}
        with self._lock:
            try:
                db = self._db
                db.execute(
                    "CREATE TEMP TABLE IF NOT EXISTS want (topic TEXT NOT NULL, partition INTEGER NOT "
                    "NULL, position INTEGER NOT NULL)"
                )
                db.execute("BEGIN")  # one transaction for the inserts (temp tables only: no lock on the file)
                db.execute("DELETE FROM temp.want")
                db.executemany(
                    "INSERT INTO temp.want VALUES (?, ?, ?)", [(t, p, pos) for (t, p), pos in positions.items()]
                )
                db.execute("COMMIT")
                for kind, pick in picks.items():
                    rows = db.execute(
                        "SELECT s.topic, s.partition, s.source_offset, s.target_offset FROM temp.want w "
                        "JOIN offset_syncs s "
                        "ON s.flow=? AND s.topic=w.topic AND s.partition=w.partition AND "
                        f"s.source_offset=(SELECT {pick})",
                        (flow, flow),
                    ).fetchall()
                    found[kind] = {(t, p): OffsetSync(t, p, so, to) for t, p, so, to in rows}
                db.execute("DELETE FROM temp.want")
            except sqlite3.Error as exc:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise OffsetStoreError(f"offset store {str(self.path)!r}: cannot read offset syncs: {exc}") from exc
        return {k: SyncWindow(found["floor"].get(k), found["next"].get(k), found["newest"].get(k)) for k in positions}

    def sync_count(self, flow: str) -> int:
        return int(self._query("count offset syncs", "SELECT COUNT(*) FROM offset_syncs WHERE flow=?", (flow,))[0][0])

    # -- checkpoints
    def write_checkpoints(self, flow: str, rows: Sequence[Checkpoint]) -> None:
        if not rows:
            return
        with self._tx("write checkpoints") as db:
            # An older checkpoint never replaces a newer one (two checkpointers, clock order).
            db.executemany(
                "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (flow, grp, topic, "
                "partition) DO UPDATE SET "
                "source_offset=excluded.source_offset, target_offset=excluded.target_offset, time_ms=excluded.time_ms "
                "WHERE excluded.time_ms >= checkpoints.time_ms",
                [(flow, c.group, c.topic, c.partition, c.source_offset, c.target_offset, c.time_ms) for c in rows],
            )

    def checkpointed_groups(self, flow: str) -> list[str]:
        return [
            g
            for (g,) in self._query(
                "list checkpointed groups", "SELECT DISTINCT grp FROM checkpoints WHERE flow=?", (flow,)
            )
        ]

    def checkpoints(self, flow: str, group: str) -> list[Checkpoint]:
        rows = self._query(
            "read checkpoints",
            "SELECT topic, partition, source_offset, target_offset, time_ms FROM checkpoints WHERE "
            "flow=? AND grp=? ORDER BY topic, partition",
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
        rows = self._query(
            "read source end offsets",
            "SELECT topic, partition, source_end, time_ms FROM source_ends WHERE flow=?",
            (flow,),
        )
        return {(t, p): (e, ms) for t, p, e, ms in rows}

    # -- target topics the mirror created (sync_topic_deletes)
    def record_created_topics(self, flow: str, topics: Sequence[CreatedTopic]) -> None:
        if not topics:
            return
        with self._tx("record created target topics") as db:
            db.executemany(
                "INSERT OR REPLACE INTO created_topics (flow, target, source, topic_id, time_ms, source_cluster_id) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(flow, t.target, t.source, t.topic_id, t.time_ms, t.source_cluster_id) for t in topics],
            )

    def created_topics(self, flow: str) -> list[CreatedTopic]:
        rows = self._query(
            "read created target topics",
            "SELECT target, source, topic_id, time_ms, source_cluster_id FROM created_topics WHERE flow=? "
            "ORDER BY target",
            (flow,),
        )
        return [CreatedTopic(t, s, i, ms, c) for t, s, i, ms, c in rows]

    def forget_created_topic(self, flow: str, target: str) -> None:
        with self._tx("forget a created target topic") as db:
            db.execute("DELETE FROM created_topics WHERE flow=? AND target=?", (flow, target))

    # -- the source topics' ids as the flow last mirrored them (`mirror.engine.recreated`)
    def record_source_topic_ids(self, flow: str, ids: Mapping[str, str]) -> None:
        if ids:
            with self._tx("record source topic ids") as db:
                db.executemany(
                    "INSERT OR REPLACE INTO source_topics VALUES (?, ?, ?)", [(flow, t, i) for t, i in ids.items()]
                )

    def source_topic_ids(self, flow: str) -> dict[str, str]:
        rows = self._query("read source topic ids", "SELECT topic, topic_id FROM source_topics WHERE flow=?", (flow,))
        return {t: i for t, i in rows}

    # -- ACLs the sync created on the target (`mirror.run.aclsync`)
    def synced_acls(self, flow: str) -> set[str]:
        return {a for (a,) in self._query("read synced ACLs", "SELECT acl FROM acl_syncs WHERE flow=?", (flow,))}

    def claim_acls(self, flow: str, acls: Iterable[str]) -> None:
        rows = [(flow, a) for a in acls]
        if rows:
            with self._tx("record synced ACLs") as db:
                db.executemany("INSERT OR IGNORE INTO acl_syncs VALUES (?, ?)", rows)

    def forget_acls(self, flow: str, acls: Iterable[str]) -> None:
        rows = [(flow, a) for a in acls]
        if rows:
            with self._tx("forget synced ACLs") as db:
                db.executemany("DELETE FROM acl_syncs WHERE flow=? AND acl=?", rows)

    def close(self) -> None:
        with self._lock:
            self._db.close()
