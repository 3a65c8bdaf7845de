"""The offset-map recorder: the `AckListener` that makes delta changes durable.

`on_acked` only buffers (it runs on the flow's thread, right after delivery reports);
`before_commit` writes everything buffered in one store call and returns only once it is
durable, so the engine's next source commit never passes a delta change the store does not
hold (docs/design.md invariant 1).

When the store fails, `before_commit` raises `OffsetStoreError`: the engine keeps
mirroring but stops committing, so on a restart nothing is skipped (records are re-read,
never lost). The buffer is kept and retried at the next commit; the first failure and the
recovery are logged once each, and `mirror_offset_store_healthy{flow}` /
`mirror_offset_store_errors_total{flow}` say why lag grows. The buffer is bounded: past
`max_pending` rows `backlog_full` tells the engine to stop reading (one row per transaction
on a transactional source would otherwise grow memory for as long as the store is away).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from mirror.domain.acks import AckBatch, SourcePartition
from mirror.domain.gaps import GapReason, SourceGap
from mirror.domain.offsetmap import OffsetStore, OffsetSync
from mirror.errors import MirrorError, OffsetStoreError
from mirror.store.base import CreatedTopic

log = logging.getLogger(__name__)

MAX_PENDING_ROWS = 10_000  # ~1 MB of rows; past it the engine pauses reading until the store answers


class StoreMetrics:
    """Health of offset-map writes (move into `mirror.metrics` once that module settles)."""

    _by_registry: dict[int, StoreMetrics] = {}
    _lock = threading.Lock()

    def __init__(self, registry: CollectorRegistry) -> None:
        self.healthy = Gauge(
            "mirror_offset_store_healthy",
            "1 while offset-map writes succeed; 0 while they fail and source commits are held back.",
            ["flow"],
            registry=registry,
        )
        self.errors = Counter(
            "mirror_offset_store_errors",
            "Offset-map writes that failed (each one held a source commit back).",
            ["flow"],
            registry=registry,
        )
        self.rows = Counter(
            "mirror_offset_sync_rows", "Offset-map rows written (one per delta change).", ["flow"], registry=registry
        )

    @classmethod
    def for_registry(cls, registry: CollectorRegistry) -> StoreMetrics:
        """One set per registry: several flows (and tests) share the process-wide registry."""
        with cls._lock:
            key = id(registry)
            if key not in cls._by_registry:
                cls._by_registry[key] = cls(registry)
            return cls._by_registry[key]


class OffsetMapRecorder:
    """Buffers each partition's delta changes and writes them before every source commit."""

    def __init__(
        self,
        store: OffsetStore,
        flow: str,
        *,
        registry: CollectorRegistry | None = REGISTRY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.flow = flow
        self._pending: list[OffsetSync] = []
        self.max_pending = MAX_PENDING_ROWS
        self._resets: set[SourcePartition] = set()  # partitions whose stored rows must go first
        self._seen: set[SourcePartition] = set()  # partitions reconciled with earlier runs' rows
        # Last delta written per partition: the engine reports the first record after every
        # start as a change; writing a row whose delta equals the stored one adds nothing.
        self._written_delta: dict[SourcePartition, int] = {}
        self._buffer_delta: dict[SourcePartition, int] = {}
        # Each partition's newest acknowledged record: stored with the rows it completes, so
        # translation knows how far the stored deltas reach (`offsetmap.translate`).
        self._tips: dict[SourcePartition, OffsetSync] = {}
        # Source gaps found since the last flush: written with the rows, before the commit
        # that moves the group past them (after it, nothing else says they were skipped).
        self._gaps: list[SourceGap] = []
        self._metrics = StoreMetrics.for_registry(registry) if registry is not None else None
        self._clock = clock
        self.failing_since: float | None = None
        self.last_error: str | None = None
        self.rows_written = 0
        if self._metrics:
            self._metrics.healthy.labels(flow).set(1)

    def on_acked(self, batches: Sequence[AckBatch]) -> None:
        for b in batches:
            key = (b.source_topic, b.partition)
            for source_offset, target_offset in b.syncs:
                delta = target_offset - source_offset
                last = self._buffer_delta.get(key, self._written_delta.get(key))
                if last == delta:
                    continue
                self._buffer_delta[key] = delta
                self._pending.append(OffsetSync(b.source_topic, b.partition, source_offset, target_offset))
            # The tip moves with every batch, delta change or not (most batches have none).
            tip_delta = self._buffer_delta.get(key, self._written_delta.get(key))
            if tip_delta is not None and b.count:
                newest = b.next_offset - 1
                self._tips[key] = OffsetSync(b.source_topic, b.partition, newest, newest + tip_delta)

    def on_targets_created(
        self, flow: str, created: Mapping[str, tuple[str, str]], *, source_cluster_id: str = ""
    ) -> None:
        """Keep the target topics this worker created (`sync_topic_deletes` deletes no other).

        Not a veto: a store that fails here only leaves the topic undeletable (kept), so the
        copy goes on and the failure is logged."""
        record = getattr(self.store, "record_created_topics", None)
        if record is None:
            return
        now_ms = int(time.time() * 1000)
        try:
            record(
                self.flow,
                [
                    CreatedTopic(t, source, topic_id, now_ms, source_cluster_id)
                    for t, (source, topic_id) in created.items()
                ],
            )
        except MirrorError as exc:
            log.warning(
                "flow %s: could not record the target topics it created (%s); sync_topic_deletes will keep them: %s",
                self.flow,
                ", ".join(sorted(created)),
                exc,
            )

    def on_reset(self, flow: str, partitions: Sequence[SourcePartition]) -> None:
        """The target topic was recreated: rows of the old one would mistranslate, drop them.

        Deleted at the next flush, before any new row, so the same veto protects it.
        """
        keys = set(partitions)
        self._pending = [r for r in self._pending if (r.topic, r.partition) not in keys]
        for key in keys:
            self._tips.pop(key, None)
            self._written_delta.pop(key, None)
            self._buffer_delta.pop(key, None)
            self._seen.discard(key)
        self._resets |= keys

    def on_gap(self, flow: str, gap: SourceGap) -> None:
        """The source lost these records before they were copied: record them at the next flush."""
        # A re-created topic's loss has no range to record: its old offsets name nothing in the new topic.
        if gap.count > 0 and gap.reason is not GapReason.RECREATED:
            self._gaps.append(gap)

    def before_commit(self, flow: str, positions: Mapping[SourcePartition, int]) -> None:
        self.flush()

    def flush(self) -> None:
        """Write every buffered row; raise `OffsetStoreError` (keeping the buffer) on failure."""
        if not self._pending and not self._resets and not self._tips and not self._gaps:
            return
        pending = list(self._pending)
        tips = list(self._tips.values())
        gaps = list(self._gaps)
        try:
            if self._resets:
                self.store.delete_syncs(self.flow, sorted(self._resets))  # type: ignore[attr-defined]
                self._resets.clear()
            if gaps:
                self.store.write_gaps(self.flow, gaps)
                del self._gaps[: len(gaps)]
            rows = self._against_stored(pending)
            if rows or tips:
                self.store.write_syncs(self.flow, rows, tips)
        except MirrorError as exc:
            self._failed(exc)
            raise
        except Exception as exc:  # a backend bug must still veto the commit, never pass it
            err = OffsetStoreError(f"offset store write failed: {exc}")
            self._failed(err)
            raise err from exc
        del self._pending[: len(pending)]
        for t in tips:
            if self._tips.get((t.topic, t.partition)) is t:
                del self._tips[(t.topic, t.partition)]
        for r in rows:
            self._written_delta[(r.topic, r.partition)] = r.delta
        self._written_delta.update(self._buffer_delta)
        self._buffer_delta.clear()
        self.rows_written += len(rows)
        if self._metrics:
            self._metrics.rows.labels(self.flow).inc(len(rows))
        if self.failing_since is not None:
            log.warning(
                "flow %s: offset store is back after %.1fs; %d offset-map rows written, source commits resume",
                self.flow,
                self._clock() - self.failing_since,
                len(rows),
            )
            self.failing_since = None
            self.last_error = None
            if self._metrics:
                self._metrics.healthy.labels(self.flow).set(1)

    def _against_stored(self, pending: list[OffsetSync]) -> list[OffsetSync]:
        """Reconcile the first rows of this run with what earlier runs stored.

        The first record of a partition after a (re)start always comes as a change. Rows an
        earlier run stored *beyond* it describe copies on the target that this run is
        writing again (it restarted from an older committed position); left in place they
        would translate to the older copies and repeat records, so they are removed. And a
        first row with the delta already stored below it adds nothing and is dropped, so
        restarts do not grow the map. One read and one delete per partition per process,
        made in bulk where the store can (`_reconcile`).
        """
        first: dict[SourcePartition, int] = {}
        for r in pending:
            key = (r.topic, r.partition)
            if key not in self._seen and key not in first:
                first[key] = r.source_offset
        last: dict[SourcePartition, int | None] = self._reconcile(first) if first else {}
        out = []
        for r in pending:
            key = (r.topic, r.partition)
            previous = last.get(key, self._written_delta.get(key))
            if previous == r.delta:
                continue
            last[key] = r.delta
            out.append(r)
        return out

    def _reconcile(self, first: dict[SourcePartition, int]) -> dict[SourcePartition, int | None]:
        """Trim the rows beyond each partition's first row of this run, and read the delta
        stored below it (for partitions this process has not written yet).

        In bulk: a transaction (an fsync) and a read per partition would hold the flow's
        thread for seconds at the first commit of thousands of partitions. The partitions count as reconciled
        only once both succeeded, so a store failure retries them at the next flush.
        """
        bulk_trim = getattr(self.store, "delete_syncs_after_many", None)
        trim = getattr(self.store, "delete_syncs_after", None)
        if bulk_trim is not None:
            bulk_trim(self.flow, first)
        elif trim is not None:
            for (topic, partition), source_offset in first.items():
                trim(self.flow, topic, partition, source_offset)
        unwritten = {key: so for key, so in first.items() if key not in self._written_delta}
        below: dict[SourcePartition, int | None] = {}
        windows = getattr(self.store, "windows", None)
        floor = getattr(self.store, "floor_sync", None)
        if unwritten and windows is not None:
            for key, window in windows(self.flow, unwritten).items():
                below[key] = window.floor.delta if window.floor is not None else None
        elif unwritten and floor is not None:
            for (topic, partition), source_offset in unwritten.items():
                row = floor(self.flow, topic, partition, source_offset)
                below[(topic, partition)] = row.delta if row is not None else None
        self._seen.update(first)
        return below

    def _failed(self, exc: MirrorError) -> None:
        if self._metrics:
            self._metrics.errors.labels(self.flow).inc()
            self._metrics.healthy.labels(self.flow).set(0)
        if self.failing_since is None:
            self.failing_since = self._clock()
            log.error(
                "flow %s: cannot store %d offset-map rows, holding source commits back until the store answers: %s",
                self.flow,
                len(self._pending),
                exc,
            )
        self.last_error = str(exc)

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def backlog_full(self) -> bool:
        """Too many rows wait for the store: the engine holds reading back until they are written."""
        return len(self._pending) >= self.max_pending

    def close(self) -> None:
        try:
            self.flush()
        except MirrorError as exc:
            # The engine does not commit past unsaved rows, so they are re-derived on restart.
            log.warning(
                "flow %s: %d offset-map rows not stored at close (the next run re-creates them): %s",
                self.flow,
                self.pending,
                exc,
            )
