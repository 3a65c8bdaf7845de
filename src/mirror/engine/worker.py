"""The data path: where a record's journey begins and ends.

    source ──consume──▶ Forwarder.forward ──produce──▶ target
                                                         │ delivery report
    source commit ◀── Committer.commit ◀── DeliveryReports ◀┘

One `FlowWorker` per flow per process: a read_committed consumer in the flow's group on
the source, idempotent `acks=all` producers on the target. The rules that keep "nothing
lost" true:

* A source offset is committed only after the target acknowledged every record before it
  in that partition, and after every listener (the offset map) said it is ready
  (`AckListener.before_commit`). Commits are batched every `commit_interval`.
* The producer never gives up on a retriable error (`message.timeout.ms=0`, idempotent,
  so retries keep order and add no duplicates); a target outage only makes lag grow.
* A non-retriable error (record too large, authorization) stops the flow: nothing past
  the failed record is committed, and the error names topic, partition and offset.
* On stop (SIGTERM/SIGINT) the worker stops reading, waits for the outstanding
  acknowledgements, commits, and closes.

The worker wires units that each own one job and its state:

* `Forwarder` (engine/forwarder.py): the per-record path, produce a run of records;
* `ReadGate` (engine/gate.py): paused reading and the records waiting for queue room;
* `ProducerPool` (engine/producers.py): one producer per batch size, poll, purge;
* `DeliveryReports` and `Failures` (engine/delivery.py, engine/failures.py): the target's
  answers, and what stops the flow;
* `Fence` (engine/fence.py): after a freeze, nothing counts until the group confirms;
* `TargetWatch` and `Resync` (engine/target_watch.py, engine/resync.py): target topics made
  ready, and partitions started over when one is deleted under the worker;
* `Committer` (engine/committer.py) and `Assignment` (engine/assignment.py): commits, and
  the group's rebalance callbacks.

The books (segments, acknowledgements, offset-map deltas, safe commit positions) are kept by
the pure ledger in `mirror.domain.ledger`, which the Spark engine shares. The clients come
from factories, so the commit rules are unit-tested against in-memory fakes
(tests/unit/engine/).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mirror.config import Config, FlowConfig
from mirror.domain.acks import AckListener, SourcePartition, backlog_full
from mirror.domain.ledger import Ledger, Segment
from mirror.domain.throttle import Throttle
from mirror.engine.admins import AdminFactory, AdminPair
from mirror.engine.assignment import Assignment
from mirror.engine.claims import Claims
from mirror.engine.commit_schedule import CommitSchedule
from mirror.engine.committer import Committer
from mirror.engine.delivery import DeliveryReports
from mirror.engine.failures import Failures
from mirror.engine.fence import Fence
from mirror.engine.forwarder import Forwarder
from mirror.engine.gaps import SourceGaps
from mirror.engine.gate import ReadGate
from mirror.engine.partition import DRAIN_TIMEOUT, AssignedPartition, CommitTags
from mirror.engine.producers import ClientFactory, ProducerPool
from mirror.engine.reading import read_capped
from mirror.engine.recreated import RecreatedTopics
from mirror.engine.refresh import RefreshRequests
from mirror.engine.replay import TargetReplay
from mirror.engine.resync import Resync
from mirror.engine.start_points import StartPoints
from mirror.engine.status import FlowState, FlowStatus
from mirror.engine.target_watch import TargetWatch, some
from mirror.engine.transactions import TransactionalCommitter, TransactionalPool, TxnState
from mirror.errors import MirrorError
from mirror.kafka import Admin, KafkaException, make_consumer, make_producer
from mirror.kafka.settings import CONSUMER_DEFAULTS, PRODUCER_DEFAULTS, metadata_refresh_ms

__all__ = ["CONSUME_BATCH", "ClientFactory", "FlowState", "FlowWorker"]

log = logging.getLogger(__name__)

# Per-record consume batch: large enough to amortise Python overhead, small enough that a
# stop request or a commit tick is never far away.
CONSUME_BATCH = 2000
FATAL_DRAIN_TIMEOUT = 5.0  # the stop's wait after a fatal producer error: only failed reports are left to come
# Records in flight with no acknowledgement for this long, on a partition: said in the log.
STALL_LOOK = 30.0


def producer_pool(
    flow: FlowConfig, target: Any, settings: dict[str, Any], factory: ClientFactory, txn: TxnState | None
) -> ProducerPool:
    """The flow's producers: one transactional producer with exactly_once (`txn` its state),
    else a pool of idempotent ones per target topic limit."""
    if txn is not None:
        return TransactionalPool(flow, target, settings, factory, txn)
    return ProducerPool(flow, target, settings, factory)


def capped_prefetch(flow: FlowConfig, share: int) -> dict[str, int]:
    """A capped flow prefetches about a second of its share of the cap, not librdkafka's
    16 MiB, so what it fetches over the link follows the cap from the start."""
    if flow.max_bytes_per_second is None or "queued.max.messages.kbytes" in flow.consumer:
        return {}
    per_worker = int(flow.max_bytes_per_second / share)
    return {"queued.max.messages.kbytes": max(1024, min(16384, per_worker // 1024))}


class FlowWorker:
    """Mirrors one flow until `stop` is set, the flow caught up (if asked), or it fails.

    The loop: refresh the topics when due, read a batch, forward it, serve the reports,
    commit every `commit_interval`. `run` opens the clients and units, loops, and always
    closes (drain, commit, close) whatever happened.
    """

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
        admin_factory: AdminFactory = Admin,
        throttle: Throttle | None = None,
        cap_share: int = 1,
    ) -> None:
        self.config = config
        self.flow = flow
        self.stop = stop
        self.listeners = list(listeners)
        self.recreated = RecreatedTopics.of(flow.name, self.listeners)  # before the checkpointer's first tick
        self.until_caught_up = until_caught_up
        self.clock = clock
        self.status = FlowStatus(flow.name)
        self._source = config.clusters[flow.source]
        self._target = config.clusters[flow.target]
        # Segments, acknowledgements, offset-map deltas and safe commit positions.
        self.ledger: Ledger[AssignedPartition] = Ledger(flow.name)
        self._oldest_inflight: dict[SourcePartition, Segment] = {}  # for _look_for_stalls
        self._stalled: list[SourcePartition] = []
        self._stats_cb = stats_cb
        self._stats_interval_ms = stats_interval_ms
        # The ports to the clusters: confluent-kafka clients in production, in-memory fakes
        # in the unit tests.
        self._make_consumer = consumer_factory
        self._make_producer = producer_factory
        self._make_admin = admin_factory
        self._consumer: Any = None
        # The flow's read cap (this worker's share of it); a reload may change it while it runs.
        self.throttle = throttle or Throttle(
            flow.max_bytes_per_second, flow.max_records_per_second, share=cap_share, clock=clock
        )

    @property
    def state(self) -> FlowState:
        return self.status.state

    @property
    def state_reason(self) -> str:
        return self.status.reason

    @property
    def records_acked(self) -> int:
        return self.committer.records_acked if hasattr(self, "committer") else 0

    # ------------------------------------------------------------------ lifecycle

    def run(self) -> None:
        """Mirror until stopped; raises `MirrorError` on a fatal failure."""
        try:
            self.open()
        except BaseException:
            self._abandon()
            raise
        try:
            self.loop()
        finally:
            self.close()

    def _abandon(self) -> None:
        """`open` failed: release the clients it made (nothing was read or produced yet)."""
        if self._consumer is not None:
            try:
                self._consumer.close()
            except KafkaException as exc:
                log.warning("flow %s: closing the source consumer: %s", self.flow.name, exc)

    def _settings(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The consumer's and the producer's settings: defaults, the flow's overrides, callbacks."""
        f = self.flow
        consumer_cfg = {
            **CONSUMER_DEFAULTS,
            "group.id": f.group_id,
            "client.id": f"mirror-{f.name}",
            # New partitions of a subscribed topic are assigned as soon as the flow sees them.
            "topic.metadata.refresh.interval.ms": metadata_refresh_ms(f.refresh_interval),
            **f.consumer,
            # Always: an earliest left in a flow's overrides would reset positions silently
            # (see `CONSUMER_DEFAULTS` and engine/gaps.py).
            "auto.offset.reset": "error",
        }
        consumer_cfg.update(capped_prefetch(f, self.throttle.share))
        producer_cfg = {**PRODUCER_DEFAULTS, "client.id": f"mirror-{f.name}", **f.producer}
        # Served by poll/consume on this thread, once the units exist (`open`).
        producer_cfg["error_cb"] = lambda err: self.reports.on_producer_error(err)
        consumer_cfg["error_cb"] = lambda err: self.reports.on_consumer_error(err)
        if self._stats_cb is not None and self._stats_interval_ms > 0:
            cb = self._stats_cb
            consumer_cfg["statistics.interval.ms"] = producer_cfg["statistics.interval.ms"] = self._stats_interval_ms
            consumer_cfg["stats_cb"] = lambda s: cb(f.name, "consumer", s)
            producer_cfg["stats_cb"] = lambda s: cb(f.name, "producer", s)
        return consumer_cfg, producer_cfg

    def open(self) -> None:
        """Make the clients and the units; fail fast if a cluster does not answer."""
        f = self.flow
        self.admins = AdminPair(f, self._source, self._target, self._make_admin)
        # Fail fast at start (exit 1 after the cluster's timeout) rather than mirroring
        # into the void; once running, outages are retried without limit.
        self.admins.source.topics()
        self.admins.target.topics()
        consumer_cfg, producer_cfg = self._settings()
        # librdkafka trims the strategy's name too.
        eager = str(consumer_cfg["partition.assignment.strategy"]).strip() != "cooperative-sticky"
        self._consumer = consumer = self._make_consumer(f.source, self._source, consumer_cfg)
        self.txn: TxnState | None = TxnState() if f.exactly_once else None
        self.pool = pool = producer_pool(f, self._target, producer_cfg, self._make_producer, self.txn)
        self.gaps = SourceGaps(
            f, consumer, admins=self.admins, listeners=self.listeners, failures=None, ledger=self.ledger, eager=eager
        )
        self._wire(consumer, pool, consumer_cfg, eager)
        self.status.set(FlowState.RUNNING, "started")

    def _wire(self, consumer: Any, pool: ProducerPool, consumer_cfg: Mapping[str, Any], eager: bool) -> None:
        """Make the units, each given the others it works with: the books and the fence, then
        a record's path (forward, reports, commit), then the group's and the target's changes."""
        self._wire_books(consumer, pool, consumer_cfg)
        self._wire_path(consumer, pool)
        self._wire_changes(consumer, pool, eager)

    def _wire_books(self, consumer: Any, pool: ProducerPool, consumer_cfg: Mapping[str, Any]) -> None:
        """The units every other one is given: refresh requests, failures, commit tags, the
        read gate and the fence."""
        f, ledger, status = self.flow, self.ledger, self.status
        self.requests = requests = RefreshRequests()
        self.failures = Failures(f.name, status, self.clock)
        self.tags = tags = CommitTags(ledger)
        self.gate = self.gaps.gate = gate = ReadGate(f.name, f.target, consumer, ledger, status)
        # Frozen (SIGSTOP, a VM pause, a stalled host) for longer than this, the group may
        # have given this worker's partitions to another: see `Fence`.
        fence_after = (int(consumer_cfg["session.timeout.ms"]) - int(consumer_cfg["heartbeat.interval.ms"])) / 1000
        if f.exactly_once:
            # Not needed: a frozen worker's transaction is fenced by whoever took its
            # partitions, so nothing it still sends can commit.
            fence_after = float("inf")
        self.fence = Fence(
            f,
            self._source,
            consumer,
            fence_after=fence_after,
            clock=self.clock,
            ledger=ledger,
            pool=pool,
            gate=gate,
            tags=tags,
            on_unfenced=requests.soon,
        )

    def _wire_path(self, consumer: Any, pool: ProducerPool) -> None:
        """A record's path: the committer, the delivery reports and the forwarder."""
        f, ledger, status, failures, gate = self.flow, self.ledger, self.status, self.failures, self.gate
        tags, fence, requests = self.tags, self.fence, self.requests
        units: dict[str, Any] = dict(
            until_caught_up=self.until_caught_up,
            ledger=ledger,
            listeners=self.listeners,
            tags=tags,
            gate=gate,
            pool=pool,
            failures=failures,
            status=status,
            admins=self.admins,
        )
        self.committer: Committer
        if self.txn is not None:
            self.committer = TransactionalCommitter(f, consumer, target=self._target, txn=self.txn, **units)
        else:
            self.committer = Committer(f, consumer, **units)
        self.reports = reports = DeliveryReports(
            f, ledger=ledger, pool=pool, failures=failures, status=status, fence=fence, refresh=requests, txn=self.txn
        )
        compressed = pool.settings.get("compression.type", "none") not in ("none", None)
        self.forwarder = Forwarder(
            f,
            consumer,
            stop=self.stop,
            queue_kbytes=pool.settings.get("queue.buffering.max.kbytes"),
            compressed=compressed,
            ledger=ledger,
            gate=gate,
            pool=pool,
            reports=reports,
            failures=failures,
            fence=fence,
            refresh=requests,
            target_timeout=self._target.timeout,
            gaps=self.gaps,
        )
        self.gaps.failures = failures

    def _wire_changes(self, consumer: Any, pool: ProducerPool, eager: bool) -> None:
        """The group's and the target's changes: the assignment, resync and the target watch."""
        f, ledger, listeners, gate, fence = self.flow, self.ledger, self.listeners, self.gate, self.fence
        tags, committer, reports = self.tags, self.committer, self.reports
        claims = None
        if isinstance(committer, TransactionalCommitter):
            committer.reports = reports
            committer.claims = claims = Claims(
                f,
                self._target,
                consumer,
                source=self._source,
                source_ids=lambda topics: self.admins.source.topic_ids(topics),
                log_starts=lambda tps: log_starts(self.admins.source, tps),
                ledger=ledger,
                committer=committer,
                pool=committer.pool,
                gate=gate,
            )
        self.assignment = assignment = Assignment(
            f,
            self._source,
            consumer,
            ledger=ledger,
            listeners=listeners,
            eager=eager,
            tags=tags,
            admins=self.admins,
            pool=pool,
            gate=gate,
            fence=fence,
            committer=committer,
            reports=reports,
            claims=claims,
            start_points=StartPoints(f, lambda: self.admins.source, target=lambda: self.admins.target),
        )
        assignment.gaps = self.gaps
        assignment.recreated = self.recreated
        assignment.replay = TargetReplay(f, self._source, self._target, admins=self.admins, ledger=ledger)
        self.resync = resync = Resync(
            f,
            self._source,
            self._target,
            consumer,
            stop=self.stop,
            clock=self.clock,
            ledger=ledger,
            listeners=listeners,
            admins=self.admins,
            pool=pool,
            gate=gate,
            fence=fence,
            committer=committer,
            reports=reports,
            assignment=assignment,
            claims=claims,
        )
        resync.replay = assignment.replay
        self.watch = TargetWatch(
            self.config,
            f,
            self._target,
            stop=self.stop,
            clock=self.clock,
            ledger=ledger,
            admins=self.admins,
            tags=tags,
            pool=pool,
            fence=fence,
            committer=committer,
            assignment=assignment,
            failures=self.failures,
            status=self.status,
            resync=resync,
            requests=self.requests,
            listeners=listeners,
        )

    def close(self) -> None:
        """Drain, flush, commit, close: in that order, whatever happened before."""
        self.status.set(FlowState.STOPPING, "draining")
        self.assignment.lifecycle.stopping = True  # the partitions the close hands back are not a rebalance
        self.gate.drop_pending()  # never produced; uncommitted, so the next owner re-reads them
        self.committer.drop_open(dict(self.ledger.parts))
        # After a fatal producer error the reports of what was in flight still come (failed
        # or acknowledged) and are counted; only their wait is shorter.
        deadline = self.clock() + (FATAL_DRAIN_TIMEOUT if self.pool.dead else DRAIN_TIMEOUT)
        while self.ledger.inflight_records() and self.clock() < deadline:
            self.reports.serve(0.1)
        left = self.ledger.inflight_records()
        if left and not self.pool.dead:
            log.warning(
                "flow %s: %d records not acknowledged by %s after %.0fs; their source offsets stay uncommitted",
                self.flow.name,
                left,
                self.flow.target,
                DRAIN_TIMEOUT,
            )
            # The idempotent producer's fatal error that follows is the purge's: a stop that
            # gave up on records is still a stop, not a failure.
            self.pool.purge(self.reports.serve)
        try:
            if isinstance(self.committer, TransactionalCommitter):
                self.committer.closing = True  # hand every partition over: its next owner fences nobody
            self.committer.commit()
        except MirrorError as exc:
            log.warning("flow %s: final commit failed: %s", self.flow.name, exc)
        if isinstance(self.committer, TransactionalCommitter):
            self.committer.close()
        try:
            self._consumer.close()
        except KafkaException as exc:
            log.warning("flow %s: closing the source consumer: %s", self.flow.name, exc)
        self.pool.flush()
        for listener in self.listeners:
            listener.close()
        failure = self.failures.failure
        self.status.set(FlowState.FAILED if failure else FlowState.STOPPED, str(failure or "stopped"))
        self.assignment.lifecycle.stopped(failure)

    # ------------------------------------------------------------------ the loop

    def loop(self) -> None:
        """Mirror until stopped, caught up (if asked), or failed (raises the failure)."""
        committer, gate, fence, failures, watch = self.committer, self.gate, self.fence, self.failures, self.watch
        next_refresh = 0.0
        schedule = CommitSchedule.of(self.flow.commit_interval, self.clock, committer)
        next_stall_look = schedule.next + STALL_LOOK
        while not self.stop.is_set():
            now = self.clock()
            if self.requests.take() or now >= next_refresh:
                # Soon again while a cluster did not answer or new targets are not ready.
                ready = watch.refresh() and not watch.waiting
                next_refresh = now + (self.flow.refresh_interval if ready else min(5.0, self.flow.refresh_interval))
                fence.awake()  # blocking admin calls are not a freeze
            if now >= next_stall_look:
                next_stall_look = now + STALL_LOOK
                self._look_for_stalls()
            if gate.pending:
                self.forwarder.forward_pending()
            elif gate.paused:
                # Paused for records that are gone now (dropped by a revoke, which under an
                # eager assignor takes every partition, or by a resync): nothing pending is
                # left to resume reading once produced. `resume` keeps a hold or a fence.
                gate.resume()
            msgs = read_capped(self._consumer, self.throttle, self.stop, CONSUME_BATCH)
            if fence.check():
                msgs = []  # read before the freeze; re-read from the committed offsets
            if self.txn is not None and self.txn.reseek:
                msgs = self.committer.after_consume(msgs)  # type: ignore[attr-defined]  # exactly_once
            if msgs:
                self.forwarder.forward(msgs)
            self.reports.serve(0)
            if failures.poisoned is not None:
                failures.due(idle=not (msgs or gate.pending or self.throttle.holding or self.ledger.inflight_records()))
            if failures.failure is not None and not watch.recovered():
                raise failures.failure
            if schedule.due():
                schedule.start()
                # The commit may block and is not a freeze (`awake` below); a freeze before
                # it (while reports were served, say) must not hide behind it.
                fence.check()
                fence.confirm()
                committer.commit()
                gate.hold_back(backlog_full(self.listeners))
                fence.awake()
                schedule.done(fence.running_at)
                if self.until_caught_up and committer.caught_up():
                    self.status.set(FlowState.CAUGHT_UP, "every matched partition mirrored and committed")
                    return

    def _look_for_stalls(self) -> None:
        """Say so when partitions had records in flight and none acknowledged since the last
        look. A target down says so on its own; this catches the quiet kind (a producer
        waiting on a partition the target no longer has)."""
        stalled, self._oldest_inflight = self.ledger.stalled(self._oldest_inflight)
        if stalled != self._stalled:
            if stalled:
                names = some([f"{t}[{p}]" for t, p in stalled])
                log.warning(
                    "flow %s: %d partition(s) had records in flight and none acknowledged for %.0f s: %s",
                    self.flow.name,
                    len(stalled),
                    STALL_LOOK,
                    names,
                )
            else:
                log.info("flow %s: acknowledgements flow again on every partition", self.flow.name)
            self._stalled = stalled


def log_starts(source: Any, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The first offset of each source log (the claims' "from the beginning")."""
    return {tp: marks.low for tp, marks in source.watermarks(tps, committed_only=False).items()}
