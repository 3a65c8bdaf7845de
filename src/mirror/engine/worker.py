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
import zlib
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Any

from mirror.config import Config, FlowConfig
from mirror.domain.acks import AckBatch, AckListener, SourcePartition, backlog_full
from mirror.domain.route import Route, route
from mirror.domain.topics import TopicMapping, match_topics
from mirror.engine.targets import LIMIT_HEADROOM, ensure_targets
from mirror.errors import AuthorizationFailed, ClusterUnavailable, FatalProduceError, MirrorError
from mirror.kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Admin,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
    make_consumer,
    make_producer,
    raise_for,
)
from mirror.kafka.errors import (
    AUTHENTICATION,
    AUTHORIZATION,
    authentication_error,
    authorization_error,
)
from mirror.kafka.settings import BATCH_SIZE, CONSUMER_DEFAULTS, PRODUCER_DEFAULTS

log = logging.getLogger(__name__)

# Per-record consume batch: large enough to amortise Python overhead, small enough that a
# stop request or a commit tick is never far away.
CONSUME_BATCH = 2000
DRAIN_TIMEOUT = 30.0
FATAL_DRAIN_TIMEOUT = 5.0
POISON_GRACE = 30.0  # how long the other partitions may carry on after one hit a record that never fits
BACKPRESSURE_WAIT = 1.0  # how long a full producer queue may block before reading pauses  # how long a stop waits for outstanding acknowledgements

_TID = "target-topic-id="  # commit metadata: see `_offset`
_UNREAD = -2  # `_created_at`: the group's offsets could not be read when the target was created

# Delivery errors that mean "this record can never be written", as opposed to the
# retriable ones librdkafka keeps retrying on its own.
_SIZE_ERRORS = {KafkaError.MSG_SIZE_TOO_LARGE, getattr(KafkaError, "RECORD_LIST_TOO_LARGE", -1)}
# The target topic (or partition) does not exist (any more): deleted, or not yet grown.
_GONE_ERRORS = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
# Room left in a producer batch below a topic's max.message.bytes (framing the batch.size
# accounting may not count).
BATCH_MARGIN = 1024
# A record this far below its target topic's limit fits whatever its headers (the check
# beyond it is `_never_fits`); batch and record framing of a lone record.
SIZE_CHECK_SLACK = 16384
RECORD_OVERHEAD = 61 + 21


class _Placed:
    """A delivery report's offset, for a run acknowledged by a flush (`_close_open_segment`)."""

    __slots__ = ("_offset",)

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


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


def _denied_in_fatal(err: KafkaError) -> tuple[str, str, str] | None:
    """The ACL a fatal producer error says is missing: librdkafka wraps the broker's refusal
    in a fatal (gapless, idempotence) error whose code is not the broker's, only its text."""
    text = err.str()
    m = re.search(r"for (\S+) \[\d+\]", text)
    if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED or "Topic authorization failed" in text:
        return ("Write", "topic", m.group(1) if m else "the target topics")
    if err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED or "Cluster authorization failed" in text:
        # Since Kafka 3.0 (KIP-679) Write on any topic lets a producer be idempotent.
        return ("Write", "topic", "the target topics")
    return None


