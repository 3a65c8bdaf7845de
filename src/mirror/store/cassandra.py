"""The Cassandra backend of the offset store: the one module that imports `cassandra`.

Why Cassandra: the offset map must outlive the primary datacenter. With a keyspace
replicated to both sites (NetworkTopologyStrategy), the DR site can plan a failover from
its own replicas after the primary is gone, and every mirror worker shares one map.

Schema: offset-map rows live in one Cassandra partition per (flow, topic, partition),
clustered by `source_offset` descending, so "the newest row with source_offset <= C" is a
single-partition slice with LIMIT 1. Checkpoints are one row per (flow, group) partition
and source partition, written `USING TIMESTAMP` of the checkpoint time so that an older
checkpoint arriving late never overwrites a newer one.

The session connects lazily and the driver reconnects by itself: a mirror started while
Cassandra is down, or running while it restarts, just sees `OffsetStoreError` until the
node answers again (the recorder turns that into "stop committing", never into data loss).
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from cassandra import AuthenticationFailed, ConsistencyLevel, DriverException
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable, Session
from cassandra.concurrent import execute_concurrent, execute_concurrent_with_args
from cassandra.policies import (
    DCAwareRoundRobinPolicy,
    ExponentialReconnectionPolicy,
    RoundRobinPolicy,
)
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from mirror.config import CassandraStoreConfig
from mirror.domain.gaps import GapReason, SourceGap
from mirror.domain.offsetmap import Checkpoint, OffsetSync
from mirror.errors import OffsetStoreError
from mirror.store.base import NEWEST, CreatedTopic, SourceEnds, SyncWindow

log = logging.getLogger(__name__)
T = TypeVar("T")

_TABLES = {
    "offset_syncs": """CREATE TABLE IF NOT EXISTS {ks}.offset_syncs (
        flow text, topic text, partition int, source_offset bigint, target_offset bigint,
        PRIMARY KEY ((flow, topic, partition), source_offset)
    ) WITH CLUSTERING ORDER BY (source_offset DESC)""",
    "offset_tips": """CREATE TABLE IF NOT EXISTS {ks}.offset_tips (
        flow text, topic text, partition int, source_offset bigint, target_offset bigint,
        PRIMARY KEY ((flow, topic, partition))
    )""",
    "checkpoints": """CREATE TABLE IF NOT EXISTS {ks}.checkpoints (
        flow text, grp text, topic text, partition int,
        source_offset bigint, target_offset bigint, time_ms bigint,
        PRIMARY KEY ((flow, grp), topic, partition)
    )""",
    "offset_gaps": """CREATE TABLE IF NOT EXISTS {ks}.offset_gaps (
        flow text, topic text, partition int, first_offset bigint, last_offset bigint, reason text,
        PRIMARY KEY ((flow), topic, partition, first_offset)
    )""",
    "source_ends": """CREATE TABLE IF NOT EXISTS {ks}.source_ends (
        flow text, topic text, partition int, source_end bigint, time_ms bigint,
        PRIMARY KEY ((flow), topic, partition)
    )""",
    "created_topics": """CREATE TABLE IF NOT EXISTS {ks}.created_topics (
        flow text, target text, source text, topic_id text, time_ms bigint, source_cluster_id text,
        PRIMARY KEY ((flow), target)
    )""",
    "acl_syncs": """CREATE TABLE IF NOT EXISTS {ks}.acl_syncs (
        flow text, acl text,
        PRIMARY KEY ((flow), acl)
    )""",
    "source_topics": """CREATE TABLE IF NOT EXISTS {ks}.source_topics (
        flow text, topic text, topic_id text,
        PRIMARY KEY ((flow), topic)
    )""",
}
# Columns added to a table after it first shipped: (table, column, CQL type), added where missing.
_ADDED_COLUMNS = (("created_topics", "source_cluster_id", "text"),)


def _connection_class() -> Any:
    """The asyncore reactor where the driver still has it (see `_connect`), else its default.

    Probed here, not at the top: the reactor module is optional (gone from Python 3.12 without
    pyasyncore) and warns on import."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            from cassandra.io.asyncorereactor import AsyncoreConnection
        except ImportError:  # Python 3.12+ without pyasyncore: the driver's own default
            from cassandra.cluster import DefaultConnection

            return DefaultConnection
    return AsyncoreConnection


def _replication_cql(replication: dict[str, str | int]) -> str:
    items = ", ".join(f"'{k}': '{v}'" for k, v in replication.items())
    return "{" + items + "}"


