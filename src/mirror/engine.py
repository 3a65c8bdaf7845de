"""The data path: where a record's journey begins and ends.

    source ──consume──▶ FlowWorker._forward ──produce──▶ target
                                                           │ delivery report
    source commit ◀── FlowWorker._commit ◀── _on_segment_end ◀┘

One `FlowWorker` per flow per process: a read_committed consumer in the flow's group on
the source, an idempotent `acks=all` producer on the target. The rules that keep
"nothing lost" true:

* A source offset is committed only after the target acknowledged every record before it
  in that partition, and after every listener (the offset map) said it is ready
  (`AckListener.before_commit`). Commits are batched every `commit_interval`.
* The producer never gives up on a retriable error (`message.timeout.ms=0`, idempotent,
  so retries keep order and add no duplicates); a target outage only makes lag grow.
* A non-retriable error (record too large, authorization) stops the flow: nothing past
  the failed record is committed, and the error names topic, partition and offset.
* On stop (SIGTERM/SIGINT) the worker stops reading, waits for the outstanding
  acknowledgements, commits, and closes.

Per record the worker does only what must be per record: look up the partition's route,
build headers, produce, and add the record to its partition's current *segment* (the run of
consecutive records of one partition in a consume batch). Only a segment's first and last
record ask for a delivery report: reports come in order per partition, and the producer
is idempotent with the gapless guarantee, so the last record acknowledged means the whole
segment is, and a refused record anywhere in it fails the producer instead of leaving a gap.
The two reports' target offsets also prove the segment landed contiguously, which gives
every record's target offset for the offset map. (A report per record cost about a third of
the CPU per record: confluent-kafka builds a Message, value copy included, for each.)
Everything else happens per segment, per batch or per interval.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Any

from .acks import AckBatch, AckListener, SourcePartition
from .config import Config, FlowConfig
from .errors import ClusterUnavailable, FatalProduceError, MirrorError
from .kafka import (
    OFFSET_BEGINNING,
    Admin,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
    make_consumer,
    make_producer,
    raise_for,
)
from .pipeline import Route, route
from .topics import TopicMapping, match_topics
from .topicsync import ensure_targets

log = logging.getLogger(__name__)

# Per-record consume batch: large enough to amortise Python overhead, small enough that a
# stop request or a commit tick is never far away.
CONSUME_BATCH = 2000
DRAIN_TIMEOUT = 30.0
BACKPRESSURE_WAIT = 1.0  # how long a full producer queue may block before reading pauses  # how long a stop waits for outstanding acknowledgements

# Source consumer: read only committed data (aborted transactions never reach the target),
# commit only what the worker says, cooperative rebalancing so a new worker or a new topic
# moves only the partitions that must move.
CONSUMER_DEFAULTS: dict[str, Any] = {
    "isolation.level": "read_committed",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "partition.assignment.strategy": "cooperative-sticky",
    # A dead worker's partitions move within seconds, not the 45 s default.
    "session.timeout.ms": 10000,
    "heartbeat.interval.ms": 2000,
    "fetch.wait.max.ms": 100,
    # Bounded prefetch keeps a worker's memory flat whatever the partition count...
    "queued.max.messages.kbytes": 16384,
    # ...but once it is full librdkafka waits fetch.queue.backoff.ms (1 s by default) before
    # fetching again: with a fast target that idles the mirror half the time (bench: 84k ->
    # 180k records/s with 20 ms).
    "fetch.queue.backoff.ms": 20,
}

# Target producer: idempotent with acks=all; infinite message timeout so a target outage
# never turns into a dropped or reordered record; gapless so a permanent failure of one
# batch cannot let later records of the same partition through.
PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "message.timeout.ms": 0,
    "enable.gapless.guarantee": True,
    "linger.ms": 10,
    "batch.size": 1048576,
    "compression.type": "lz4",
    "queue.buffering.max.kbytes": 16384,  # same throughput as 64 MB, ~40 MB less peak RSS (bench)
    "queue.buffering.max.messages": 200000,
}

# Delivery errors that mean "this record can never be written", as opposed to the
# retriable ones librdkafka keeps retrying on its own.
_SIZE_ERRORS = {KafkaError.MSG_SIZE_TOO_LARGE, getattr(KafkaError, "RECORD_LIST_TOO_LARGE", -1)}


class FlowState(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    RETRYING = "retrying"  # a cluster does not answer; mirroring resumes by itself
    CAUGHT_UP = "caught_up"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclass(slots=True, eq=False)
class _Segment:
    """Consecutive records of one partition, produced together; acknowledged as one."""

    first: int  # source offset of the first record
    last: int = -1  # source offset of the last record produced so far
    count: int = 0
    bytes: int = 0  # key + value bytes
    max_ts: int = -1
    big_offset: int = -1  # the largest record: the one to name when the target refuses a size
    big_size: int = -1
    # (index in the segment, source offset) wherever the source offsets jump (transaction
    # markers, aborted or compacted records): where the delta changes.
    gaps: list[tuple[int, int]] = field(default_factory=list)
    t_first: int | None = None  # target offset of the first record, from its delivery report
    dead: bool = False  # dropped (revoked, purged): its reports are ignored


@dataclass(slots=True)
class _Partition:
    """Bookkeeping for one assigned source partition."""

    route: Route
    # Produced, not yet acknowledged segments in produce order (delivery reports of a
    # partition arrive in that order). The last one may be `open`: reading paused in the
    # middle of its run, and the rest of the run is pending.
    inflight: deque[_Segment] = field(default_factory=deque)
    open: _Segment | None = None
    # Records the consumer returned were dropped unacknowledged (pending records of a stop,
    # a revoke or a resync; an abandoned or purged segment): the consumer's position is then
    # past records the target may not hold, and only `acked_next` may be committed.
    tainted: bool = False
    acked_next: int | None = None  # last acknowledged source offset + 1
    committed: int | None = None
    delta: int | None = None  # target - source of the last acknowledged record
    failed_at: int | None = None  # first source offset the target refused for good
    batch: AckBatch | None = None  # acknowledgements not yet handed to listeners


class FlowWorker:
    """Mirrors one flow until `stop` is set, the flow caught up (if asked), or it fails."""

    def __init__(
        self,
        config: Config,
        flow: FlowConfig,
        *,
        stop: threading.Event,
        listeners: Sequence[AckListener] = (),
        until_caught_up: bool = False,
        stats_cb: Callable[[str, str, str], None] | None = None,
        stats_interval_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.flow = flow
        self.stop = stop
        self.listeners = list(listeners)
        self.until_caught_up = until_caught_up
        self.clock = clock
        self.state = FlowState.STARTING
        self.state_reason = ""
        self._source = config.clusters[flow.source]
        self._target = config.clusters[flow.target]
        self._parts: dict[SourcePartition, _Partition] = {}
        self._by_target: dict[tuple[str, int], _Partition] = {}
        self._mappings: dict[str, TopicMapping] = {}
        # Source partitions whose target topic this worker created, with the group's committed
        # offset at that moment (None: nothing committed). See `_on_assign`.
        self._created_at: dict[SourcePartition, int | None] = {}
        self._pending: deque[Message] = deque()  # consumed, not yet accepted by a full producer queue
        self._paused = False
        self._failure: MirrorError | None = None
        self._producer_dead = False  # a fatal producer error: nothing in flight will ever be acknowledged
        self._caught_up_at: dict[SourcePartition, int] | None = None
        self._stats_cb = stats_cb
        self._stats_interval_ms = stats_interval_ms
        self.records_acked = 0

    # ------------------------------------------------------------------ lifecycle

    def run(self) -> None:
        """Mirror until stopped; raises `MirrorError` on a fatal failure."""
        self._open()
        try:
            self._loop()
        finally:
            self._close()

    def _open(self) -> None:
        f = self.flow
        self._source_admin = Admin(f.source, self._source)
        self._target_admin = Admin(f.target, self._target)
        # Fail fast at start (exit 1 after the cluster's timeout) rather than mirroring
        # into the void; once running, outages are retried without limit.
        self._source_admin.topics()
        self._target_admin.topics()
        consumer_cfg = {**CONSUMER_DEFAULTS, "group.id": f.group_id, "client.id": f"mirror-{f.name}", **f.consumer}
        producer_cfg = {**PRODUCER_DEFAULTS, "client.id": f"mirror-{f.name}", **f.producer}
        producer_cfg["error_cb"] = self._on_producer_error
        consumer_cfg["error_cb"] = self._on_consumer_error
        if self._stats_cb is not None and self._stats_interval_ms > 0:
            cb = self._stats_cb
            consumer_cfg["statistics.interval.ms"] = producer_cfg["statistics.interval.ms"] = self._stats_interval_ms
            consumer_cfg["stats_cb"] = lambda s: cb(f.name, "consumer", s)
            producer_cfg["stats_cb"] = lambda s: cb(f.name, "producer", s)
        self._consumer = make_consumer(f.source, self._source, consumer_cfg)
        self._producer_cfg = producer_cfg
        self._producer = make_producer(f.target, self._target, producer_cfg)
        self._subscribed: tuple[str, ...] = ()
        self._set_state(FlowState.RUNNING, "started")

    def _close(self) -> None:
        """Drain, flush, commit, close: in that order, whatever happened before."""
        self._set_state(FlowState.STOPPING, "draining")
        self._drop_pending()  # never produced; uncommitted, so the next owner re-reads them
        for st in self._by_target.values():
            self._drop_open(st)
        deadline = self.clock() + DRAIN_TIMEOUT
        while self._inflight_count() and self.clock() < deadline and not self._producer_dead:
            self._poll(0.1)
        left = self._inflight_count()
        if left and not self._producer_dead:
            log.warning("flow %s: %d records not acknowledged by %s after %.0fs; their source offsets stay uncommitted", self.flow.name, left, self.flow.target, DRAIN_TIMEOUT)
            self._producer.purge()
            self._poll(0)
        try:
            self._commit()
        except MirrorError as exc:
            log.warning("flow %s: final commit failed: %s", self.flow.name, exc)
        try:
            self._consumer.close()
        except KafkaException as exc:
            log.warning("flow %s: closing the source consumer: %s", self.flow.name, exc)
        if not self._producer_dead:
            self._producer.flush(0)
        for listener in self.listeners:
            listener.close()
        self._set_state(FlowState.FAILED if self._failure else FlowState.STOPPED, str(self._failure or "stopped"))

    def _set_state(self, state: FlowState, reason: str) -> None:
        if state != self.state or reason != self.state_reason:
            if state != self.state:
                log.info("flow %s: %s (%s)", self.flow.name, state.value, reason)
            self.state, self.state_reason = state, reason

    # ------------------------------------------------------------------ the loop

    def _loop(self) -> None:
        next_refresh = 0.0
        next_commit = self.clock() + self.flow.commit_interval
        while not self.stop.is_set():
            now = self.clock()
            if now >= next_refresh:
                next_refresh = now + (self.flow.refresh_interval if self._refresh_topics() else min(5.0, self.flow.refresh_interval))
            if self._pending:
                self._drain_pending()
            # Take what is there without waiting for a full batch (consume(n, t) returns only
            # when n records arrived or t passed, so at low rates every record would wait t);
            # only when nothing is there, block briefly for the next one.
            msgs = self._consumer.consume(CONSUME_BATCH, 0) or self._consumer.consume(1, 0.1)
            if msgs:
                self._forward(msgs)
            self._poll(0)
            if self._failure is not None:
                raise self._failure
            if self.clock() >= next_commit:
                self._commit()
                next_commit = self.clock() + self.flow.commit_interval
                if self.until_caught_up and self._is_caught_up():
                    self._set_state(FlowState.CAUGHT_UP, "every matched partition mirrored and committed")
                    return

    def _forward(self, msgs: list[Message]) -> None:
        """The per-record path: consumed message -> produce on the target."""
        produce = self._producer.produce
        parts = self._parts
        # A record ends its segment where the next message is of another partition (consume
        # returns each fetched partition's records as one run) or is an error event: a
        # segment must never be left without its closing report at the end of a batch.
        keys: list[SourcePartition | None] = [(m.topic(), m.partition()) if m.error() is None else None for m in msgs]
        keys.append(None)
        for i, m in enumerate(msgs):
            err = m.error()
            if err is not None:
                self._on_consume_error(err, m)
                continue
            if self._pending:
                self._pending.append(m)
                continue
            tp = keys[i]
            st = parts.get(tp)
            if st is None:  # a message from a partition revoked in this very batch
                continue
            offset = m.offset()
            key = m.key()
            value = m.value()
            ts = m.timestamp()[1]
            headers = st.route.headers(offset, m.headers())
            size = (len(key) if key else 0) + (len(value) if value else 0)
            seg = st.open
            new = seg is None
            if new:
                seg = _Segment(offset)
            ends = keys[i + 1] != tp
            cb = partial(self._on_segment_end, st, seg) if ends else partial(self._on_segment_start, st, seg) if new else None
            waited = 0.0
            try:
                while True:
                    try:
                        if cb is None:
                            produce(st.route.target_topic, value, key, partition=tp[1], timestamp=ts, headers=headers)
                        else:
                            produce(st.route.target_topic, value, key, partition=tp[1], timestamp=ts, headers=headers, on_delivery=cb)
                        break
                    except BufferError:
                        if waited >= BACKPRESSURE_WAIT or self.stop.is_set():
                            # The target stays slower than the source (or is down): hold
                            # the rest, stop fetching, and go back to the loop so commits,
                            # refreshes, stop requests and group heartbeats carry on. A
                            # segment cut here stays open; the pending rest continues it.
                            self._pending.extend(msgs[i:])
                            self._pause()
                            return
                        self._poll(0.05)  # acknowledgements free queue room
                        waited += 0.05
            except KafkaException as exc:
                self._produce_refused(st, offset, size, exc.args[0])
                return
            if new:
                st.open = seg
                st.inflight.append(seg)
            elif offset != seg.last + 1:
                seg.gaps.append((seg.count, offset))
            seg.last = offset
            seg.count += 1
            seg.bytes += size
            seg.max_ts = max(seg.max_ts, ts)
            if size > seg.big_size:
                seg.big_size = size
                seg.big_offset = offset
            if ends:
                st.open = None

    def _drain_pending(self) -> None:
        msgs = list(self._pending)
        self._pending.clear()
        self._forward(msgs)
        if not self._pending:
            self._resume()

    def _pause(self) -> None:
        if not self._paused:
            self._consumer.pause(self._consumer.assignment())
            self._paused = True
            self._set_state(FlowState.RETRYING, f"target {self.flow.target} is not keeping up; reading paused")

    def _resume(self) -> None:
        if self._paused:
            assignment = self._consumer.assignment()
            self._consumer.resume(assignment)
            # Pausing drops librdkafka's prefetched records; make sure fetching restarts at
            # the record after the last one handed to us (all of which are produced by now),
            # not after the last one fetched, or the dropped ones would be skipped.
            for tp in self._consumer.position(assignment):
                if tp.offset >= 0:
                    self._consumer.seek(tp)
            self._paused = False
            self._set_state(FlowState.RUNNING, "reading resumed")

    # ------------------------------------------------------------------ acknowledgements

    def _on_segment_start(self, st: _Partition, seg: _Segment, err: KafkaError | None, msg: Message) -> None:
        """Delivery report of a segment's first record (served on this thread by poll)."""
        if seg.dead:
            return
        if err is None:
            seg.t_first = msg.offset()
        else:  # the last record's report fails too (gapless); mark the segment failed already
            self._delivery_failed(st, seg, err)

    def _on_segment_end(self, st: _Partition, seg: _Segment, err: KafkaError | None, msg: Message) -> None:
        """Delivery report of a segment's last record: the whole segment is acknowledged."""
        if seg.dead:
            return  # purged, or its partition was handed over with this segment cut short
        if st.inflight and st.inflight[0] is seg:
            st.inflight.popleft()
        else:  # not reachable while reports keep produce order; never mis-attribute
            try:
                st.inflight.remove(seg)
            except ValueError:
                return
        if err is not None:
            self._delivery_failed(st, seg, err)
            return
        if st.failed_at is not None:
            return  # nothing past a refused record counts
        t_last = msg.offset()
        t_first = seg.t_first if seg.t_first is not None else t_last - (seg.count - 1)
        if seg.count > 1 and seg.t_first is None:
            # The first record's report must precede this one; without it the segment's
            # placement is unknown, and a guessed offset could translate too far.
            log.warning("flow %s: %s[%d]: no report for source offset %d; offsets %d-%d are not added to the offset map", self.flow.name, st.route.source_topic, st.route.partition, seg.first, seg.first, seg.last)
            t_first = None
        b = st.batch
        if b is None:
            r = st.route
            b = st.batch = AckBatch(self.flow.name, r.source_topic, r.partition, r.target_topic, seg.first, seg.first + 1)
        if t_first is not None:
            # Exact when the segment landed contiguously (no other writer in between):
            # record i is at t_first + i. Otherwise t_first + i is a lower bound, which
            # translates to a target offset too early, never too late (duplicates, not
            # loss), and the last record's own offset is recorded exactly.
            self._sync(st, b, seg.first, t_first)
            for idx, src in seg.gaps:
                self._sync(st, b, src, t_first + idx)
            if t_last - t_first != seg.count - 1:
                self._sync(st, b, seg.last, t_last)
        else:
            self._sync(st, b, seg.last, t_last)
        b.next_offset = seg.last + 1
        b.count += seg.count
        b.bytes += seg.bytes
        b.max_timestamp_ms = max(b.max_timestamp_ms, seg.max_ts)
        st.acked_next = seg.last + 1

    @staticmethod
    def _sync(st: _Partition, b: AckBatch, src: int, tgt: int) -> None:
        d = tgt - src
        if d != st.delta:
            b.syncs.append((src, tgt))
            st.delta = d

    def _drop_pending(self, keys: set[SourcePartition] | None = None) -> None:
        """Forget pending records (of `keys`, or all): they will not be produced, so their
        partitions must not commit the consumer's position, which is past them."""
        keep: deque[Message] = deque()
        for m in self._pending:
            tp = (m.topic(), m.partition())
            if keys is None or tp in keys:
                st = self._parts.get(tp)
                if st is not None:
                    st.tainted = True
            else:
                keep.append(m)
        self._pending = keep

    def _drop_open(self, st: _Partition) -> None:
        """Its pending rest will never be produced: the segment can never be acknowledged.
        Its records stay uncommitted (re-read by the next owner: duplicates, not loss)."""
        seg = st.open
        if seg is not None:
            seg.dead = True
            st.open = None
            st.tainted = True
            if st.inflight and st.inflight[-1] is seg:
                st.inflight.pop()

    def _delivery_failed(self, st: _Partition, seg: _Segment, err: KafkaError) -> None:
        if err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            st.tainted = True  # purged: uncommitted, so re-read by the next owner
            return
        if st.failed_at is None or seg.first < st.failed_at:
            st.failed_at = seg.first
        if self._failure is None or (err.code() in _SIZE_ERRORS and seg.big_size > getattr(self._failure, "size", 0)):
            # A refused batch fails every record in it; for size errors name the largest,
            # the one that does not fit.
            r = st.route
            sized = err.code() in _SIZE_ERRORS
            src, size = (seg.big_offset, seg.big_size) if sized else (seg.first, seg.big_size)
            hint = "raise max.message.bytes on the target topic (and message.max.bytes on its brokers), then restart" if sized else "fix the cause on the target, then restart; nothing past this record was committed"
            failure = FatalProduceError(r.source_topic, r.partition, src, f"{err.str()} ({size} bytes, target {r.target_topic})", hint=hint)
            failure.size = size  # type: ignore[attr-defined]
            self._failure = failure
            self._set_state(FlowState.FAILED, str(failure))

    def _produce_refused(self, st: _Partition, offset: int, size: int, err: KafkaError) -> None:
        """produce() itself refused the record (too large for the producer, unknown partition)."""
        st.failed_at = offset if st.failed_at is None else min(st.failed_at, offset)
        r = st.route
        hint = "raise message.max.bytes in the flow's producer settings and on the target" if err.code() in _SIZE_ERRORS else None
        self._failure = FatalProduceError(r.source_topic, r.partition, offset, f"{err.str()} ({size} bytes, target {r.target_topic})", hint=hint)
        self._set_state(FlowState.FAILED, str(self._failure))

    def _poll(self, timeout: float) -> None:
        """Serve delivery reports; a fatal producer error becomes the flow's failure."""
        if self._producer_dead:
            return
        try:
            self._producer.poll(timeout)
        except KafkaException as exc:
            self._producer_fatal(exc.args[0])

    def _producer_fatal(self, err: KafkaError) -> None:
        """The producer is unusable (the gapless guarantee could not be kept).

        librdkafka names the partition of the refused request; the record to name is the
        largest one of that partition still in flight (a refused request fails all of its
        records, and for size errors the largest is the one that does not fit).
        """
        self._producer_dead = True
        if isinstance(self._failure, FatalProduceError):
            return
        m = re.search(r"for (\S+) \[(\d+)\]", err.str())
        st = self._by_target.get((m.group(1), int(m.group(2)))) if m else None
        if st is not None and st.inflight:
            if "size" in err.str().lower():
                big = max(st.inflight, key=lambda seg: seg.big_size)
                src, size = big.big_offset, big.big_size
            else:
                src, size = st.inflight[0].first, st.inflight[0].big_size
            st.failed_at = st.inflight[0].first
            r = st.route
            hint = "raise max.message.bytes on the target topic (and message.max.bytes on its brokers), then restart" if "size" in err.str().lower() else "fix the cause on the target, then restart; nothing past this record was committed"
            self._failure = FatalProduceError(r.source_topic, r.partition, src, f"{err.str()} ({size} bytes, target {r.target_topic})", hint=hint)
        else:
            self._failure = MirrorError(f"flow {self.flow.name}: the producer to {self.flow.target} failed: {err.str()}")
        for other in self._by_target.values():
            if other.inflight and other.failed_at is None:
                other.failed_at = other.inflight[0].first
        self._set_state(FlowState.FAILED, str(self._failure))

    def _on_producer_error(self, err: KafkaError) -> None:
        if err.fatal():
            # Typically the gapless guarantee: a refused request of records that asked for
            # no report. Name the partition and record, and stop acknowledging anything.
            self._producer_fatal(err)
        elif err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self._set_state(FlowState.RETRYING, f"target {self.flow.target} unreachable: {err.str()}")

    def _on_consumer_error(self, err: KafkaError) -> None:
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self._set_state(FlowState.RETRYING, f"source {self.flow.source} unreachable: {err.str()}")

    def _on_consume_error(self, err: KafkaError, msg: Message) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.fatal():
            self._failure = MirrorError(f"flow {self.flow.name}: the source consumer failed: {err.str()}")
        else:
            log.warning("flow %s: consume error on %s[%s]: %s", self.flow.name, msg.topic(), msg.partition(), err.str())

    def _inflight_count(self) -> int:
        """Produced records not yet acknowledged (0 means: nothing to wait for)."""
        return sum(seg.count for st in self._by_target.values() for seg in st.inflight)

    # ------------------------------------------------------------------ commits

    def _emit_acks(self) -> None:
        batches = []
        for st in self._by_target.values():
            if st.batch is not None:
                batches.append(st.batch)
                st.batch = None
        if batches:
            self.records_acked += sum(b.count for b in batches)
            for listener in self.listeners:
                listener.on_acked(batches)
            if self.state is FlowState.RETRYING and not self._paused:
                self._set_state(FlowState.RUNNING, "target acknowledging again")

    def _positions(self, partitions: Mapping[SourcePartition, _Partition]) -> dict[SourcePartition, int]:
        """Source positions safe to commit: everything before them is on the target."""
        quiet = [tp for tp, st in partitions.items() if not st.inflight and st.failed_at is None and not st.tainted]
        consumed: dict[SourcePartition, int] = {}
        if quiet and not self._pending and self._failure is None and not self._producer_dead:
            # Nothing of these partitions is in flight, so everything the consumer has
            # returned is acknowledged; its position also skips transaction markers and
            # aborted records, which have no record to acknowledge.
            for tp in self._consumer.position([TopicPartition(t, p) for t, p in quiet]):
                if tp.offset >= 0:
                    consumed[(tp.topic, tp.partition)] = tp.offset
        out = {}
        for tp, st in partitions.items():
            pos = st.acked_next
            c = consumed.get(tp)
            if c is not None and (pos is None or c > pos):
                pos = c
            if pos is not None and (st.committed is None or pos > st.committed):
                out[tp] = pos
        return out

    def _commit(self, partitions: Mapping[SourcePartition, _Partition] | None = None) -> None:
        self._emit_acks()
        parts = self._parts if partitions is None else partitions
        positions = self._positions(parts)
        if not positions:
            return
        try:
            for listener in self.listeners:
                listener.before_commit(self.flow.name, positions)
        except MirrorError as exc:
            # Invariant 1: the offset map must hold the deltas before the commit. Keep
            # mirroring; lag grows until the store answers again.
            self._set_state(FlowState.RETRYING, f"commit held back: {exc}")
            return
        try:
            self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()], asynchronous=False)
        except KafkaException as exc:
            log.warning("flow %s: commit of %d partitions failed, retrying next interval: %s", self.flow.name, len(positions), exc.args[0].str())
            return
        for tp, pos in positions.items():
            parts[tp].committed = pos

    # ------------------------------------------------------------------ topics and assignment

    def _refresh_topics(self) -> bool:
        """Match source topics, prepare targets, (re)subscribe. False if a cluster did not answer."""
        try:
            mappings = match_topics(self.config, self.flow, self._source_admin.topics())
            existing = self._target_admin.topics()
            # A target topic we write to is gone: drop what is queued for it *before* it is
            # created again, or those records would land first in the new topic.
            gone = sorted({st.route.target_topic for st in self._parts.values()} - set(existing))
            if gone:
                self._resync(gone)
            result = ensure_targets(self._source_admin, self._target_admin, mappings, existing=existing)
        except ClusterUnavailable as exc:
            self._set_state(FlowState.RETRYING, str(exc))
            # An admin client that lived through a broker restart can keep failing long after
            # the broker is back; a new one answers at once.
            self._source_admin = Admin(self.flow.source, self._source)
            self._target_admin = Admin(self.flow.target, self._target)
            return False
        if result.created:
            created = [TopicPartition(m.source, p) for m in mappings if m.target in result.created for p in range(m.partitions)]
            try:
                # Bounded: a new group's coordinator may take a while, and the loop waits here.
                self._created_at.update(self._committed(created, timeout=min(5.0, self._source.timeout)))
            except MirrorError as exc:
                # A brand-new group's coordinator may not answer yet. Take it as "nothing
                # committed": right for a new group; for a group whose old target topic was
                # deleted, the partitions then resume at the group's offsets (logged).
                log.warning("flow %s: could not read the group's offsets when creating %s (%s); mirroring them from the group's committed offsets", self.flow.name, ", ".join(result.created), exc)
                self._created_at.update({(tp.topic, tp.partition): None for tp in created})
        self._mappings = {m.source: m for m in mappings}
        if self._caught_up_at is None and self.until_caught_up:
            self._caught_up_at = self._end_offsets(mappings)
        topics = tuple(sorted(self._mappings))
        if topics != self._subscribed:
            added = set(topics) - set(self._subscribed)
            if added:
                log.info("flow %s: mirroring %s", self.flow.name, ", ".join(f"{t} -> {self._mappings[t].target}" for t in sorted(added)))
            if topics:
                self._consumer.subscribe(list(topics), on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
            else:
                self._consumer.unsubscribe()
            self._subscribed = topics
        return True

    def _resync(self, target_topics: Sequence[str]) -> None:
        """A target topic we were writing to was deleted (it is created again right after).

        Records queued for it would land first in the new topic, ahead of the older records
        it lost: so drop everything queued (purged records are uncommitted and re-read),
        commit what the target did acknowledge for the other topics, rewind every partition
        to its last acknowledged position, and the recreated topics' partitions to the
        source's beginning. Purged in-flight requests may still have landed: those are the
        only duplicates this costs.
        """
        log.warning("flow %s: target topic(s) %s disappeared; recreating them and re-mirroring from the source's beginning", self.flow.name, ", ".join(target_topics))
        self._emit_acks()
        self._producer.purge(in_queue=True, in_flight=True)
        self._poll(0)
        # The idempotent producer numbers records per partition; a recreated partition
        # expects sequence 0 again, so only a new producer (new producer id) can write to it.
        self._producer = make_producer(self.flow.target, self._target, self._producer_cfg)
        self._producer_dead = False
        self._drop_pending()
        gone = set(target_topics)
        keep = {tp: st for tp, st in self._parts.items() if st.route.target_topic not in gone}
        for st in self._by_target.values():
            if st.inflight:
                st.tainted = True
            for seg in st.inflight:
                seg.dead = True
            st.inflight.clear()
            st.open = None
        self._commit(keep)
        reset: list[SourcePartition] = []
        for tp, st in list(self._parts.items()):
            if st.route.target_topic in gone:
                fresh = _Partition(st.route)
                self._parts[tp] = fresh
                self._by_target[(st.route.target_topic, st.route.partition)] = fresh
                self._consumer.seek(TopicPartition(tp[0], tp[1], OFFSET_BEGINNING))
                reset.append(tp)
            elif st.acked_next is not None:
                self._consumer.seek(TopicPartition(tp[0], tp[1], st.acked_next))
                st.tainted = False  # re-read from the last acknowledged record on
            else:
                committed = self._consumer.committed([TopicPartition(tp[0], tp[1])], timeout=self._source.timeout)[0].offset
                self._consumer.seek(TopicPartition(tp[0], tp[1], committed if committed >= 0 else OFFSET_BEGINNING))
                st.tainted = False
        for listener in self.listeners:
            listener.on_reset(self.flow.name, reset)

    def _committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> dict[SourcePartition, int | None]:
        timeout = timeout or self._source.timeout
        try:
            got = self._consumer.committed(partitions, timeout=timeout)
        except KafkaException as exc:
            raise_for(self.flow.source, f"read the committed offsets of group {self.flow.group_id!r}", exc, timeout)
        return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in got}

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            r = route(self.flow, tp.topic, tp.partition)
            st = _Partition(r)
            self._parts[(tp.topic, tp.partition)] = st
            self._by_target[(r.target_topic, tp.partition)] = st
        # A target topic this worker created is empty: it must receive everything the source
        # still holds, even if the group committed offsets for an earlier, deleted incarnation
        # of it. But only if nobody committed since the creation: another worker may have
        # filled it in the meantime (then the group's offsets are right, as always).
        created = [tp for tp in partitions if (tp.topic, tp.partition) in self._created_at]
        start = {}
        if created:
            try:
                now = self._committed([TopicPartition(tp.topic, tp.partition) for tp in created])
            except MirrorError as exc:
                # Raising here would kill the worker from inside the rebalance. Fall back to
                # the group's offsets: for a new group (the usual reason a target is created)
                # that is the beginning anyway.
                log.warning("flow %s: could not read the group's offsets for newly created targets (%s); starting from the group's committed offsets", self.flow.name, exc)
                now = {}
            for key in [(tp.topic, tp.partition) for tp in created]:
                created_with = self._created_at.pop(key)
                if key in now and now[key] == created_with:
                    start[key] = OFFSET_BEGINNING
        consumer.incremental_assign([TopicPartition(tp.topic, tp.partition, start[(tp.topic, tp.partition)]) if (tp.topic, tp.partition) in start else tp for tp in partitions])
        if self._paused:
            consumer.pause(partitions)
        log.info("flow %s: assigned %d partitions (now %d)", self.flow.name, len(partitions), len(self._parts))

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        """Hand partitions over cleanly: wait for their acknowledgements, commit, forget."""
        keys = {(tp.topic, tp.partition) for tp in partitions}
        revoked = {k: self._parts[k] for k in keys if k in self._parts}
        self._drop_pending(keys)
        for st in revoked.values():
            self._drop_open(st)
        deadline = self.clock() + DRAIN_TIMEOUT
        while any(st.inflight for st in revoked.values()) and self.clock() < deadline and not self._producer_dead:
            self._poll(0.1)
        try:
            self._commit(revoked)
        except MirrorError as exc:
            log.warning("flow %s: commit on revoke failed: %s", self.flow.name, exc)
        self._forget(keys)
        consumer.incremental_unassign(partitions)
        log.info("flow %s: revoked %d partitions (now %d)", self.flow.name, len(partitions), len(self._parts))

    def _on_lost(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        # Another worker owns these now; committing would overwrite its progress.
        keys = {(tp.topic, tp.partition) for tp in partitions}
        self._drop_pending(keys)
        for k in keys:
            if k in self._parts:
                self._drop_open(self._parts[k])
        self._forget(keys)
        consumer.incremental_unassign(partitions)
        log.warning("flow %s: lost %d partitions", self.flow.name, len(partitions))

    def _forget(self, keys: set[SourcePartition]) -> None:
        for k in keys:
            st = self._parts.pop(k, None)
            if st is not None and not st.inflight:
                self._by_target.pop((st.route.target_topic, st.route.partition), None)

    # ------------------------------------------------------------------ caught up?

    def _end_offsets(self, mappings: Sequence[TopicMapping]) -> dict[SourcePartition, int]:
        parts = [(m.source, p) for m in mappings for p in range(m.partitions)]
        marks = self._source_admin.watermarks(parts)
        # A partition with nothing readable (empty, or all expired) is caught up by definition.
        return {tp: w.high for tp, w in marks.items() if w.high > w.low}

    def _is_caught_up(self) -> bool:
        """Every matched partition committed up to the end offsets seen after start.

        Read from the group's committed offsets on the source, so it holds across all the
        workers sharing the flow, not only this one.
        """
        if self._caught_up_at is None or self._pending or self._inflight_count():
            return False
        try:
            committed = self._source_admin.group_offsets(self.flow.group_id)
        except MirrorError:
            return False
        return all(committed.get(tp, -1) >= end for tp, end in self._caught_up_at.items())


class Runner:
    """Runs the selected flows, one thread each, until stopped, caught up, or failed."""

    def __init__(
        self,
        config: Config,
        flows: Sequence[FlowConfig],
        *,
        stop: threading.Event | None = None,
        listeners: Callable[[FlowConfig], Sequence[AckListener]] = lambda flow: (),
        **worker_args: Any,
    ) -> None:
        self.stop = stop or threading.Event()
        self.workers = [FlowWorker(config, f, stop=self.stop, listeners=listeners(f), **worker_args) for f in flows]
        self.errors: list[BaseException] = []

    def run(self) -> None:
        threads = [threading.Thread(target=self._run_one, args=(w,), name=f"flow-{w.flow.name}", daemon=True) for w in self.workers]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(timeout=0.2)
                if self.errors:
                    self.stop.set()  # one flow failed: stop the others cleanly, then report
        finally:
            self.stop.set()
            for t in threads:
                t.join()
        if self.errors:
            raise self.errors[0]

    def _run_one(self, worker: FlowWorker) -> None:
        try:
            worker.run()
        except BaseException as exc:  # reported by run() on the main thread
            if not isinstance(exc, MirrorError):
                log.exception("flow %s crashed", worker.flow.name)
            self.errors.append(exc)