@dataclass(slots=True)
class _Partition:
    """Bookkeeping for one assigned source partition."""

    route: Route
    producer: Any = None  # the producer whose batches fit this target topic's limit
    room: int = 1 << 62  # key + value bytes below which a record surely fits the target's limit
    limit: int | None = None  # the target topic's max.message.bytes
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
    t_next: int | None = None  # last acknowledged target offset + 1 (a lower bound for the next)
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
        self._target_ids: dict[str, str] = {}  # target topic -> topic id when last seen
        self._limits: dict[str, int] = {}  # target topic -> its max.message.bytes
        self._producers: dict[int, Any] = {}  # batch.size -> producer (see `_producer_for`)
        self._refresh_now = False  # a delivery report says a target topic is gone
        self._resyncs = 0
        self._pending: deque[Message] = deque()  # consumed, not yet accepted by a full producer queue
        self._paused = False
        self._held = False  # reading paused because a listener (the offset store) is behind
        # After a freeze: reading paused until the group confirms these partitions are still
        # ours (a commit as a member of the current generation) or takes them away.
        self._fenced: dict[SourcePartition, int] | None = None
        self._tick = clock()  # last time this thread was seen running (see `_check_frozen`)
        self._failure: MirrorError | None = None
        self._poisoned: FatalProduceError | None = None  # a record that can never be written (see `_poison`)
        self._poison_deadline = 0.0
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
        self._producer = self._producer_for(None)
        self._subscribed: tuple[str, ...] = ()
        # Frozen (SIGSTOP, a VM pause, a stalled host) for longer than this, the group may
        # have given this worker's partitions to another: see `_check_frozen`.
        self._fence_after = (int(consumer_cfg["session.timeout.ms"]) - int(consumer_cfg["heartbeat.interval.ms"])) / 1000
        self._tick = self.clock()
        self._set_state(FlowState.RUNNING, "started")

    def _close(self) -> None:
        """Drain, flush, commit, close: in that order, whatever happened before."""
        self._set_state(FlowState.STOPPING, "draining")
        self._drop_pending()  # never produced; uncommitted, so the next owner re-reads them
        for st in self._by_target.values():
            self._drop_open(st)
        # After a fatal producer error the reports of what was in flight still come (failed
        # or acknowledged) and are counted; only their wait is shorter.
        deadline = self.clock() + (FATAL_DRAIN_TIMEOUT if self._producer_dead else DRAIN_TIMEOUT)
        while self._inflight_count() and self.clock() < deadline:
            self._poll(0.1)
        left = self._inflight_count()
        if left and not self._producer_dead:
            log.warning("flow %s: %d records not acknowledged by %s after %.0fs; their source offsets stay uncommitted", self.flow.name, left, self.flow.target, DRAIN_TIMEOUT)
            for producer in self._producers.values():
                producer.purge()
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
            for producer in self._producers.values():
                producer.flush(0)
        for listener in self.listeners:
            listener.close()
        self._set_state(FlowState.FAILED if self._failure else FlowState.STOPPED, str(self._failure or "stopped"))

    def _producer_for(self, target_topic: str | None) -> Any:
        """The producer for a target topic: one whose batches fit the topic's limit.

        The broker checks a whole batch against the topic's max.message.bytes and librdkafka
        never splits a refused batch, so a topic whose limit is below the batch size needs
        smaller batches. A producer of its own (one per distinct size) keeps the large
        batches, and their throughput, for every other topic. A partition keeps its producer
        while assigned: reports of one partition must come from one producer, in order.
        """
        size = int(self._producer_cfg.get("batch.size", BATCH_SIZE))
        limit = self._limits.get(target_topic) if target_topic is not None else None
        if limit is not None and limit < size:
            size = max(1024, limit - BATCH_MARGIN)
        producer = self._producers.get(size)
        if producer is None:
            producer = self._producers[size] = make_producer(self.flow.target, self._target, {**self._producer_cfg, "batch.size": size})
            if size != int(self._producer_cfg.get("batch.size", BATCH_SIZE)):
                log.info("flow %s: target %s takes batches of at most %s bytes (max.message.bytes): a producer with batch.size %d for it", self.flow.name, target_topic, limit, size)
        return producer

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
            if now >= next_refresh or self._refresh_now:
                self._refresh_now = False
                next_refresh = now + (self.flow.refresh_interval if self._refresh_topics() else min(5.0, self.flow.refresh_interval))
                self._tick = self.clock()  # blocking admin calls are not a freeze
            if self._pending:
                self._drain_pending()
            # Take what is there without waiting for a full batch (consume(n, t) returns only
            # when n records arrived or t passed, so at low rates every record would wait t);
            # only when nothing is there, block briefly for the next one.
            msgs = self._consumer.consume(CONSUME_BATCH, 0) or self._consumer.consume(1, 0.1)
            if self._check_frozen():
                msgs = []  # read before the freeze; re-read from the committed offsets
            if msgs:
                self._forward(msgs)
            self._poll(0)
            if self._poisoned is not None and self._failure is None:
                if (not msgs and not self._pending and not self._inflight_count()) or self.clock() >= self._poison_deadline:
                    self._failure = self._poisoned
            if self._failure is not None and not self._recovered():
                raise self._failure
            if self.clock() >= next_commit:
                self._confirm_owner()
                self._commit()
                self._hold_back(backlog_full(self.listeners))
                self._tick = next_commit = self.clock()
                next_commit += self.flow.commit_interval
                if self.until_caught_up and self._is_caught_up():
                    self._set_state(FlowState.CAUGHT_UP, "every matched partition mirrored and committed")
                    return

    def _forward(self, msgs: list[Message]) -> None:
        """The per-record path: consumed message -> produce on the target."""
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
            if st is None or st.failed_at is not None:  # revoked in this very batch, or stopped
                continue
            offset = m.offset()
            key = m.key()
            value = m.value()
            ts = m.timestamp()[1]
            headers = st.route.headers(offset, m.headers())
            size = (len(key) if key else 0) + (len(value) if value else 0)
            if size > st.room and self._never_fits(st, offset, key, value, headers):
                continue  # this partition stops here; the others carry on
            seg = st.open
            new = seg is None
            if new:
                seg = _Segment(offset)
            ends = keys[i + 1] != tp
            cb = partial(self._on_segment_end, st, seg) if ends else partial(self._on_segment_start, st, seg) if new else None
            waited = 0.0
            produce = st.producer.produce
            try:
                while True:
                    try:
                        if cb is None:
                            produce(st.route.target_topic, value, key, partition=tp[1], timestamp=ts, headers=headers)
                        else:
                            produce(st.route.target_topic, value, key, partition=tp[1], timestamp=ts, headers=headers, on_delivery=cb)
                        break
                    except BufferError:
                        if len(st.producer) == 0:
                            # The queue is empty and still has no room: this record is larger
                            # than the whole producer queue and would wait forever.
                            self._too_big_for_queue(st, offset, size)
                            break
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
                code = exc.args[0].code()
                if code in _GONE_ERRORS:
                    # The producer's metadata does not know this partition yet (partitions
                    # just added to the source and the target grown, or the target topic is
                    # being recreated): hold the rest like a full queue, refresh, retry.
                    self._unknown_partition(st, tp)
                    self._pending.extend(msgs[i:])
                    self._pause()
                    return
                if code == KafkaError._FATAL:
                    # The producer already failed; error_cb names the partition and the
                    # error, not this record. Serve it now.
                    self._poll(0)
                    if self._failure is None:
                        self._producer_fatal(exc.args[0])
                    return
                self._produce_refused(st, offset, size, exc.args[0])
                continue
            if st.failed_at is not None:
                continue  # refused without a produce (the record larger than the queue)
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

    def _recovered(self) -> bool:
        """Was the failure the aftermath of a target topic deleted and created again?

        Another worker of the flow may recreate a deleted target topic before this one's
        refresh saw it gone; this producer's queued records then reach the new topic with
        sequence numbers it does not expect, a fatal producer error. A refresh now sees the
        new topic id and resyncs (new producers, re-read from what was acknowledged), which
        clears that failure; a record that really cannot be written fails again.
        """
        before = self._resyncs
        if not self._refresh_topics() or self._resyncs == before:
            return False
        log.warning("flow %s: %s came from a recreated target topic; resynced and carrying on", self.flow.name, self._failure)
        self._failure = None
        self._set_state(FlowState.RUNNING, "target topic recreated; resynced")
        return True

    def _check_frozen(self) -> bool:
        """Was this thread frozen long enough to lose its partitions? Then fence it.

        A worker stopped (SIGSTOP, a paused VM) past the session timeout wakes up a zombie:
        another worker owns its partitions now and has started from the committed offsets.
        Its librdkafka threads wake with it and may still send what was queued, but nothing
        they report may count: acknowledgements from now on would write offset-map rows (and
        commits) for copies that land after the new owner's. So before serving one report,
        drop everything in flight uncounted, purge, take new producers, and re-read every
        partition from the group's committed offsets (duplicates, never loss); the rebalance
        that follows takes away what is no longer ours.
        """
        now = self.clock()
        gap, self._tick = now - self._tick, now
        if gap <= self._fence_after or not self._by_target:
            return False
        log.warning("flow %s: this worker did not run for %.1fs (longer than the session timeout allows): its partitions may have another owner now; dropping everything in flight and re-reading from the committed offsets", self.flow.name, gap)
        for st in self._by_target.values():
            for seg in st.inflight:
                seg.dead = True
            st.inflight.clear()
            st.open = None
            st.batch = None
        for producer in self._producers.values():
            producer.purge(in_queue=True, in_flight=True)
        self._producers.clear()
        self._producer = self._producer_for(None)
        self._producer_dead = False
        self._pending.clear()
        self._by_target = {}
        try:
            committed = self._committed([TopicPartition(t, p) for t, p in self._parts], timeout=min(5.0, self._source.timeout))
        except MirrorError:
            committed = {}
        for tp, old in list(self._parts.items()):
            fresh = _Partition(old.route, self._producer_for(old.route.target_topic))
            self._size_check(fresh)
            self._parts[tp] = self._by_target[(old.route.target_topic, old.route.partition)] = fresh
            start = committed.get(tp)
            if start is None:
                fresh.tainted = True  # unknown: never commit the consumer's position for it
                continue
            try:
                self._consumer.seek(TopicPartition(tp[0], tp[1], start))
            except KafkaException:
                fresh.tainted = True  # no longer assigned: the rebalance takes it away
        # Write nothing until the group says whose partitions these are (`_confirm_owner`).
        self._fenced = {tp: o for tp, o in committed.items() if o is not None}
        self._pause("frozen past the session timeout; reading paused until the group confirms the assignment")
        self._tick = self.clock()
        return True

    def _confirm_owner(self) -> None:
        """After a freeze: commit the committed offsets again. Only a member of the current
        generation may commit, so success means the partitions are still ours: resume. A
        refusal means the group moved on: stay paused until the rebalance takes them away
        (`_on_lost` ends the fence) and gives this worker its new share."""
        if self._fenced is None:
            return
        if self._fenced:
            try:
                self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in self._fenced.items()], asynchronous=False)
            except KafkaException as exc:
                log.info("flow %s: still fenced (%s); waiting for the rebalance", self.flow.name, exc.args[0].str())
                return
        self._unfence()

    def _unfence(self) -> None:
        if self._fenced is not None:
            self._fenced = None
            log.info("flow %s: assignment confirmed after the freeze; reading resumed", self.flow.name)
            if not self._pending and not self._held:
                self._resume()

    def _size_check(self, st: _Partition) -> None:
        limit = self._limits.get(st.route.target_topic)
        st.limit = limit
        st.room = limit - SIZE_CHECK_SLACK if limit is not None else 1 << 62

    def _never_fits(self, st: _Partition, offset: int, key: bytes | None, value: bytes | None, headers: Any) -> bool:
        """Refuse, before producing it, a record the target topic can never take.

        Sent, the broker would refuse its batch and the producer would fail as a whole (the
        gapless guarantee), taking with it the acknowledgements of everything in flight on
        other partitions: those would be mirrored again by every restart. Refused here, the
        flow drains and commits everything acknowledged, then fails naming this record.
        Compression can only shrink a record so far: zlib (denser than lz4) is the yardstick.
        """
        if st.limit is None:
            return False
        payload = (key or b"") + (value or b"")
        if self._producer_cfg.get("compression.type", "none") not in ("none", None):
            payload = zlib.compress(payload, 1)
        extra = sum(len(k) + (len(v) if v else 0) + 8 for k, v in headers or ()) + RECORD_OVERHEAD
        if len(payload) + extra <= st.limit:
            return False
        r = st.route
        self._poison(st, offset, FatalProduceError(
            r.source_topic, r.partition, offset,
            f"record of {(len(key) if key else 0) + (len(value) if value else 0)} bytes (with headers and framing, compressed at best, {len(payload) + extra}) is larger than max.message.bytes={st.limit} of the target topic {r.target_topic}",
            hint="raise max.message.bytes on the target topic (and message.max.bytes on its brokers), then restart",
        ))
        return True

    def _poison(self, st: _Partition, offset: int, failure: FatalProduceError) -> None:
        """A record of this partition can never be written (and the producer is fine).

        The partition stops here: nothing from this record on is produced or committed. The
        flow's other partitions carry on until they are caught up (at most POISON_GRACE),
        committing as usual, and only then does the flow fail naming the record. Stopping
        at once would, under a supervisor's restarts, leave the healthy partitions of every
        worker that inherits this one starved (each batch would start with it again).
        """
        self._close_open_segment(st)
        st.failed_at = offset if st.failed_at is None else min(st.failed_at, offset)
        r = st.route
        try:
            self._consumer.pause([TopicPartition(r.source_topic, r.partition)])
        except KafkaException:
            pass  # not assigned any more: nothing to read from it either way
        if self._poisoned is None:
            self._poisoned = failure
            self._poison_deadline = self.clock() + POISON_GRACE
            log.info("flow %s: %s; the other partitions carry on until caught up (at most %.0fs), then the flow stops", self.flow.name, failure, POISON_GRACE)
            self._set_state(FlowState.FAILED, str(failure))

    def _close_open_segment(self, st: _Partition) -> None:
        """The run of records before a refused one was produced without its closing report
        (that was to be the refused record's neighbour): wait for the producer to deliver
        everything, then acknowledge the run, or every restart would mirror it again.

        Delivered with no error from an idempotent, gapless producer means every record of
        it landed, in order; placed from its first record's report (exact when nothing else
        wrote in between, a lower bound otherwise: re-reading, never skipping).
        """
        seg = st.open
        if seg is None:
            return
        st.open = None
        st.producer.flush(DRAIN_TIMEOUT)
        if seg.dead or self._producer_dead or seg.t_first is None or st.failed_at is not None or not st.inflight or st.inflight[0] is not seg:
            self._drop_open_segment(st, seg)
            return
        self._on_segment_end(st, seg, None, _Placed(seg.t_first + seg.count - 1))

    def _drop_open_segment(self, st: _Partition, seg: _Segment) -> None:
        seg.dead = True
        st.tainted = True
        if seg in st.inflight:
            st.inflight.remove(seg)

    def _unknown_partition(self, st: _Partition, tp: SourcePartition) -> None:
        r = st.route
        log.warning("flow %s: %s[%d] is not known to the producer yet; refreshing its metadata and retrying", self.flow.name, r.target_topic, r.partition)
        self._refresh_now = True
        try:
            # Bounded: a metadata request for one topic updates the producer's partition count.
            st.producer.list_topics(r.target_topic, timeout=min(2.0, self._target.timeout))
        except KafkaException as exc:
            log.warning("flow %s: metadata of %s: %s", self.flow.name, r.target_topic, exc.args[0].str())

    def _too_big_for_queue(self, st: _Partition, offset: int, size: int) -> None:
        r = st.route
        kb = self._producer_cfg.get("queue.buffering.max.kbytes")
        self._poison(st, offset, FatalProduceError(
            r.source_topic, r.partition, offset, f"the record ({size} bytes, target {r.target_topic}) is larger than the producer's whole queue (queue.buffering.max.kbytes={kb})",
            hint="raise queue.buffering.max.kbytes in the flow's producer settings, then restart",
        ))

    def _drain_pending(self) -> None:
        msgs = list(self._pending)
        self._pending.clear()
        self._forward(msgs)
        if not self._pending:
            self._resume()

    def _pause(self, reason: str | None = None) -> None:
        if not self._paused:
            self._consumer.pause(self._consumer.assignment())
            self._paused = True
            self._set_state(FlowState.RETRYING, reason or f"target {self.flow.target} is not keeping up; reading paused")

    def _hold_back(self, held: bool) -> None:
        """Pause reading while a listener cannot keep up (the offset store is away and its
        buffer is full): records read now would only add rows that cannot be written."""
        if held == self._held:
            return
        self._held = held
        if held:
            log.warning("flow %s: offset store behind (its buffer is full); reading paused until it answers", self.flow.name)
            self._pause("offset store unreachable; reading paused")
        elif not self._pending:
            self._resume()

    def _resume(self) -> None:
        if self._held or self._fenced is not None:
            return
        if self._paused:
            assignment = self._consumer.assignment()
            self._consumer.resume(assignment)
            # Pausing drops librdkafka's prefetched records; make sure fetching restarts at
            # the record after the last one handed to us (all of which are produced by now),
            # not after the last one fetched, or the dropped ones would be skipped.
            for tp in self._consumer.position(assignment):
                if tp.offset >= 0:
                    self._consumer.seek(tp)
            stopped = [TopicPartition(t, p) for (t, p), st in self._parts.items() if st.failed_at is not None]
            if stopped:
                self._consumer.pause(stopped)
            self._paused = False
            self._set_state(FlowState.RUNNING, "reading resumed")

    # ------------------------------------------------------------------ acknowledgements

    def _on_segment_start(self, st: _Partition, seg: _Segment, err: KafkaError | None, msg: Message) -> None:
        """Delivery report of a segment's first record (served on this thread by poll)."""
        if seg.dead:
            return
        if err is None:
            # A DUPLICATE_SEQUENCE_NUMBER "success" carries no offset (-1): unknown placement.
            seg.t_first = msg.offset() if msg.offset() >= 0 else None
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
        if t_last < 0:
            # Acknowledged (a DUPLICATE_SEQUENCE_NUMBER "success": the broker had it already)
            # but with no offset. The segment lies somewhere after everything acknowledged
            # before it: place it at that lower bound, which translates too early (re-read),
            # never too late, and let the next exact report set the delta again.
            self._ack_unplaced(st, seg)
            return
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
        self._count_acked(st, b, seg)
        st.t_next = t_last + 1

    def _batch(self, st: _Partition, seg: _Segment) -> AckBatch:
        b = st.batch
        if b is None:
            r = st.route
            b = st.batch = AckBatch(self.flow.name, r.source_topic, r.partition, r.target_topic, seg.first, seg.first + 1)
        return b

    @staticmethod
    def _count_acked(st: _Partition, b: AckBatch, seg: _Segment) -> None:
        b.next_offset = seg.last + 1
        b.count += seg.count
        b.bytes += seg.bytes
        b.max_timestamp_ms = max(b.max_timestamp_ms, seg.max_ts)
        st.acked_next = seg.last + 1

    def _ack_unplaced(self, st: _Partition, seg: _Segment) -> None:
        """An acknowledged segment whose reports carry no offset (see `_on_segment_end`)."""
        b = self._batch(st, seg)
        if st.t_next is not None:
            self._sync(st, b, seg.first, st.t_next)
            for idx, src in seg.gaps:
                self._sync(st, b, src, st.t_next + idx)
            st.t_next += seg.count
        st.delta = None  # unknown: the next exact report writes its row whatever the delta
        self._count_acked(st, b, seg)

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
        if err.code() in AUTHORIZATION:
            # A missing grant is the operator's to fix, not the record's: say which one.
            if st.failed_at is None or seg.first < st.failed_at:
                st.failed_at = seg.first
            if self._failure is None:
                self._failure = authorization_error(self.flow.target, err, f"write topic {st.route.target_topic!r}", ("Write", "topic", st.route.target_topic))
                self._set_state(FlowState.FAILED, str(self._failure))
            return
        if err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            st.tainted = True  # purged: uncommitted, so re-read by the next owner
            return
        if err.code() in _GONE_ERRORS:
            # The target topic was deleted under us: not the record's fault. Nothing of this
            # partition counts from here; the refresh recreates the topic and re-mirrors it.
            st.tainted = True
            if st.failed_at is None or seg.first < st.failed_at:
                st.failed_at = seg.first
            self._refresh_now = True
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
        r = st.route
        hint = "raise message.max.bytes in the flow's producer settings and on the target" if err.code() in _SIZE_ERRORS else None
        self._poison(st, offset, FatalProduceError(r.source_topic, r.partition, offset, f"{err.str()} ({size} bytes, target {r.target_topic})", hint=hint))

    def _poll(self, timeout: float) -> None:
        """Serve delivery reports; a fatal producer error becomes the flow's failure.

        Reports are still served after a fatal error: records the target did acknowledge
        count as acknowledged (and are committed on the way out), or every restart would
        mirror them again.
        """
        self._check_frozen()
        for producer in list(self._producers.values()):
            try:
                producer.poll(timeout)
            except KafkaException as exc:
                self._producer_fatal(exc.args[0])
            timeout = 0

    def _producer_fatal(self, err: KafkaError) -> None:
        """The producer is unusable (the gapless guarantee could not be kept).

        librdkafka names the partition of the refused request; the record to name is the
        largest one of that partition still in flight (a refused request fails all of its
        records, and for size errors the largest is the one that does not fit).
        """
        self._producer_dead = True
        if isinstance(self._failure, (FatalProduceError, AuthorizationFailed)):
            return
        denied = _denied_in_fatal(err)
        if denied is not None:
            self._failure = authorization_error(self.flow.target, err, f"write {denied[2]!r}" if denied[1] == "topic" else "write with the idempotent producer", denied)
            self._set_state(FlowState.FAILED, str(self._failure))
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
        # Records the target acknowledged still count (their reports keep coming, in order),
        # and are committed on the way out rather than mirrored again by every restart. The
        # gapless guarantee stops the producer at the gap: whatever was not written fails
        # its report, so nothing past the gap is ever counted, in any partition.
        self._set_state(FlowState.FAILED, str(self._failure))

    def _on_producer_error(self, err: KafkaError) -> None:
        if err.code() in AUTHENTICATION:
            self._failure = self._failure or authentication_error(self.flow.target, err)
        elif err.fatal():
            # Typically the gapless guarantee: a refused request of records that asked for
            # no report. Name the partition and record, and stop acknowledging anything.
            self._producer_fatal(err)
        elif err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self._set_state(FlowState.RETRYING, f"target {self.flow.target} unreachable: {err.str()}")

    def _on_consumer_error(self, err: KafkaError) -> None:
        if err.code() in AUTHENTICATION:
            self._failure = self._failure or authentication_error(self.flow.source, err)
        elif err.code() in AUTHORIZATION:
            self._failure = self._failure or self._consumer_denied(err, None)
        elif err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self._set_state(FlowState.RETRYING, f"source {self.flow.source} unreachable: {err.str()}")

    def _consumer_denied(self, err: KafkaError, topic: str | None) -> MirrorError:
        if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED or topic is None:
            return authorization_error(self.flow.source, err, f"consume as group {self.flow.group_id!r}", ("Read", "group", self.flow.group_id))
        return authorization_error(self.flow.source, err, f"read topic {topic!r}", ("Read", "topic", topic))

    def _on_consume_error(self, err: KafkaError, msg: Message) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.code() in AUTHORIZATION:
            self._failure = self._failure or self._consumer_denied(err, msg.topic())
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
            self._consumer.commit(offsets=[self._offset(tp, o) for tp, o in positions.items()], asynchronous=False)
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
            # created again, or those records would land first in the new topic. Or it was
            # deleted and created again (by another worker of the flow, or by hand) between
            # two refreshes: a new topic id says so, and it is just as empty.
            in_use = {st.route.target_topic for st in self._parts.values()}
            ids = self._target_admin.topic_ids(sorted(({m.target for m in mappings} | in_use) & set(existing)))
            recreated = {t for t, i in ids.items() if t in in_use and self._target_ids.get(t, i) != i}
            gone = sorted((in_use - set(existing)) | recreated)
            if gone:
                self._resync(gone, recreated)
            for t in gone:
                self._target_ids.pop(t, None)
            self._target_ids.update(ids)
            headroom = LIMIT_HEADROOM if self.flow.provenance_headers else 0
            result = ensure_targets(self._source_admin, self._target_admin, mappings, existing=existing, headroom=headroom)
            if result.created:
                self._target_ids.update(self._target_admin.topic_ids(result.created))
            # A topic created a moment ago may not be describable yet: its source's limit is a
            # lower bound of its own (created with the source's, plus headroom).
            limits = self._source_admin.max_message_bytes(sorted({m.source for m in mappings}))
            self._limits = {m.target: limits[m.source] for m in mappings if m.source in limits}
            self._limits.update(self._target_admin.max_message_bytes(sorted({m.target for m in mappings})))
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
                # A brand-new group's coordinator may not answer yet. The topic is new and
                # empty either way: fill it from the source's beginning (a group whose old
                # target topic was deleted must not resume at offsets of the old one).
                log.warning("flow %s: could not read the group's offsets when creating %s (%s); mirroring them from the source's beginning", self.flow.name, ", ".join(result.created), exc)
                self._created_at.update({(tp.topic, tp.partition): _UNREAD for tp in created})
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

    def _resync(self, target_topics: Sequence[str], recreated: Collection[str] = ()) -> None:
        """A target topic we were writing to was deleted (it is created again right after).

        Records queued for it would land first in the new topic, ahead of the older records
        it lost: so drop everything queued (purged records are uncommitted and re-read),
        commit what the target did acknowledge for the other topics, rewind every partition
        to its last acknowledged position, and the recreated topics' partitions to the
        source's beginning. Purged in-flight requests may still have landed: those are the
        only duplicates this costs.
        """
        log.warning("flow %s: target topic(s) %s disappeared (or were recreated); recreating them and re-mirroring from the source's beginning", self.flow.name, ", ".join(target_topics))
        self._resyncs += 1
        self._emit_acks()
        for producer in self._producers.values():
            producer.purge(in_queue=True, in_flight=True)
        self._poll(0)
        # The idempotent producer numbers records per partition; a recreated partition
        # expects sequence 0 again, so only a new producer (new producer id) can write to it.
        self._producers.clear()
        self._producer = self._producer_for(None)
        self._producer_dead = False
        if recreated:
            # Created again by someone else before this worker saw it gone: records this
            # producer still had queued may have reached the new topic ahead of the ones it
            # lost. Empty this worker's partitions of it (delete up to the end) before
            # mirroring them again from the beginning, so they hold each record once, in order.
            ends = {(st.route.target_topic, st.route.partition): OFFSET_END for st in self._parts.values() if st.route.target_topic in recreated}
            try:
                self._target_admin.delete_records(ends)
            except MirrorError as exc:
                log.warning("flow %s: could not empty this worker's partitions of the recreated %s: %s", self.flow.name, ", ".join(sorted(recreated)), exc)
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
        for st in keep.values():
            st.producer = self._producer_for(st.route.target_topic)
            self._size_check(st)
        for tp, st in list(self._parts.items()):
            if st.route.target_topic in gone:
                fresh = _Partition(st.route, self._producer_for(st.route.target_topic))
                self._size_check(fresh)
                self._parts[tp] = fresh
                self._by_target[(st.route.target_topic, st.route.partition)] = fresh
                self._consumer.seek(TopicPartition(tp[0], tp[1], OFFSET_BEGINNING))
                reset.append(tp)
            elif st.acked_next is not None:
                self._consumer.seek(TopicPartition(tp[0], tp[1], st.acked_next))
                st.tainted = False  # re-read from the last acknowledged record on
                st.failed_at = None  # by a new producer: a record refused again fails again
            else:
                committed = self._consumer.committed([TopicPartition(tp[0], tp[1])], timeout=self._source.timeout)[0].offset
                self._consumer.seek(TopicPartition(tp[0], tp[1], committed if committed >= 0 else OFFSET_BEGINNING))
                st.tainted = False
                st.failed_at = None
        for listener in self.listeners:
            listener.on_reset(self.flow.name, reset)
        self._rewind_group(reset)

    def _offset(self, tp: SourcePartition, offset: int) -> TopicPartition:
        """A source offset to commit, tagged with the id of the target topic it was mirrored
        into: whoever resumes from it can tell whether that target topic is still the same
        one (`_on_assign`), even across restarts and workers."""
        st = self._parts.get(tp)
        tid = self._target_ids.get(st.route.target_topic) if st is not None else None
        return TopicPartition(tp[0], tp[1], offset, f"{_TID}{tid}") if tid else TopicPartition(tp[0], tp[1], offset)

    def _rewind_group(self, partitions: Sequence[SourcePartition]) -> None:
        """Commit offset 0 (read from the beginning) for partitions re-mirrored into a new
        target topic: the group's old offsets describe the deleted one, and a crash before
        the next commit must not resume past records the new topic never received."""
        if not partitions:
            return
        try:
            self._consumer.commit(offsets=[self._offset(tp, 0) for tp in partitions], asynchronous=False)
            for tp in partitions:
                if tp in self._parts:
                    self._parts[tp].committed = 0
        except KafkaException as exc:
            log.warning("flow %s: could not rewind the group's offsets of %d partitions (%s); they move at the next commit", self.flow.name, len(partitions), exc.args[0].str())

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
            st = _Partition(r, self._producer_for(r.target_topic))
            self._size_check(st)
            self._parts[(tp.topic, tp.partition)] = st
            self._by_target[(r.target_topic, tp.partition)] = st
        # A target topic this worker created is empty: it must receive everything the source
        # still holds, even if the group committed offsets for an earlier, deleted incarnation
        # of it. But only if nobody committed since the creation: another worker may have
        # filled it in the meantime (then the group's offsets are right, as always).
        created = [tp for tp in partitions if (tp.topic, tp.partition) in self._created_at]
        start = self._stale_commits(partitions)
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
                if created_with == _UNREAD or (key in now and now[key] == created_with):
                    start[key] = OFFSET_BEGINNING
        if start:
            # Rows of an earlier incarnation of the target would mistranslate; and the group's
            # offsets are rewound first, so a crash before the first commit cannot resume past
            # records the new topic never received.
            for listener in self.listeners:
                listener.on_reset(self.flow.name, sorted(start))
        consumer.incremental_assign([TopicPartition(tp.topic, tp.partition, start[(tp.topic, tp.partition)]) if (tp.topic, tp.partition) in start else tp for tp in partitions])
        self._rewind_group(sorted(start))
        if self._paused:
            consumer.pause(partitions)
        else:
            # librdkafka keeps a partition's paused flag across unassign and assign: one
            # paused here before (a freeze, backpressure) and handed back would never fetch.
            consumer.resume(partitions)
        self._tick = self.clock()  # the offset reads above may block: not a freeze
        log.info("flow %s: assigned %d partitions (now %d)", self.flow.name, len(partitions), len(self._parts))

    def _stale_commits(self, partitions: list[TopicPartition]) -> dict[SourcePartition, int]:
        """Partitions whose committed offset was mirrored into an earlier incarnation of their
        target topic (deleted and created again since, maybe while the mirror was stopped, or
        by another worker): they start again from the source's beginning.

        This worker's part of the new topic is emptied first: nobody committed into it, so
        whatever it holds is a stale or unacknowledged copy that would come ahead of, or
        twice with, the records mirrored now.
        """
        try:
            got = self._consumer.committed([TopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=min(5.0, self._source.timeout))
        except KafkaException as exc:
            log.warning("flow %s: could not read the group's offsets of the assigned partitions (%s); trusting them", self.flow.name, exc.args[0].str())
            return {}
        tagged = [tp for tp in got if tp.offset >= 0 and (tp.metadata or "").startswith(_TID)]
        if not tagged:
            return {}
        try:  # the ids as they are now, not as this worker last saw them
            ids = self._target_admin.topic_ids(sorted({self._parts[(tp.topic, tp.partition)].route.target_topic for tp in tagged}))
        except MirrorError as exc:
            log.warning("flow %s: could not read the target topics' ids (%s); trusting the group's offsets", self.flow.name, exc)
            return {}
        stale: dict[SourcePartition, int] = {}
        for tp in tagged:
            meta = tp.metadata or ""
            now = ids.get(self._parts[(tp.topic, tp.partition)].route.target_topic)
            if tp.offset >= 0 and meta.startswith(_TID) and now is not None and meta[len(_TID):] != now:
                stale[(tp.topic, tp.partition)] = OFFSET_BEGINNING
        if stale:
            log.warning("flow %s: %d partitions were committed into an earlier incarnation of their target topic; re-mirroring them from the source's beginning", self.flow.name, len(stale))
            ends = {(self._parts[k].route.target_topic, k[1]): OFFSET_END for k in stale}
            try:
                self._target_admin.delete_records(ends)
            except MirrorError as exc:
                log.warning("flow %s: could not empty the recreated target partitions: %s", self.flow.name, exc)
        return stale

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
        self._tick = self.clock()  # the commit above may block: not a freeze
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
        self._unfence()  # the group has spoken: what is left (if anything) is ours

    def _forget(self, keys: set[SourcePartition]) -> None:
        """These partitions belong to another worker now. Whatever of theirs is still in
        flight is fenced: a late report must not count (no offset-map row, no commit, for a
        copy that may land after the new owner's)."""
        for k in keys:
            st = self._parts.pop(k, None)
            if st is None:
                continue
            for seg in st.inflight:
                seg.dead = True
            st.inflight.clear()
            st.batch = None
            if self._by_target.get((st.route.target_topic, st.route.partition)) is st:
                del self._by_target[(st.route.target_topic, st.route.partition)]

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