def _parse_contact(point: str) -> tuple[str, int]:
    host, _, port = point.rpartition(":")
    if host and port.isdigit():
        return host, int(port)
    return point, 9042


def _concurrently(s: Session, stmt: PreparedStatement, args: list[tuple[Any, ...]]) -> list[Any]:
    """One prepared statement over many argument tuples, 32 in flight, results in order.

    Single-partition requests: each write is durable at the statement's consistency level
    when its future resolves, and this returns after all of them (raising the first error).
    """
    if not args:
        return []
    out = []
    for ok, result in execute_concurrent_with_args(s, stmt, args, concurrency=32, raise_on_first_error=False):
        if not ok:
            raise result
        out.append(result)
    return out


# Statements per UNLOGGED batch of offset-map writes: Cassandra warns past 10 partitions in one
# (unlogged_batch_across_partitions_warn_threshold) and past 5 KiB (a row is at most ~300 B).
# One request per 10 instead of per partition: at 5,000 partitions a commit's tips took ~1 s
# and ~0.75 CPU seconds of the driver one by one, ~0.15 s and ~0.07 s in batches of 10.
BATCH_STATEMENTS = 10


def batches(args: Sequence[T], size: int = BATCH_STATEMENTS) -> list[Sequence[T]]:
    """`args` in order, cut into runs of at most `size`: one UNLOGGED batch each."""
    return [args[i : i + size] for i in range(0, len(args), size)]


