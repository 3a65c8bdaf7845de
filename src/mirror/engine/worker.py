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

The books (segments, acknowledgements, offset-map deltas, safe commit positions) are kept by
the pure ledger in `mirror.domain.ledger`, which the Spark engine shares; the group's
rebalance callbacks are in `mirror.engine.assignment`; target topics in `mirror.engine.targets`.
The clients come from factories, so the commit rules are unit-tested against in-memory fakes
(tests/unit/test_worker_commits.py).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from enum import Enum
from functools import partial
from typing import Any

from mirror.config import ClusterConfig, Config, FlowConfig
from mirror.domain.acks import AckListener, SourcePartition, backlog_full
from mirror.domain.ledger import Ledger, Segment
from mirror.domain.route import HEADER_ORIGIN
from mirror.domain.topics import TopicMapping, match_topics
from mirror.engine.assignment import DRAIN_TIMEOUT, UNREAD, Assignment, Partition
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
    commit_offsets,
    committed_offsets,
    make_consumer,
    make_producer,
)
from mirror.kafka.errors import (
    AUTHENTICATION,
    AUTHORIZATION,
    authentication_error,
    authorization_error,
)
from mirror.kafka.settings import BATCH_SIZE, CONSUMER_DEFAULTS, PRODUCER_DEFAULTS, batch_size_for

log = logging.getLogger(__name__)

# Makes a consumer or producer: (cluster name, cluster config, client settings) -> client.
ClientFactory = Callable[[str, ClusterConfig, Mapping[str, Any]], Any]

# Per-record consume batch: large enough to amortise Python overhead, small enough that a
# stop request or a commit tick is never far away.
CONSUME_BATCH = 2000
FATAL_DRAIN_TIMEOUT = 5.0  # the same after a fatal producer error: only failed reports are left to come
POISON_GRACE = 30.0  # how long the other partitions may carry on after one hit a record that never fits
BACKPRESSURE_WAIT = 1.0  # how long a full producer queue may block before reading pauses
# Records in flight with no acknowledgement for this long, on a partition: said in the log.
STALL_LOOK = 30.0


# Delivery errors that mean "this record can never be written", as opposed to the
# retriable ones librdkafka keeps retrying on its own.
_SIZE_ERRORS = {KafkaError.MSG_SIZE_TOO_LARGE, getattr(KafkaError, "RECORD_LIST_TOO_LARGE", -1)}
# The target topic (or partition) does not exist (any more): deleted, or not yet grown.
_GONE_ERRORS = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
# A record this far below its target topic's limit fits whatever its headers (the check
# beyond it is `_never_fits`); batch and record framing of a lone record.
SIZE_CHECK_SLACK = 16384
RECORD_OVERHEAD = 61 + 21

# What `_produce_hard` did with a record whose produce raised.
_PRODUCED, _PARTITION_STOPPED, _BATCH_STOPPED = object(), object(), object()

# The hints of a record the target refuses.
HINT_TARGET_SIZE = "raise max.message.bytes on the target topic (and message.max.bytes on its brokers), then restart"
HINT_REFUSED = "fix the cause on the target, then restart; nothing past this record was committed"


# Above this many partitions in a flow librdkafka's cooperative-sticky assignor is too slow
# (librdkafka#4629; 10,000 partitions, one member: 15-54 s per assignment here, 0.5 s with
# roundrobin), and the member it blocks misses its heartbeats.
COOPERATIVE_MAX = 5000


def _some(names: Sequence[str], shown: int = 10) -> str:
    """The first names of a long list, for one log line."""
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


