"""`DeliveryReports`: the target's answers (delivery reports, client errors) turned into the books."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mirror.config import FlowConfig
from mirror.domain.ledger import Ledger, Segment
from mirror.engine.failures import Failures
from mirror.engine.fence import Fence
from mirror.engine.partition import AssignedPartition
from mirror.engine.producers import ProducerPool
from mirror.engine.status import FlowState, FlowStatus
from mirror.errors import AuthorizationFailed, FatalProduceError, MirrorError
from mirror.kafka import KafkaError, Message
from mirror.kafka.errors import (
    AUTHENTICATION,
    AUTHORIZATION,
    AWAY_ERRORS,
    GONE_ERRORS,
    PURGED_ERRORS,
    SIZE_ERRORS,
    authentication_error,
    authorization_error,
    denied_in_fatal,
    fatal_partition,
    is_size_refusal,
)

if TYPE_CHECKING:
    from mirror.engine.refresh import RefreshRequests
    from mirror.engine.transactions import TxnState

log = logging.getLogger(__name__)

# The hints of a record the target refuses.
HINT_TARGET_SIZE = "raise max.message.bytes on the target topic (and message.max.bytes on its brokers), then restart"
HINT_REFUSED = "fix the cause on the target, then restart; nothing past this record was committed"


class DeliveryReports:
    """Serves the producers' reports and the clients' errors, on the worker's thread.

    Only a segment's first and last record ask for a report: reports come in order per
    partition, and the producer is idempotent with the gapless guarantee, so the last
    record acknowledged means the whole segment is, and a refused record anywhere in it
    fails the producer instead of leaving a gap (a report per record would cost more CPU
    than the rest of the record's path: confluent-kafka builds a Message, value copy
    included, for each). The two reports' target offsets also prove the segment landed
    contiguously, which gives every record's target offset for the offset map. Invariants: reports of a purge are the
    purge's (the records are re-read), never a record's failure; after a fatal producer
    error reports are still served (what the target did acknowledge counts and is
    committed on the way out), and nothing past the gap is ever counted.
    """

    def __init__(
        self,
        flow: FlowConfig,
        *,
        ledger: Ledger[AssignedPartition],
        pool: ProducerPool,
        failures: Failures,
        status: FlowStatus,
        fence: Fence,
        refresh: RefreshRequests,
        txn: TxnState | None = None,
    ) -> None:
        self.flow = flow
        # exactly_once: the open transaction, which any failed report (or one of a record
        # nothing counts) must keep from committing; None: at-least-once.
        self.txn = txn
        self._ledger, self._pool, self._failures, self._status, self._fence, self._refresh = (
            ledger,
            pool,
            failures,
            status,
            fence,
            refresh,
        )

    def serve(self, timeout: float) -> None:
        """Serve delivery reports (a freeze first fences: nothing from before it may count)."""
        self._fence.check()
        self._pool.poll(timeout, self.producer_fatal)

    def on_segment_start(self, part: AssignedPartition, seg: Segment, err: KafkaError | None, msg: Message) -> None:
        """Delivery report of a segment's first record."""
        if seg.dead:
            if self.txn is not None and err is None:
                self.txn.doom("a record nothing counts was written")
            return
        if err is None:
            # A DUPLICATE_SEQUENCE_NUMBER "success" carries no offset (-1): unknown placement.
            t_first = msg.offset()
            part.placed(seg, t_first if t_first is not None and t_first >= 0 else None)
        else:  # the last record's report fails too (gapless); mark the segment failed already
            self._failed(part, seg, err)

    def on_segment_end(self, part: AssignedPartition, seg: Segment, err: KafkaError | None, msg: Message) -> None:
        """Delivery report of a segment's last record: the whole segment is acknowledged."""
        if not part.settled(seg):
            if self.txn is not None and err is None and seg.dead:
                self.txn.doom("a record nothing counts was written")
            return  # purged, or its partition was handed over with this segment cut short
        if err is not None:
            self._failed(part, seg, err)
            return
        t_last = msg.offset()
        if t_last is None:
            t_last = -1
        if t_last >= 0 and part.failed_at is None and part.unplaced(seg):
            # The first record's report must precede this one; without it the segment's
            # placement is unknown, and a guessed offset could translate too far.
            log.warning(
                "flow %s: %s[%d]: no offset reported for source offset %d; offsets %d-%d are placed at a "
                "lower bound in the offset map",
                self.flow.name,
                part.route.source_topic,
                part.route.partition,
                seg.first,
                seg.first,
                seg.last,
            )
        part.acked(seg, t_last)

    def _failed(self, part: AssignedPartition, seg: Segment, err: KafkaError) -> None:
        code = err.code()
        if self.txn is not None:
            # The transaction aborts whatever the error; only a refusal the record itself
            # causes (its size, a grant, its topic gone) is handled as at-least-once does.
            self.txn.doom(f"{part.route.target_topic}[{part.route.partition}]: {err.str()}")
            if code not in AUTHORIZATION and code not in SIZE_ERRORS and code not in GONE_ERRORS:
                part.purged(seg)
                return
        if self._pool.purging:
            # A report of a producer being dropped (a recreated topic refusing records queued
            # for the old one, or the purge itself): its records are re-read and produced
            # anew by a new producer, which meets any real refusal again.
            part.purged(seg)
            return
        if code in AUTHORIZATION:
            # A missing grant is the operator's to fix, not the record's: say which one.
            part.fail_at(seg.first)
            if self._failures.failure is None:
                topic = part.route.target_topic
                self._failures.fail(
                    authorization_error(self.flow.target, err, f"write topic {topic!r}", ("Write", "topic", topic))
                )
            return
        if code in PURGED_ERRORS:
            part.purged(seg)  # uncommitted, so re-read by the next owner
            return
        if code in GONE_ERRORS:
            # The target topic was deleted under us: not the record's fault. Nothing of this
            # partition counts from here; the refresh recreates the topic and re-mirrors it.
            part.purged(seg)
            part.refused(seg)
            self._refresh.gone_at_delivery()
            return
        part.refused(seg)
        failed = self._failures.failure
        sized = code in SIZE_ERRORS
        if failed is None or (
            sized and seg.big_size > ((failed.size or 0) if isinstance(failed, FatalProduceError) else 0)
        ):
            # A refused batch fails every record in it; for size errors name the largest,
            # the one that does not fit.
            r = part.route
            src, size = (seg.big_offset, seg.big_size) if sized else (seg.first, seg.big_size)
            self._failures.fail(
                FatalProduceError(
                    r.source_topic,
                    r.partition,
                    src,
                    f"{err.str()} ({size} bytes, target {r.target_topic})",
                    hint=HINT_TARGET_SIZE if sized else HINT_REFUSED,
                    size=size,
                )
            )

    def producer_fatal(self, err: KafkaError) -> None:
        """The producer is unusable (the gapless guarantee could not be kept).

        librdkafka names the partition of the refused request; the record to name is the
        largest one of that partition still in flight (a refused request fails all of its
        records, and for size errors the largest is the one that does not fit). Records the
        target acknowledged still count (their reports keep coming, in order).
        """
        if self._pool.purging:
            log.debug("flow %s: a producer being dropped failed after its purge: %s", self.flow.name, err.str())
            return
        self._pool.died()
        if self.txn is not None and denied_in_fatal(err) is None:
            # Fenced (another writer took this id), or the producer failed: its transaction
            # never commits; the worker drops it and claims its partitions again.
            self.txn.doom(err.str(), fenced=True)
            return
        if isinstance(self._failures.failure, (FatalProduceError, AuthorizationFailed)):
            return
        denied = denied_in_fatal(err)
        if denied is not None:
            self._failures.fail(
                authorization_error(
                    self.flow.target,
                    err,
                    f"write {denied[2]!r}" if denied[1] == "topic" else "write with the idempotent producer",
                    denied,
                )
            )
            return
        where = fatal_partition(err)
        part = self._ledger.by_target.get(where) if where else None
        if part is not None and part.inflight:
            sized = is_size_refusal(err)
            if sized:
                big = max(part.inflight, key=lambda seg: seg.big_size)
                src, size = big.big_offset, big.big_size
            else:
                src, size = part.inflight[0].first, part.inflight[0].big_size
            part.failed_at = part.inflight[0].first
            r = part.route
            self._failures.fail(
                FatalProduceError(
                    r.source_topic,
                    r.partition,
                    src,
                    f"{err.str()} ({size} bytes, target {r.target_topic})",
                    hint=HINT_TARGET_SIZE if sized else HINT_REFUSED,
                )
            )
        else:
            self._failures.fail(
                MirrorError(f"flow {self.flow.name}: the producer to {self.flow.target} failed: {err.str()}")
            )

    def on_producer_error(self, err: KafkaError) -> None:
        if err.code() in AUTHENTICATION:
            self._failures.first(authentication_error(self.flow.target, err))
        elif err.fatal():
            # Typically the gapless guarantee: a refused request of records that asked for
            # no report. Name the partition and record, and stop acknowledging anything.
            self.producer_fatal(err)
        elif err.code() in AWAY_ERRORS:
            self._status.set(FlowState.RETRYING, f"target {self.flow.target} unreachable: {err.str()}")

    def on_consumer_error(self, err: KafkaError) -> None:
        if err.code() in AUTHENTICATION:
            self._failures.first(authentication_error(self.flow.source, err))
        elif err.code() in AUTHORIZATION:
            self._failures.first(self._consumer_denied(err, None))
        elif err.code() in AWAY_ERRORS:
            self._status.set(FlowState.RETRYING, f"source {self.flow.source} unreachable: {err.str()}")

    def on_consume_error(self, err: KafkaError, msg: Message) -> None:
        """An error event among the consumed records."""
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.code() in AUTHORIZATION:
            self._failures.first(self._consumer_denied(err, msg.topic()))
            return
        if err.fatal():
            self._failures.replace(MirrorError(f"flow {self.flow.name}: the source consumer failed: {err.str()}"))
        else:
            log.warning("flow %s: consume error on %s[%s]: %s", self.flow.name, msg.topic(), msg.partition(), err.str())

    def _consumer_denied(self, err: KafkaError, topic: str | None) -> MirrorError:
        if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED or topic is None:
            return authorization_error(
                self.flow.source, err, f"consume as group {self.flow.group_id!r}", ("Read", "group", self.flow.group_id)
            )
        return authorization_error(self.flow.source, err, f"read topic {topic!r}", ("Read", "topic", topic))