class CassandraStore:
    """`OffsetStore` (plus the `FullOffsetStore` extras) on a Cassandra keyspace."""

    def __init__(self, config: CassandraStoreConfig) -> None:
        self.config = config
        self.ks = config.keyspace
        self.consistency = getattr(ConsistencyLevel, config.consistency)
        self._lock = threading.Lock()
        self._cluster: Cluster | None = None
        self._session: Session | None = None
        self._stmts: dict[str, PreparedStatement] = {}

    def describe(self) -> str:
        return f"cassandra:{','.join(self.config.contact_points)}/{self.ks}"

    # -- connection
    def _connect(self) -> Session:
        with self._lock:
            if self._session is not None:
                return self._session
            points = [_parse_contact(p) for p in self.config.contact_points]
            ports = {p for _, p in points}
            kwargs: dict[str, Any] = {
                "contact_points": [h for h, _ in points],
                "port": ports.pop() if len(ports) == 1 else 9042,
                "connect_timeout": self.config.timeout,
                "control_connection_timeout": self.config.timeout,
                "protocol_version": 5,
                # Back within seconds after a restart: every failed write holds source
                # commits back, so the driver's default (up to 10 min between attempts) is too lazy.
                "reconnection_policy": ExponentialReconnectionPolicy(0.5, 10.0),
                # The pure-Python reactor: the libev one can abort the whole process (SIGABRT in
                # its loop thread) when sessions are opened and shut down repeatedly next to
                # forked JVMs; the store's few batched writes do not need libev's speed.
                "connection_class": _connection_class(),
            }
            policy = (
                DCAwareRoundRobinPolicy(local_dc=self.config.local_dc) if self.config.local_dc else RoundRobinPolicy()
            )
            kwargs["execution_profiles"] = {
                EXEC_PROFILE_DEFAULT: ExecutionProfile(
                    load_balancing_policy=policy,
                    consistency_level=self.consistency,
                    request_timeout=self.config.timeout,
                )
            }
            if self.config.username:
                kwargs["auth_provider"] = PlainTextAuthProvider(self.config.username, self.config.password or "")
            cluster = Cluster(**kwargs)
            try:
                session = cluster.connect()
                # DDL only for what is missing: every worker opens the store at start, and
                # concurrent schema changes from several coordinators are what Cassandra
                # handles worst. The usual restart issues none.
                keyspace = cluster.metadata.keyspaces.get(self.ks)
                if keyspace is None:
                    session.execute(
                        f"CREATE KEYSPACE IF NOT EXISTS {self.ks} WITH replication = "
                        f"{_replication_cql(self.config.replication)}",
                        timeout=max(self.config.timeout, 30.0),
                    )
                have = set(keyspace.tables) if keyspace is not None else set()
                for name, ddl in _TABLES.items():
                    if name not in have:
                        session.execute(ddl.format(ks=self.ks), timeout=max(self.config.timeout, 30.0))
                for name, column, cql_type in _ADDED_COLUMNS:
                    if name in have and column not in keyspace.tables[name].columns:  # type: ignore[union-attr]
                        session.execute(
                            f"ALTER TABLE {self.ks}.{name} ADD {column} {cql_type}",
                            timeout=max(self.config.timeout, 30.0),
                        )
                self._stmts = self._prepare(session)
            except Exception as exc:
                cluster.shutdown()
                raise self._error("connect", exc) from exc
            self._cluster, self._session = cluster, session
            log.info("offset store connected: %s", self.describe())
            return session

    def _prepare(self, s: Session) -> dict[str, PreparedStatement]:
        ks = self.ks
        stmts = {
            "put_sync": f"INSERT INTO {ks}.offset_syncs (flow, topic, partition, source_offset, target_offset) VALUES "
            "(?, ?, ?, ?, ?)",
            "del_syncs": f"DELETE FROM {ks}.offset_syncs WHERE flow=? AND topic=? AND partition=?",
            "del_after": f"DELETE FROM {ks}.offset_syncs WHERE flow=? AND topic=? AND partition=? AND source_offset>?",
            "syncs": f"SELECT source_offset, target_offset FROM {ks}.offset_syncs WHERE flow=? AND topic=? AND "
            "partition=?",
            "floor": f"SELECT source_offset, target_offset FROM {ks}.offset_syncs WHERE flow=? AND topic=? AND "
            "partition=? AND source_offset<=? LIMIT 1",
            "next": f"SELECT source_offset, target_offset FROM {ks}.offset_syncs WHERE flow=? AND topic=? AND "
            "partition=? AND source_offset>? "
            "ORDER BY source_offset ASC LIMIT 1",
            "put_tip": f"INSERT INTO {ks}.offset_tips (flow, topic, partition, source_offset, target_offset) VALUES "
            "(?, ?, ?, ?, ?)",
            "tip": f"SELECT source_offset, target_offset FROM {ks}.offset_tips WHERE flow=? AND topic=? AND "
            "partition=?",
            "del_tip": f"DELETE FROM {ks}.offset_tips WHERE flow=? AND topic=? AND partition=?",
            "cp_groups": f"SELECT DISTINCT flow, grp FROM {ks}.checkpoints",
            "del_cp": f"DELETE FROM {ks}.checkpoints WHERE flow=? AND grp=? AND topic=? AND partition=?",
            "put_cp": f"INSERT INTO {ks}.checkpoints (flow, grp, topic, partition, source_offset, target_offset, "
            "time_ms) VALUES (?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?",
            "cps": f"SELECT topic, partition, source_offset, target_offset, time_ms FROM {ks}.checkpoints WHERE "
            "flow=? AND grp=?",
            "put_end": f"INSERT INTO {ks}.source_ends (flow, topic, partition, source_end, time_ms) VALUES (?, ?, ?, "
            "?, ?)",
            "ends": f"SELECT topic, partition, source_end, time_ms FROM {ks}.source_ends WHERE flow=?",
            "put_created": f"INSERT INTO {ks}.created_topics (flow, target, source, topic_id, time_ms, "
            "source_cluster_id) VALUES (?, ?, ?, ?, ?, ?)",
            "created": f"SELECT target, source, topic_id, time_ms, source_cluster_id FROM {ks}.created_topics "
            "WHERE flow=?",
            "del_created": f"DELETE FROM {ks}.created_topics WHERE flow=? AND target=?",
            "put_gap": f"INSERT INTO {ks}.offset_gaps (flow, topic, partition, first_offset, last_offset, reason) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            "gaps": f"SELECT topic, partition, first_offset, last_offset, reason FROM {ks}.offset_gaps WHERE flow=?",
            "del_gaps": f"DELETE FROM {ks}.offset_gaps WHERE flow=? AND topic=? AND partition=?",
            "acls": f"SELECT acl FROM {ks}.acl_syncs WHERE flow=?",
            "put_acl": f"INSERT INTO {ks}.acl_syncs (flow, acl) VALUES (?, ?)",
            "del_acl": f"DELETE FROM {ks}.acl_syncs WHERE flow=? AND acl=?",
            "source_ids": f"SELECT topic, topic_id FROM {ks}.source_topics WHERE flow=?",
            "put_source_id": f"INSERT INTO {ks}.source_topics (flow, topic, topic_id) VALUES (?, ?, ?)",
        }
        out = {}
        for name, cql in stmts.items():
            out[name] = s.prepare(cql)
            out[name].consistency_level = self.consistency
        return out

    def _error(self, what: str, exc: BaseException) -> OffsetStoreError:
        if isinstance(exc, OffsetStoreError):
            return exc
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, NoHostAvailable):
            if any(isinstance(e, AuthenticationFailed) for e in exc.errors.values()):
                # The server's text names the user, never the password; ours does the same.
                return OffsetStoreError(
                    f"offset store {self.describe()}: user {self.config.username or '(none)'!r} cannot "
                    "log in: credentials refused",
                    hint="check offset_store.username and offset_store.password (from the environment)",
                )
            reason = f"no Cassandra node answered at {', '.join(self.config.contact_points)}"
        return OffsetStoreError(
            f"offset store {self.describe()}: cannot {what}: {reason}"[:500],
            hint="check that Cassandra is up and offset_store.contact_points is right",
        )

    def _run(self, what: str, fn: Callable[[Session], T]) -> T:
        session = self._connect()
        try:
            return fn(session)
        except (DriverException, OSError, Exception) as exc:  # the driver raises a zoo of types
            raise self._error(what, exc) from exc

    def _write_many(self, what: str, stmt: str, args: list[tuple[Any, ...]]) -> None:
        if not args:
            return

        self._run(what, lambda s: _concurrently(s, self._stmts[stmt], args))

    def _write_batched(self, what: str, stmt: str, args: list[tuple[Any, ...]]) -> None:
        """`_write_many` in UNLOGGED batches of a few partitions, all in flight: a batch
        answers once each of its writes is durable at the configured consistency level. Not
        atomic (a failed batch may leave some writes), which no caller relies on."""

        def batch(chunk: Sequence[tuple[Any, ...]]) -> BatchStatement:
            b = BatchStatement(batch_type=BatchType.UNLOGGED, consistency_level=self.consistency)
            for a in chunk:
                b.add(self._stmts[stmt], a)
            return b

        def go(s: Session) -> None:
            for ok, result in execute_concurrent(
                s, [(batch(c), ()) for c in batches(args)], concurrency=32, raise_on_first_error=False
            ):
                if not ok:
                    raise result

        if args:
            self._run(what, go)

    # -- offset map
    def write_syncs(self, flow: str, rows: Sequence[OffsetSync], tips: Sequence[OffsetSync] = ()) -> None:
        self._write_batched(
            "write offset syncs",
            "put_sync",
            [(flow, r.topic, r.partition, r.source_offset, r.target_offset) for r in rows],
        )
        # After the rows (a wave of its own, never in their batches): a tip must never claim
        # rows not stored at the consistency level yet, and a batch is not atomic across
        # replicas. An overwrite of one cell per partition, so no tombstones pile up.
        self._write_batched(
            "write offset-map tips",
            "put_tip",
            [(flow, r.topic, r.partition, r.source_offset, r.target_offset) for r in tips],
        )

    def write_gaps(self, flow: str, gaps: Sequence[SourceGap]) -> None:
        self._write_many(
            "write source gaps",
            "put_gap",
            [(flow, g.topic, g.partition, g.first, g.last, g.reason.value) for g in gaps],
        )

    def gaps(self, flow: str) -> dict[tuple[str, int], list[SourceGap]]:
        rows = self._run("read source gaps", lambda s: list(s.execute(self._stmts["gaps"], (flow,))))
        out: dict[tuple[str, int], list[SourceGap]] = {}
        for r in rows:
            gap = SourceGap(r.topic, r.partition, r.first_offset, r.last_offset, GapReason(r.reason))
            out.setdefault((r.topic, r.partition), []).append(gap)
        return out

    def tip(self, flow: str, topic: str, partition: int) -> OffsetSync | None:
        row = self._run("read offset-map tip", lambda s: s.execute(self._stmts["tip"], (flow, topic, partition)).one())
        return OffsetSync(topic, partition, row.source_offset, row.target_offset) if row else None

    def delete_syncs(self, flow: str, partitions: Sequence[tuple[str, int]]) -> None:
        self._write_many("delete offset syncs", "del_syncs", [(flow, t, p) for t, p in partitions])
        self._write_many("delete offset-map tips", "del_tip", [(flow, t, p) for t, p in partitions])
        self._write_many("delete source gaps", "del_gaps", [(flow, t, p) for t, p in partitions])
        # Checkpoints translated into the old topic would start a group at an offset of the
        # new one that means something else. Rare (a recreated target topic): a scan of the
        # checkpoint partitions is fine here.
        groups = [
            r.grp
            for r in self._run("list checkpointed groups", lambda s: list(s.execute(self._stmts["cp_groups"])))
            if r.flow == flow
        ]
        self._write_many("delete checkpoints", "del_cp", [(flow, g, t, p) for g in groups for t, p in partitions])

    def delete_syncs_after(self, flow: str, topic: str, partition: int, source_offset: int) -> None:
        self.delete_syncs_after_many(flow, {(topic, partition): source_offset})

    def delete_syncs_after_many(self, flow: str, cuts: Mapping[tuple[str, int], int]) -> None:
        """`delete_syncs_after` for many partitions: five concurrent waves, not up to four
        round trips one after another per partition (a restart's first commit trims them all).

        A tip past the cut vouches for the rows about to go: it is lowered to the newest row
        kept first (not atomic with the delete), so no reader ever sees it above rows that
        are gone; with no row kept, it goes after the rows (a partition without rows is
        translated without its tip). Each wave ends before the next starts.
        """
        keys = list(cuts)

        def go(s: Session) -> None:
            tips = _concurrently(s, self._stmts["tip"], [(flow, t, p) for t, p in keys])
            past = [k for k, r in zip(keys, tips) if (tip := r.one()) is not None and tip.source_offset > cuts[k]]
            floors = [r.one() for r in _concurrently(s, self._stmts["floor"], [(flow, *k, cuts[k]) for k in past])]
            kept = [(flow, *k, f.source_offset, f.target_offset) for k, f in zip(past, floors) if f is not None]
            _concurrently(s, self._stmts["put_tip"], kept)
            _concurrently(s, self._stmts["del_after"], [(flow, *k, cuts[k]) for k in keys])
            _concurrently(s, self._stmts["del_tip"], [(flow, *k) for k, f in zip(past, floors) if f is None])

        if keys:
            self._run("trim offset syncs", go)

    def syncs(self, flow: str, topic: str, partition: int) -> list[OffsetSync]:
        rows = self._run("read offset syncs", lambda s: list(s.execute(self._stmts["syncs"], (flow, topic, partition))))
        return sorted(
            (OffsetSync(topic, partition, r.source_offset, r.target_offset) for r in rows),
            key=lambda r: r.source_offset,
        )

    def floor_sync(self, flow: str, topic: str, partition: int, position: int) -> OffsetSync | None:
        row = self._run(
            "read offset syncs", lambda s: s.execute(self._stmts["floor"], (flow, topic, partition, position)).one()
        )
        return OffsetSync(topic, partition, row.source_offset, row.target_offset) if row else None

    def next_sync(self, flow: str, topic: str, partition: int, position: int) -> OffsetSync | None:
        row = self._run(
            "read offset syncs", lambda s: s.execute(self._stmts["next"], (flow, topic, partition, position)).one()
        )
        return OffsetSync(topic, partition, row.source_offset, row.target_offset) if row else None

    def windows(self, flow: str, positions: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], SyncWindow]:
        """Floor, next and newest rows of many partitions, as concurrent single-partition reads.

        One Cassandra partition per (flow, topic, partition), so there is no bulk query;
        but 32 requests in flight instead of one at a time.
        """
        keys = list(positions)
        if not keys:
            return {}

        def go(s: Session) -> list[list[Any]]:
            out = []
            for stmt, args in (
                ("floor", [(flow, t, p, positions[(t, p)]) for t, p in keys]),
                ("next", [(flow, t, p, positions[(t, p)]) for t, p in keys]),
                ("floor", [(flow, t, p, NEWEST) for t, p in keys]),
            ):
                out.append([r.one() for r in _concurrently(s, self._stmts[stmt], args)])
            return out

        floors, nexts, newest = self._run("read offset syncs", go)

        def sync(key: tuple[str, int], row: Any) -> OffsetSync | None:
            return OffsetSync(key[0], key[1], row.source_offset, row.target_offset) if row else None

        return {k: SyncWindow(sync(k, f), sync(k, n), sync(k, w)) for k, f, n, w in zip(keys, floors, nexts, newest)}

    def sync_count(self, flow: str) -> int:
        # Test and diagnostics helper: a full scan, never on the data path.
        rows = self._run("count offset syncs", lambda s: list(s.execute(f"SELECT flow FROM {self.ks}.offset_syncs")))
        return sum(1 for r in rows if r.flow == flow)

    # -- checkpoints
    def write_checkpoints(self, flow: str, rows: Sequence[Checkpoint]) -> None:
        self._write_many(
            "write checkpoints",
            "put_cp",
            [
                (flow, c.group, c.topic, c.partition, c.source_offset, c.target_offset, c.time_ms, c.time_ms * 1000)
                for c in rows
            ],
        )

    def checkpointed_groups(self, flow: str) -> list[str]:
        # DISTINCT over the partition key reads one row per (flow, group) partition, not the checkpoints.
        return [
            r.grp
            for r in self._run("list checkpointed groups", lambda s: list(s.execute(self._stmts["cp_groups"])))
            if r.flow == flow
        ]

    def checkpoints(self, flow: str, group: str) -> list[Checkpoint]:
        rows = self._run("read checkpoints", lambda s: list(s.execute(self._stmts["cps"], (flow, group))))
        return sorted(
            (Checkpoint(group, r.topic, r.partition, r.source_offset, r.target_offset, r.time_ms) for r in rows),
            key=lambda c: (c.topic, c.partition),
        )

    # -- source ends
    def write_source_ends(self, flow: str, ends: SourceEnds, time_ms: int) -> None:
        self._write_many(
            "write source end offsets", "put_end", [(flow, t, p, e, time_ms) for (t, p), e in ends.items()]
        )

    def source_ends(self, flow: str) -> dict[tuple[str, int], tuple[int, int]]:
        rows = self._run("read source end offsets", lambda s: list(s.execute(self._stmts["ends"], (flow,))))
        return {(r.topic, r.partition): (r.source_end, r.time_ms) for r in rows}

    # -- target topics the mirror created (sync_topic_deletes)
    def record_created_topics(self, flow: str, topics: Sequence[CreatedTopic]) -> None:
        self._write_many(
            "record created target topics",
            "put_created",
            [(flow, t.target, t.source, t.topic_id, t.time_ms, t.source_cluster_id) for t in topics],
        )

    def created_topics(self, flow: str) -> list[CreatedTopic]:
        rows = self._run("read created target topics", lambda s: list(s.execute(self._stmts["created"], (flow,))))
        return [CreatedTopic(r.target, r.source, r.topic_id, r.time_ms, r.source_cluster_id or "") for r in rows]

    def forget_created_topic(self, flow: str, target: str) -> None:
        self._run("forget a created target topic", lambda s: s.execute(self._stmts["del_created"], (flow, target)))

    # -- ACLs the sync created on the target (`mirror.run.aclsync`)
    def synced_acls(self, flow: str) -> set[str]:
        return {r.acl for r in self._run("read synced ACLs", lambda s: list(s.execute(self._stmts["acls"], (flow,))))}

    def claim_acls(self, flow: str, acls: Iterable[str]) -> None:
        self._write_many("record synced ACLs", "put_acl", [(flow, a) for a in acls])

    def forget_acls(self, flow: str, acls: Iterable[str]) -> None:
        self._write_many("forget synced ACLs", "del_acl", [(flow, a) for a in acls])

    def record_source_topic_ids(self, flow: str, ids: Mapping[str, str]) -> None:
        self._write_many("record source topic ids", "put_source_id", [(flow, t, i) for t, i in ids.items()])

    def source_topic_ids(self, flow: str) -> dict[str, str]:
        rows = self._run("read source topic ids", lambda s: list(s.execute(self._stmts["source_ids"], (flow,))))
        return {r.topic: r.topic_id for r in rows}

    def close(self) -> None:
        with self._lock:
            if self._cluster is not None:
                self._cluster.shutdown()
            self._cluster = self._session = None


def ensure_role(contact_point: str, admin: tuple[str, str], role: str, password: str, timeout: float = 60.0) -> None:
    """Create (or reset) a login role with its password, as `admin` (user, password); for dev
    nodes. The password is a driver-quoted parameter, never part of a message or log line."""
    host, _, port = contact_point.rpartition(":")
    profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy())
    cluster = Cluster(
        [host],
        port=int(port),
        auth_provider=PlainTextAuthProvider(*admin),
        protocol_version=5,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=timeout,
        control_connection_timeout=timeout,
        connection_class=_connection_class(),
    )
    try:
        session = cluster.connect()
        session.execute(
            f"CREATE ROLE IF NOT EXISTS {role} WITH LOGIN = true AND PASSWORD = %s", [password], timeout=timeout
        )
        session.execute(f"ALTER ROLE {role} WITH PASSWORD = %s", [password], timeout=timeout)
    except Exception as exc:
        raise OffsetStoreError(
            f"cannot create the Cassandra role {role!r} at {contact_point}: {type(exc).__name__}"
        ) from None
    finally:
        cluster.shutdown()