class FlowState(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    RETRYING = "retrying"  # a cluster does not answer; mirroring resumes by itself
    CAUGHT_UP = "caught_up"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


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


class FlowWorker(Assignment):
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
        consumer_factory: ClientFactory = make_consumer,
        producer_factory: ClientFactory = make_producer,
        admin_factory: Callable[[str, ClusterConfig], Any] = Admin,
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
        # Segments, acknowledgements, offset-map deltas and safe commit positions.
        self._ledger: Ledger[Partition] = Ledger(flow.name)
        self._mappings: dict[str, TopicMapping] = {}
        # Source partitions whose target topic this worker created, with the group's committed
        # offset at that moment (None: nothing committed). See `_on_assign`.
        self._created_at: dict[SourcePartition, int | None] = {}
        self._target_ids: dict[str, str] = {}  # target topic -> topic id when last seen
        self._limits: dict[str, int] = {}  # target topic -> its max.message.bytes
        self._producers: dict[int, Any] = {}  # batch.size -> producer (see `_producer_for`)
        self._refresh_now = False  # a delivery report says a target topic is gone
        self._gone_at_delivery = False  # ... and the refresh must rewind even if it is still there
        self._resyncs = 0
        self._purging = False  # inside a resync's purge: a producer's fatal error is the purge's
        self._oldest_inflight: dict[SourcePartition, Segment] = {}  # for _look_for_stalls
        self._stalled: list[SourcePartition] = []
        self._pending: deque[Message] = deque()  # consumed, not yet accepted by a full producer queue
        self._paused = False
        self._eager = False  # from the consumer's assignor, in _open
        self._told_assignor = False
        self._held = False  # reading paused because a listener (the offset store) is behind
        # After a freeze: reading paused until the group confirms these partitions are still
        # ours (a commit as a member of the current generation) or takes them away.
        self._fenced: dict[SourcePartition, int] | None = None
        self._fence_unread = False  # fenced, and the committed offsets still to be read
        self._tick = clock()  # last time this thread was seen running (see `_check_frozen`)
        self._failure: MirrorError | None = None
        self._poisoned: FatalProduceError | None = None  # a record that can never be written (see `_poison`)
        self._poison_deadline = 0.0
        self._producer_dead = False  # a fatal producer error: nothing in flight will ever be acknowledged
        self._caught_up_at: dict[SourcePartition, int] | None = None
        self._stats_cb = stats_cb
        self._stats_interval_ms = stats_interval_ms
        self.records_acked = 0
        # The ports to the clusters: confluent-kafka clients in production, in-memory fakes
        # in the unit tests of the commit rules (tests/unit/test_worker_commits.py).
        self._make_consumer = consumer_factory
        self._make_producer = producer_factory
        self._make_admin = admin_factory
        self._consumer: Any = None

    # ------------------------------------------------------------------ lifecycle

    def run(self) -> None:
        """Mirror until stopped; raises `MirrorError` on a fatal failure."""
        try:
            self._open()
        except BaseException:
            self._abandon()
            raise
        try:
            self._loop()
        finally:
            self._close()

    def _abandon(self) -> None:
        """`_open` failed: release the clients it made (nothing was read or produced yet)."""
        if self._consumer is not None:
            try:
                self._consumer.close()
            except KafkaException as exc:
                log.warning("flow %s: closing the source consumer: %s", self.flow.name, exc)

    def _open(self) -> None:
        f = self.flow
        self._source_admin = self._make_admin(f.source, self._source)
        self._target_admin = self._make_admin(f.target, self._target)
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
        self._eager = str(consumer_cfg["partition.assignment.strategy"]).strip() != "cooperative-sticky"  # librdkafka trims it too
        self._consumer = self._make_consumer(f.source, self._source, consumer_cfg)
        self._producer_cfg = producer_cfg
        self._producer = self._producer_for(None)
        self._subscribed: tuple[str, ...] = ()
        self._waiting: set[str] = set()  # matched source topics whose targets are not ready yet
        # Frozen (SIGSTOP, a VM pause, a stalled host) for longer than this, the group may
        # have given this worker's partitions to another: see `_check_frozen`.
        self._fence_after = (int(consumer_cfg["session.timeout.ms"]) - int(consumer_cfg["heartbeat.interval.ms"])) / 1000
        self._tick = self.clock()
        self._set_state(FlowState.RUNNING, "started")

    def _close(self) -> None:
        """Drain, flush, commit, close: in that order, whatever happened before."""
        self._set_state(FlowState.STOPPING, "draining")
        self._drop_pending()  # never produced; uncommitted, so the next owner re-reads them
        for st in self._ledger:
            st.drop_open()
        # After a fatal producer error the reports of what was in flight still come (failed
        # or acknowledged) and are counted; only their wait is shorter.
        deadline = self.clock() + (FATAL_DRAIN_TIMEOUT if self._producer_dead else DRAIN_TIMEOUT)
        while self._ledger.inflight_records() and self.clock() < deadline:
            self._poll(0.1)
        left = self._ledger.inflight_records()
        if left and not self._producer_dead:
            log.warning("flow %s: %d records not acknowledged by %s after %.0fs; their source offsets stay uncommitted", self.flow.name, left, self.flow.target, DRAIN_TIMEOUT)
            # The idempotent producer's fatal error that follows is the purge's (as in
            # `_resync`): a stop that gave up on records is still a stop, not a failure.
            self._purging = True
            try:
                for producer in self._producers.values():
                    producer.purge()
                self._poll(0)
            finally:
                self._purging = False
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
        limit = self._limits.get(target_topic) if target_topic is not None else None
        size = batch_size_for(int(self._producer_cfg.get("batch.size", BATCH_SIZE)), limit)
        producer = self._producers.get(size)
        if producer is None:
            producer = self._producers[size] = self._make_producer(self.flow.target, self._target, {**self._producer_cfg, "batch.size": size})
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
        next_stall_look = next_commit + STALL_LOOK
        while not self.stop.is_set():
            now = self.clock()
            if now >= next_refresh or self._refresh_now:
                self._refresh_now = False
                # Soon again while a cluster did not answer or new targets are not ready.
                ready = self._refresh_topics() and not self._waiting
                next_refresh = now + (self.flow.refresh_interval if ready else min(5.0, self.flow.refresh_interval))
                self._tick = self.clock()  # blocking admin calls are not a freeze
            if now >= next_stall_look:
                next_stall_look = now + STALL_LOOK
                self._look_for_stalls()
            if self._pending:
                self._drain_pending()
            elif self._paused:
                # Paused for records that are gone now (dropped by a revoke, which under an
                # eager assignor takes every partition, or by a resync): nothing pending is
                # left to resume reading once produced. `_resume` keeps a hold or a fence.
                self._resume()
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
                if (not msgs and not self._pending and not self._ledger.inflight_records()) or self.clock() >= self._poison_deadline:
                    self._failure = self._poisoned
            if self._failure is not None and not self._recovered():
                raise self._failure
            if self.clock() >= next_commit:
                # The commit may block and is not a freeze (`_tick` below); a freeze before
                # it (while reports were served, say) must not hide behind it.
                self._check_frozen()
                self._confirm_owner()
                self._commit()
                self._hold_back(backlog_full(self.listeners))
                self._tick = next_commit = self.clock()
                next_commit += self.flow.commit_interval
                if self.until_caught_up and self._is_caught_up():
                    self._set_state(FlowState.CAUGHT_UP, "every matched partition mirrored and committed")
                    return

    def _forward(self, msgs: list[Message]) -> None:
        """The per-record path: consumed messages -> produce on the target, a run at a time.

        consume returns each fetched partition's records as one run. A run (and its segment)
        ends where the next message is of another partition or is an error event: a segment
        must never be left without its closing report at the end of a batch. The partition's
        state is looked up once per run (`_forward_run`).
        """
        parts = self._ledger.parts
        n = len(msgs)
        i = 0
        while i < n:
            m = msgs[i]
            err = m.error()
            if err is not None:
                self._on_consume_error(err, m)
                i += 1
                continue
            topic = m.topic()
            partition = m.partition()
            j = i + 1
            while j < n:
                x = msgs[j]
                if x.error() is not None or x.partition() != partition or x.topic() != topic:
                    break
                j += 1
            if self._pending:
                self._pending.extend(msgs[i:j])
            else:
                st = parts.get((topic, partition))
                # None: revoked in this very batch; failed_at: this partition stopped.
                if st is not None and st.failed_at is None and not self._forward_run(st, msgs, i, j):
                    return
            i = j

    def _forward_run(self, st: Partition, msgs: list[Message], i: int, j: int) -> bool:
        """Produce msgs[i:j], consecutive records of one partition, and add them to its open
        segment. False: stop the batch (the rest is pending, or the producer failed).

        Segment.add is inlined, with the segment's figures in locals while the run lasts
        (written back before anything that may look at them: a refusal, a wait for queue
        room that serves reports, and the end of the run); keep the two in step. So is
        Route.headers; keep the two in step too.
        """
        r = st.route
        target = r.target_topic
        partition = r.partition
        # The origin header's value as one format (one operation per record instead of two).
        origin = r.origin.replace(b"%", b"%%") + b"%d" if r.origin is not None else None
        room = st.room
        produce = st.producer.produce
        seg = st.open
        if seg is None:
            seg = Segment(msgs[i].offset())
            last, count, nbytes, max_ts, big_size, big_offset = seg.first - 1, 0, 0, -1, -1, -1
        else:
            last, count, nbytes, max_ts, big_size, big_offset = seg.last, seg.count, seg.bytes, seg.max_ts, seg.big_size, seg.big_offset
        gaps = seg.gaps
        end = j - 1
        for k in range(i, j):
            m = msgs[k]
            offset = m.offset()
            key = m.key()
            value = m.value()
            ts = m.timestamp()[1]
            if origin is None:
                headers = m.headers()
            else:
                hs = m.headers()
                headers = [*hs, (HEADER_ORIGIN, origin % offset)] if hs else [(HEADER_ORIGIN, origin % offset)]
            size = (len(key) if key else 0) + (len(value) if value else 0)
            # Reports for a segment's first record (unless it is also its last) and its last.
            cb = partial(self._on_segment_end, st, seg) if k == end else partial(self._on_segment_start, st, seg) if count == 0 else None
            if size > room:
                seg.last, seg.count, seg.bytes, seg.max_ts, seg.big_size, seg.big_offset = last, count, nbytes, max_ts, big_size, big_offset
                if self._never_fits(st, offset, key, value, headers):
                    return True  # this partition stops here; the others carry on
            try:
                # Positional (topic, value, key, partition, on_delivery, its alias,
                # timestamp, headers): keyword parsing costs measurably per record.
                produce(target, value, key, partition, cb, None, ts, headers)
            except (BufferError, KafkaException) as exc:
                seg.last, seg.count, seg.bytes, seg.max_ts, seg.big_size, seg.big_offset = last, count, nbytes, max_ts, big_size, big_offset
                outcome = self._produce_hard(st, msgs, k, exc, (target, value, key, partition, cb, None, ts, headers), offset, size)
                if outcome is not _PRODUCED:
                    return outcome is _PARTITION_STOPPED
                if st.failed_at is not None:
                    return True  # refused meanwhile (a report served while waiting for room)
            if count == 0:
                st.begin(seg)
            elif offset != last + 1:
                gaps.append((count, offset))
            last = offset
            count += 1
            nbytes += size
            if ts > max_ts:
                max_ts = ts
            if size > big_size:
                big_size = size
                big_offset = offset
        seg.last, seg.count, seg.bytes, seg.max_ts, seg.big_size, seg.big_offset = last, count, nbytes, max_ts, big_size, big_offset
        st.open = None  # the run's last record carries the segment's closing report
        return True

    def _produce_hard(self, st: Partition, msgs: list[Message], k: int, exc: Exception, args: tuple[Any, ...], offset: int, size: int) -> object:
        """produce(*args) of msgs[k] raised `exc`: wait for queue room and produce it, or deal
        with the refusal. Returns _PRODUCED, _PARTITION_STOPPED (the others carry on) or
        _BATCH_STOPPED (the rest of the batch is pending, or the producer failed)."""
        waited = 0.0
        while True:
            if isinstance(exc, BufferError):
                if len(st.producer) == 0:
                    # The queue is empty and still has no room: this record is larger
                    # than the whole producer queue and would wait forever.
                    self._too_big_for_queue(st, offset, size)
                    return _PARTITION_STOPPED
                if waited >= BACKPRESSURE_WAIT or self.stop.is_set():
                    # The target stays slower than the source (or is down): hold the rest,
                    # stop fetching, and go back to the loop so commits, refreshes, stop
                    # requests and group heartbeats carry on. A segment cut here stays
                    # open; the pending rest continues it.
                    self._pending.extend(msgs[k:])
                    self._pause()
                    return _BATCH_STOPPED
                self._poll(0.05)  # acknowledgements free queue room
                if self._fenced is not None:
                    # Frozen meanwhile, and fenced by that poll: this batch was read before
                    # the freeze; it is re-read from the committed offsets once the group
                    # confirms. Nothing more of it may be produced.
                    return _BATCH_STOPPED
                waited += 0.05
            elif isinstance(exc, KafkaException):
                code = exc.args[0].code()
                if code in _GONE_ERRORS:
                    # The producer's metadata does not know this partition yet (partitions
                    # just added to the source and the target grown, or the target topic is
                    # being recreated): hold the rest like a full queue, refresh, retry.
                    r = st.route
                    self._unknown_partition(st, (r.source_topic, r.partition))
                    self._pending.extend(msgs[k:])
                    self._pause()
                    return _BATCH_STOPPED
                if code == KafkaError._FATAL:
                    # The producer already failed; error_cb names the partition and the
                    # error, not this record. Serve it now.
                    self._poll(0)
                    if self._failure is None:
                        self._producer_fatal(exc.args[0])
                    return _BATCH_STOPPED
                self._produce_refused(st, offset, size, exc.args[0])
                return _PARTITION_STOPPED
            else:
                raise exc
            try:
                st.producer.produce(*args)
                return _PRODUCED
            except (BufferError, KafkaException) as again:
                exc = again

    def _look_for_stalls(self) -> None:
        """Say so when partitions had records in flight and none acknowledged since the last
        look. A target down says so on its own; this catches the quiet kind (a producer
        waiting on a partition the target no longer has), which once went unseen for minutes."""
        stalled, self._oldest_inflight = self._ledger.stalled(self._oldest_inflight)
        if stalled != self._stalled:
            if stalled:
                names = _some([f"{t}[{p}]" for t, p in stalled])
                log.warning("flow %s: %d partition(s) had records in flight and none acknowledged for %.0f s: %s", self.flow.name, len(stalled), STALL_LOOK, names)
            else:
                log.info("flow %s: acknowledgements flow again on every partition", self.flow.name)
            self._stalled = stalled

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
        if gap <= self._fence_after or not self._ledger.by_target:
            return False
        log.warning("flow %s: this worker did not run for %.1fs (longer than the session timeout allows): its partitions may have another owner now; dropping everything in flight and re-reading from the committed offsets", self.flow.name, gap)
        for st in self._ledger:
            st.drop_inflight()
            st.batch = None
            # Its unemitted acknowledgements (offset-map rows) are gone: a caller still
            # holding this state (`_on_revoke` draining) must not commit from it.
            st.acked_next = None
            st.tainted = True
        for producer in self._producers.values():
            producer.purge(in_queue=True, in_flight=True)
        self._producers.clear()
        self._producer = self._producer_for(None)
        self._producer_dead = False
        self._pending.clear()
        self._ledger.by_target = {}
        for tp, old in list(self._ledger.parts.items()):
            fresh = Partition(old.route, producer=self._producer_for(old.route.target_topic))
            self._size_check(fresh)
            fresh.tainted = True  # where to read from is unknown until `_fence_positions`
            self._ledger.assign(tp, fresh)
        # Write nothing until the group says whose partitions these are (`_confirm_owner`).
        self._fenced = {}
        self._fence_unread = True
        self._pause("frozen past the session timeout; reading paused until the group confirms the assignment")
        self._fence_positions()
        self._tick = self.clock()
        return True

    def _fence_positions(self) -> bool:
        """Seek every partition back to the group's committed offset (the beginning where
        nothing is committed: where a restart would start) and note what to commit to ask the
        group. False while the committed offsets cannot be read: the fence holds."""
        try:
            committed = self._committed([TopicPartition(t, p) for t, p in self._ledger.parts], timeout=min(5.0, self._source.timeout))
        except MirrorError as exc:
            log.info("flow %s: still fenced: the group's committed offsets cannot be read (%s)", self.flow.name, exc)
            return False
        finally:
            self._tick = self.clock()  # the read may block: not a freeze
        fenced: dict[SourcePartition, int] = {}
        for tp, st in self._ledger.parts.items():
            start = committed.get(tp)
            try:
                self._consumer.seek(TopicPartition(tp[0], tp[1], OFFSET_BEGINNING if start is None else start))
            except KafkaException:
                continue  # no longer assigned: the rebalance takes it away (it stays tainted)
            st.tainted = False
            # Nothing committed: the group is asked with a (tagged) 0, which is where a
            # restart would start too; a commit that names no partition would ask nothing.
            fenced[tp] = 0 if start is None else start
        self._fenced = fenced
        self._fence_unread = False
        return True

    def _confirm_owner(self) -> None:
        """After a freeze: commit the committed offsets again. Only a member of the current
        generation may commit, so success means the partitions are still ours: resume. A
        refusal means the group moved on: stay paused until the rebalance takes them away
        (`_on_lost` ends the fence) and gives this worker its new share."""
        if self._fenced is None:
            return
        if self._fence_unread and not self._fence_positions():
            return
        if self._fenced:
            try:
                commit_offsets(self._consumer, [self._offset(tp, o) for tp, o in self._fenced.items()])
            except KafkaException as exc:
                log.info("flow %s: still fenced (%s); waiting for the rebalance", self.flow.name, exc.args[0].str())
                return
        self._unfence()

    def _unfence(self) -> None:
        if self._fenced is not None:
            self._fenced = None
            self._fence_unread = False
            log.info("flow %s: assignment confirmed after the freeze; reading resumed", self.flow.name)
            # A target topic recreated while fenced was left for now (`_refresh_topics`):
            # look again before anything is written to it.
            self._refresh_now = True
            if not self._pending and not self._held:
                self._resume()

    def _size_check(self, st: Partition) -> None:
        limit = self._limits.get(st.route.target_topic)
        st.limit = limit
        st.room = limit - SIZE_CHECK_SLACK if limit is not None else 1 << 62

    def _never_fits(self, st: Partition, offset: int, key: bytes | None, value: bytes | None, headers: Any) -> bool:
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
            hint=HINT_TARGET_SIZE,
        ))
        return True

    def _poison(self, st: Partition, offset: int, failure: FatalProduceError) -> None:
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

    def _close_open_segment(self, st: Partition) -> None:
        """The run of records before a refused one was produced without its closing report
        (that was to be the refused record's neighbour): wait for the producer to deliver
        everything, then acknowledge the run (`PartitionLedger.flushed`), or every restart
        would mirror it again. If the flush gave up with records still queued, drop it
        instead (re-read: duplicates, never a commit past a record the target lacks)."""
        seg = st.open
        if seg is None:
            return
        st.open = None
        # flush returns what is still queued (of any partition): if anything is, this
        # segment may not have landed whole, and acknowledging it would commit past it.
        left = st.producer.flush(DRAIN_TIMEOUT)
        if self._producer_dead or left:
            st.drop(seg)
        else:
            st.flushed(seg)

    def _unknown_partition(self, st: Partition, tp: SourcePartition) -> None:
        r = st.route
        log.warning("flow %s: %s[%d] is not known to the producer yet; refreshing its metadata and retrying", self.flow.name, r.target_topic, r.partition)
        self._refresh_now = True
        try:
            # Bounded: a metadata request for one topic updates the producer's partition count.
            st.producer.list_topics(r.target_topic, timeout=min(2.0, self._target.timeout))
        except KafkaException as exc:
            log.warning("flow %s: metadata of %s: %s", self.flow.name, r.target_topic, exc.args[0].str())

    def _too_big_for_queue(self, st: Partition, offset: int, size: int) -> None:
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
            stopped = [TopicPartition(t, p) for (t, p), st in self._ledger.parts.items() if st.failed_at is not None]
            if stopped:
                self._consumer.pause(stopped)
            self._paused = False
            self._set_state(FlowState.RUNNING, "reading resumed")

    # ------------------------------------------------------------------ acknowledgements

    def _on_segment_start(self, st: Partition, seg: Segment, err: KafkaError | None, msg: Message) -> None:
        """Delivery report of a segment's first record (served on this thread by poll)."""
        if seg.dead:
            return
        if err is None:
            # A DUPLICATE_SEQUENCE_NUMBER "success" carries no offset (-1): unknown placement.
            t_first = msg.offset()
            st.placed(seg, t_first if t_first >= 0 else None)
        else:  # the last record's report fails too (gapless); mark the segment failed already
            self._delivery_failed(st, seg, err)

    def _on_segment_end(self, st: Partition, seg: Segment, err: KafkaError | None, msg: Message) -> None:
        """Delivery report of a segment's last record: the whole segment is acknowledged."""
        if not st.settled(seg):
            return  # purged, or its partition was handed over with this segment cut short
        if err is not None:
            self._delivery_failed(st, seg, err)
            return
        t_last = msg.offset()
        if t_last >= 0 and st.failed_at is None and st.unplaced(seg):
            # The first record's report must precede this one; without it the segment's
            # placement is unknown, and a guessed offset could translate too far.
            log.warning("flow %s: %s[%d]: no offset reported for source offset %d; offsets %d-%d are placed at a lower bound in the offset map", self.flow.name, st.route.source_topic, st.route.partition, seg.first, seg.first, seg.last)
        st.acked(seg, t_last)

    def _drop_pending(self, keys: set[SourcePartition] | None = None) -> None:
        """Forget pending records (of `keys`, or all): they will not be produced, so their
        partitions must not commit the consumer's position, which is past them."""
        keep: deque[Message] = deque()
        for m in self._pending:
            tp = (m.topic(), m.partition())
            if keys is None or tp in keys:
                st = self._ledger.parts.get(tp)
                if st is not None:
                    st.tainted = True
            else:
                keep.append(m)
        self._pending = keep

    def _delivery_failed(self, st: Partition, seg: Segment, err: KafkaError) -> None:
        if self._purging:
            # A report of a producer the resync is dropping (a recreated topic refusing
            # records queued for the old one, or the purge itself): its records are re-read
            # and produced anew by a new producer, which meets any real refusal again.
            st.purged(seg)
            return
        if err.code() in AUTHORIZATION:
            # A missing grant is the operator's to fix, not the record's: say which one.
            st.fail_at(seg.first)
            if self._failure is None:
                self._failure = authorization_error(self.flow.target, err, f"write topic {st.route.target_topic!r}", ("Write", "topic", st.route.target_topic))
                self._set_state(FlowState.FAILED, str(self._failure))
            return
        if err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
            st.purged(seg)  # uncommitted, so re-read by the next owner
            return
        if err.code() in _GONE_ERRORS:
            # The target topic was deleted under us: not the record's fault. Nothing of this
            # partition counts from here; the refresh recreates the topic and re-mirrors it.
            st.purged(seg)
            st.refused(seg)
            self._refresh_now = self._gone_at_delivery = True
            return
        st.refused(seg)
        failed = self._failure
        if failed is None or (err.code() in _SIZE_ERRORS and seg.big_size > ((failed.size or 0) if isinstance(failed, FatalProduceError) else 0)):
            # A refused batch fails every record in it; for size errors name the largest,
            # the one that does not fit.
            r = st.route
            sized = err.code() in _SIZE_ERRORS
            src, size = (seg.big_offset, seg.big_size) if sized else (seg.first, seg.big_size)
            failure = FatalProduceError(r.source_topic, r.partition, src, f"{err.str()} ({size} bytes, target {r.target_topic})", hint=HINT_TARGET_SIZE if sized else HINT_REFUSED, size=size)
            self._failure = failure
            self._set_state(FlowState.FAILED, str(failure))

    def _produce_refused(self, st: Partition, offset: int, size: int, err: KafkaError) -> None:
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
        if self._purging:
            log.debug("flow %s: a producer being dropped failed after its purge: %s", self.flow.name, err.str())
            return
        self._producer_dead = True
        if isinstance(self._failure, (FatalProduceError, AuthorizationFailed)):
            return
        denied = _denied_in_fatal(err)
        if denied is not None:
            self._failure = authorization_error(self.flow.target, err, f"write {denied[2]!r}" if denied[1] == "topic" else "write with the idempotent producer", denied)
            self._set_state(FlowState.FAILED, str(self._failure))
            return
        m = re.search(r"for (\S+) \[(\d+)\]", err.str())
        st = self._ledger.by_target.get((m.group(1), int(m.group(2)))) if m else None
        if st is not None and st.inflight:
            if "size" in err.str().lower():
                big = max(st.inflight, key=lambda seg: seg.big_size)
                src, size = big.big_offset, big.big_size
            else:
                src, size = st.inflight[0].first, st.inflight[0].big_size
            st.failed_at = st.inflight[0].first
            r = st.route
            hint = HINT_TARGET_SIZE if "size" in err.str().lower() else HINT_REFUSED
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

    def _drop_queued(self) -> None:
        """Purge every producer and take new ones: what they held is never sent (requests
        already in flight may still land). The purge's reports and the idempotent producer's
        fatal error that follows are the purge's, as in `_resync`."""
        if self._producer_dead:
            return  # a failed producer sends nothing more anyway
        self._purge_producers()

    def _purge_producers(self) -> None:
        # Purging requests in flight breaks an idempotent producer's gapless guarantee on
        # purpose: the fatal error that follows is the purge's, not a record's, and those
        # producers are dropped right here (their records are re-read and produced anew).
        self._purging = True
        try:
            for producer in self._producers.values():
                producer.purge(in_queue=True, in_flight=True)
            self._poll(0)
        finally:
            self._purging = False
        # The idempotent producer numbers records per partition; a recreated partition
        # expects sequence 0 again, so only a new producer (new producer id) can write to it.
        self._producers.clear()
        self._producer = self._producer_for(None)

    def _drain(self, partitions: Iterable[Partition]) -> None:
        """Wait (at most DRAIN_TIMEOUT) for the acknowledgements of these partitions' records."""
        parts = list(partitions)
        deadline = self.clock() + DRAIN_TIMEOUT
        while any(st.inflight for st in parts) and self.clock() < deadline and not self._producer_dead:
            self._poll(0.1)

    # ------------------------------------------------------------------ commits

    def _emit_acks(self) -> None:
        batches = self._ledger.take_batches()
        if batches:
            self.records_acked += sum(b.count for b in batches)
            for listener in self.listeners:
                listener.on_acked(batches)
            if self.state is FlowState.RETRYING and not self._paused:
                self._set_state(FlowState.RUNNING, "target acknowledging again")

    def _positions(self, partitions: Mapping[SourcePartition, Partition]) -> dict[SourcePartition, int]:
        """Source positions safe to commit: everything before them is on the target."""
        quiet = Ledger.quiet(partitions)
        consumed: dict[SourcePartition, int] = {}
        if quiet and not self._pending and self._failure is None and not self._producer_dead:
            # Nothing of these partitions is in flight, so everything the consumer has
            # returned is acknowledged; its position also skips transaction markers and
            # aborted records, which have no record to acknowledge.
            for tp in self._consumer.position([TopicPartition(t, p) for t, p in quiet]):
                if tp.offset >= 0:
                    consumed[(tp.topic, tp.partition)] = tp.offset
        return Ledger.positions(partitions, consumed)

    def _commit(self, partitions: Mapping[SourcePartition, Partition] | None = None) -> None:
        self._emit_acks()
        parts = self._ledger.parts if partitions is None else partitions
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
            commit_offsets(self._consumer, [self._offset(tp, o) for tp, o in positions.items()])
        except KafkaException as exc:
            log.warning("flow %s: commit of %d partitions failed, retrying next interval: %s", self.flow.name, len(positions), exc.args[0].str())
            return
        Ledger.committed(parts, positions)

    # ------------------------------------------------------------------ topics and assignment

    def _refresh_topics(self) -> bool:
        """Match source topics, prepare targets, (re)subscribe. False if a cluster did not answer."""
        # Frozen before this refresh: fence first. Its admin calls may block, and the loop
        # does not count that as a freeze; nor may it hide one that came before.
        self._check_frozen()
        try:
            mappings = match_topics(self.config, self.flow, self._source_admin.topics())
            existing = self._target_admin.topics()
            # A target topic we write to is gone: drop what is queued for it *before* it is
            # created again, or those records would land first in the new topic. Or it was
            # deleted and created again (by another worker of the flow, or by hand) between
            # two refreshes: a new topic id says so, and it is just as empty.
            in_use = {st.route.target_topic for st in self._ledger.parts.values()}
            ids = self._target_admin.topic_ids(sorted(({m.target for m in mappings} | in_use) & set(existing)))
            present = set(existing)
            if in_use - present:
                # Left out of the listing is not yet gone: a topic whose partitions wait for
                # leaders is listed with an error (for tens of seconds after creating
                # thousands of partitions). Gone is what the cluster, asked by name, does
                # not know; the rest keeps its partitions as they are.
                found = self._target_admin.topic_ids(sorted(in_use - present))
                ids.update(found)
                present |= set(found)
            # Per partition: the id its topic had when this worker began writing it (a
            # partition assigned after another worker recreated the topic began on the new one).
            reset, emptied = set(), set()
            for tp, st in self._ledger.parts.items():
                t = st.route.target_topic
                now, seen = ids.get(t), st.target_id or self._target_ids.get(t)
                if t not in present:
                    # Never seen with an id, it was never seen at all: a topic this worker
                    # just created that the cluster does not show yet (its metadata lags the
                    # controller's after thousands of new partitions). Queued records wait
                    # for it; only a topic seen before can have been deleted since.
                    if seen is not None:
                        reset.add(tp)
                elif now is not None and seen is not None and seen != now:
                    reset.add(tp)
                    emptied.add(tp)
            recreated = {self._ledger.parts[tp].route.target_topic for tp in emptied}
            if emptied and self._fenced is not None:
                # Fenced after a freeze: these partitions may be another worker's by now, and
                # emptying them would delete what it mirrored and committed. Keep the old id:
                # once the group confirms them ours, the next refresh sees the new one again
                # (`_unfence` asks for it); if not, their new owner empties them (`_stale_commits`).
                log.info("flow %s: %s recreated while this worker is fenced; resynced once the group confirms its partitions", self.flow.name, ", ".join(sorted(recreated)))
                ids = {t: i for t, i in ids.items() if t not in recreated}
                reset -= emptied
                emptied = set()
            if reset:
                # The admin calls above are not a freeze (one before them was checked): the
                # resync's poll must not fence on their account.
                self._tick = self.clock()
                self._resync(reset, emptied)
            elif self._gone_at_delivery:
                # The target said "unknown partition" at delivery, yet the topic is still
                # there (the producer's metadata lagged a partition increase): the refused
                # records' partitions would stall for good, and later records may have
                # landed past them. Rewind every partition to what the target acknowledged,
                # with new producers (duplicates, never a gap).
                self._resync(set(), set())
            self._gone_at_delivery = False
            for t in in_use - present:
                self._target_ids.pop(t, None)
            self._target_ids.update(ids)
            headroom = LIMIT_HEADROOM if self.flow.provenance_headers else 0
            result = ensure_targets(self._source_admin, self._target_admin, mappings, existing=existing, headroom=headroom)
            # Every target topic this worker may write to needs its id before the first record:
            # a topic deleted and created again between two refreshes (by another worker of
            # the flow, or by hand) is told apart only by its id.
            unknown = {m.target for m in mappings} - set(self._target_ids)
            if unknown:
                # New to this worker (never subscribed): asked once, not waited for. Their
                # sources join the subscription once their ids are known (below), so no
                # record goes to a topic this worker cannot tell from a later re-creation,
                # and the loop goes on while a cluster creating thousands of partitions
                # takes its time (minutes for 10,000 on one broker, measured).
                fresh = {m.target for m in mappings if m.source not in self._subscribed} & unknown
                self._target_ids.update(self._target_admin.topic_ids(sorted(fresh)))
                # Already mirrored and recreated since: wait for the new id, bounded.
                if unknown - fresh:
                    self._target_ids.update(self._wait_for_ids(sorted(unknown - fresh)))
            for st in self._ledger.parts.values():
                if st.target_id is None:
                    st.target_id = self._target_ids.get(st.route.target_topic)
            # A topic created a moment ago may not be describable yet: its source's limit is a
            # lower bound of its own (created with the source's, plus headroom). Only topics
            # with a known id are asked: the configs of one the broker is still creating are
            # not answered before the request times out (a minute with the loop held, seen
            # at 10,000 partitions), and nothing is written to it before its id is known.
            limits = self._source_admin.max_message_bytes(sorted({m.source for m in mappings}))
            self._limits = {m.target: limits[m.source] for m in mappings if m.source in limits}
            self._limits.update(self._target_admin.max_message_bytes(sorted({m.target for m in mappings if m.target in self._target_ids})))
        except ClusterUnavailable as exc:
            self._set_state(FlowState.RETRYING, str(exc))
            # An admin client that lived through a broker restart can keep failing long after
            # the broker is back; a new one answers at once.
            self._source_admin = self._make_admin(self.flow.source, self._source)
            self._target_admin = self._make_admin(self.flow.target, self._target)
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
                self._created_at.update({(tp.topic, tp.partition): UNREAD for tp in created})
        self._mappings = {m.source: m for m in mappings}
        total = sum(m.partitions for m in mappings)
        if not self._eager and total > COOPERATIVE_MAX and not self._told_assignor:
            self._told_assignor = True
            log.warning("flow %s: %d partitions with the cooperative-sticky assignor, which takes tens of seconds per rebalance above ~%d in librdkafka (members time out of the group and rebalance again); set the flow's consumer partition.assignment.strategy: roundrobin (and session.timeout.ms: 45000: a broker busy with that many partitions answers heartbeats late)", self.flow.name, total, COOPERATIVE_MAX)
        if self._caught_up_at is None and self.until_caught_up:
            self._caught_up_at = self._end_offsets(mappings)
        waiting = {m.source for m in mappings if m.target not in self._target_ids and m.source not in self._subscribed}
        if waiting and waiting != self._waiting:
            log.info("flow %s: %d source topic(s) wait for their target topics to be ready: %s", self.flow.name, len(waiting), _some(sorted(waiting)))
        self._waiting = waiting
        topics = tuple(sorted(set(self._mappings) - waiting))
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

    def _wait_for_ids(self, topics: Sequence[str]) -> dict[str, str]:
        """The ids of target topics that exist (ensure_targets made sure) but are not known yet.

        A broker may not describe a topic for a moment after it was created (by this worker
        or another). Without the id, a topic deleted and created again before this worker's
        next refresh looks unchanged, and this worker's producer stalls on the new topic
        without a word (found with --workers 2). So wait for the ids, bounded.
        """
        ids: dict[str, str] = {}
        deadline = self.clock() + min(10.0, self._target.timeout)
        while True:
            ids.update(self._target_admin.topic_ids([t for t in topics if t not in ids]))
            if len(ids) == len(topics) or self.clock() >= deadline or self.stop.wait(0.1):
                break
        if len(ids) < len(topics):
            log.warning("flow %s: could not read the id of target topic(s) %s; a deletion and re-creation of them before the next refresh would go unnoticed", self.flow.name, _some([t for t in topics if t not in ids]))
        return ids

    def _resync(self, reset: Collection[SourcePartition], emptied: Collection[SourcePartition]) -> None:
        """The target topic of the `reset` partitions was deleted, or (`emptied`) deleted and
        created again by someone else; or (both empty) the target refused records of a
        partition it does have.

        Records queued for a deleted topic would land first in the new one, ahead of the
        older records it lost: so drop everything queued (purged records are uncommitted and
        re-read), commit what the target did acknowledge for the other partitions, rewind
        every partition to its last acknowledged position, and the reset ones to the
        source's beginning. Purged in-flight requests may still have landed: those are the
        only duplicates this costs.
        """
        topics = sorted({self._ledger.parts[tp].route.target_topic for tp in reset})
        if topics:
            log.warning("flow %s: target topic(s) %s disappeared (or were recreated); recreating them and re-mirroring this worker's %d partition(s) of them from the source's beginning", self.flow.name, ", ".join(topics), len(reset))
        else:
            log.warning("flow %s: the target refused records of a partition it does have; re-mirroring every partition from its last acknowledged record", self.flow.name)
        self._resyncs += 1
        self._emit_acks()
        self._purge_producers()
        self._producer_dead = False
        recreated = sorted({self._ledger.parts[tp].route.target_topic for tp in emptied})
        if recreated and self._fenced is not None:
            # Fenced by the poll above (the refresh's own admin calls outlasted the session):
            # whose partitions these are is unknown, so delete nothing.
            log.warning("flow %s: fenced during the resync; this worker's partitions of the recreated %s are not emptied (whoever owns them re-mirrors them)", self.flow.name, ", ".join(sorted(recreated)))
        elif recreated:
            # Created again by someone else before this worker saw it gone: records this
            # producer still had queued may have reached the new topic ahead of the ones it
            # lost. Empty this worker's partitions of it (delete up to the end) before
            # mirroring them again from the beginning, so they hold each record once, in order.
            ends = {(self._ledger.parts[tp].route.target_topic, tp[1]): OFFSET_END for tp in emptied}
            # Right after the topic's creation its partitions may have no leader yet: retry,
            # briefly (the loop, and so the group's poll interval, waits meanwhile).
            deadline = self.clock() + min(10.0, self._target.timeout)
            while True:
                try:
                    self._target_admin.delete_records(ends)
                    break
                except MirrorError as exc:
                    if isinstance(exc, AuthorizationFailed) or self.clock() >= deadline or self.stop.is_set():
                        log.warning("flow %s: could not empty this worker's partitions of the recreated %s (records landed there before this worker saw the new topic stay, ahead of their re-mirrored copies): %s", self.flow.name, ", ".join(sorted(recreated)), exc)
                        break
                    self.stop.wait(0.2)
        self._drop_pending()
        keep = {tp: st for tp, st in self._ledger.parts.items() if tp not in reset}
        for st in self._ledger:
            st.drop_inflight()
        self._commit(keep)
        restarted: list[SourcePartition] = []
        for st in keep.values():
            st.producer = self._producer_for(st.route.target_topic)
            self._size_check(st)
        # Partitions with nothing acknowledged go back to the group's committed offset: one
        # request for all of them (one each blocked the loop for thousands of round trips).
        idle = [TopicPartition(t, p) for (t, p), st in keep.items() if st.acked_next is None]
        committed = {(tp.topic, tp.partition): tp.offset for tp in committed_offsets(self._consumer, idle, self._source.timeout)} if idle else {}
        for tp, st in list(self._ledger.parts.items()):
            if tp in reset:
                fresh = Partition(st.route, producer=self._producer_for(st.route.target_topic))
                self._size_check(fresh)
                self._ledger.assign(tp, fresh)
                self._consumer.seek(TopicPartition(tp[0], tp[1], OFFSET_BEGINNING))
                restarted.append(tp)
            elif st.acked_next is not None:
                self._consumer.seek(TopicPartition(tp[0], tp[1], st.acked_next))
                st.rewound()  # re-read from the last acknowledged record on, by a new producer
            else:
                offset = committed.get(tp, -1)
                self._consumer.seek(TopicPartition(tp[0], tp[1], offset if offset >= 0 else OFFSET_BEGINNING))
                st.rewound()
        for listener in self.listeners:
            listener.on_reset(self.flow.name, restarted)
        self._rewind_group(restarted)

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
        if self._caught_up_at is None or self._pending or self._ledger.inflight_records():
            return False
        # A partition of this worker's that it committed short of its end is not caught up:
        # the group's offset is that commit (only the owner commits). No need to ask the
        # group for all its offsets (a round trip per commit interval, and at 10,000
        # partitions a large one) while this worker itself is still behind.
        parts = self._ledger.parts
        for tp, end in self._caught_up_at.items():
            st = parts.get(tp)
            if st is not None and st.committed is not None and st.committed < end:
                return False
        try:
            committed = self._source_admin.group_offsets(self.flow.group_id, list(self._caught_up_at))
        except MirrorError:
            return False
        return all(committed.get(tp, -1) >= end for tp, end in self._caught_up_at.items())
