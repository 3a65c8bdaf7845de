"""`Forwarder`: the per-record path, consumed records produced on the target a run at a time."""

from __future__ import annotations

import logging
import threading
import zlib
from functools import partial
from typing import TYPE_CHECKING, Any

from mirror.config import FlowConfig
from mirror.domain.ledger import Ledger, Segment
from mirror.domain.route import HEADER_ORIGIN
from mirror.engine.delivery import HINT_TARGET_SIZE, DeliveryReports
from mirror.engine.failures import Failures
from mirror.engine.fence import Fence
from mirror.engine.gate import ReadGate
from mirror.engine.partition import DRAIN_TIMEOUT, AssignedPartition
from mirror.engine.producers import ProducerPool
from mirror.errors import FatalProduceError
from mirror.kafka import KafkaError, KafkaException, Message, TopicPartition
from mirror.kafka.errors import GONE_ERRORS, SIZE_ERRORS

if TYPE_CHECKING:
    from mirror.engine.gaps import SourceGaps
    from mirror.engine.refresh import RefreshRequests

log = logging.getLogger(__name__)

BACKPRESSURE_WAIT = 1.0  # how long a full producer queue may block before reading pauses
RECORD_OVERHEAD = 61 + 21  # batch and record framing of a lone record

# What `_produce_hard` did with a record whose produce raised.
_PRODUCED, _PARTITION_STOPPED, _BATCH_STOPPED = object(), object(), object()


def _figures(seg: Segment) -> tuple[int, int, int, int, int, int]:
    """The figures of `seg` that `Forwarder._forward_run` keeps in locals while a run lasts."""
    return seg.last, seg.count, seg.bytes, seg.max_ts, seg.big_size, seg.big_offset


def _store(seg: Segment, last: int, count: int, nbytes: int, max_ts: int, big_size: int, big_offset: int) -> None:
    """Write the figures `_forward_run` kept in locals back to `seg`."""
    seg.last, seg.count, seg.bytes, seg.max_ts, seg.big_size, seg.big_offset = (
        last,
        count,
        nbytes,
        max_ts,
        big_size,
        big_offset,
    )


class Forwarder:
    """Produces consumed records on the target and adds them to their partitions' segments.

    Per record only what must be per record: look up the partition's route (once per run),
    build headers, produce, and add the record to its partition's open *segment* (the run of
    consecutive records of one partition in a consume batch); only a segment's first and
    last record ask for a delivery report. Invariants: a segment never ends a batch without
    its closing report; nothing of a partition is produced past a record it refused (the
    partition stops there, `failed_at`); records not produced for want of queue room are
    pending in the read gate, in order, and produced before anything read later.
    """

    def __init__(
        self,
        flow: FlowConfig,
        consumer: Any,
        *,
        stop: threading.Event,
        queue_kbytes: Any,
        compressed: bool,
        ledger: Ledger[AssignedPartition],
        gate: ReadGate,
        pool: ProducerPool,
        reports: DeliveryReports,
        failures: Failures,
        fence: Fence,
        refresh: RefreshRequests,
        target_timeout: float,
        gaps: SourceGaps,
    ) -> None:
        self.flow, self._consumer, self._stop = flow, consumer, stop
        self._queue_kbytes, self._compressed, self._target_timeout = queue_kbytes, compressed, target_timeout
        self._ledger, self._gate, self._pool, self._reports = ledger, gate, pool, reports
        self._failures, self._fence, self._refresh = failures, fence, refresh
        self._gaps = gaps

    def forward(self, msgs: list[Message]) -> None:
        """Consumed messages -> produce on the target, a run at a time.

        consume returns each fetched partition's records as one run. A run (and its segment)
        ends where the next message is of another partition or is an error event: a segment
        must never be left without its closing report at the end of a batch. The partition's
        state is looked up once per run (`_forward_run`).
        """
        parts = self._ledger.parts
        gate = self._gate
        n = len(msgs)
        i = 0
        while i < n:
            m = msgs[i]
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._AUTO_OFFSET_RESET:
                    self._gaps.on_out_of_range(m)  # auto.offset.reset=error: ours to handle
                else:
                    self._reports.on_consume_error(err, m)
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
            if gate.pending:
                gate.pending.extend(msgs[i:j])
            else:
                part = parts.get((topic, partition))  # type: ignore[arg-type]  # a record's topic and partition are set
                # None: revoked in this very batch; failed_at: this partition stopped.
                if part is not None and part.failed_at is None and not self._forward_run(part, msgs, i, j):
                    return
            i = j

    def forward_pending(self) -> None:
        """Produce what waited for queue room; read again once all of it is produced."""
        self.forward(self._gate.take_pending())
        if not self._gate.pending:
            self._gate.resume()

    def _forward_run(self, part: AssignedPartition, msgs: list[Message], i: int, j: int) -> bool:
        """Produce msgs[i:j], consecutive records of one partition, and add them to its open
        segment. False: stop the batch (the rest is pending, or the producer failed).

        Segment.add is inlined, with the segment's figures in locals while the run lasts
        (written back by `_store` before anything that may look at them: a refusal, a wait
        for queue room that serves reports, and the end of the run); keep the two in step.
        So is Route.headers; keep the two in step too.
        """
        target, partition, origin, room, produce, on_start, on_end = self._run_constants(part)
        seg = part.open
        if seg is None:
            first: int = msgs[i].offset()  # type: ignore[assignment]  # a record has an offset
            seg = Segment(first, first - 1)
        last, count, nbytes, max_ts, big_size, big_offset = _figures(seg)
        gaps = seg.gaps
        end = j - 1
        for k in range(i, j):
            m = msgs[k]
            offset: int = m.offset()  # type: ignore[assignment]  # a record has an offset
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
            cb = partial(on_end, part, seg) if k == end else partial(on_start, part, seg) if count == 0 else None
            if size > room:
                _store(seg, last, count, nbytes, max_ts, big_size, big_offset)
                if self._never_fits(part, offset, key, value, headers):
                    return True  # this partition stops here; the others carry on
            try:
                # Positional (topic, value, key, partition, on_delivery, its alias,
                # timestamp, headers): keyword parsing costs measurably per record.
                produce(target, value, key, partition, cb, None, ts, headers)
            except (BufferError, KafkaException) as exc:
                _store(seg, last, count, nbytes, max_ts, big_size, big_offset)
                stop = self._retry(part, msgs, k, exc, (target, value, key, partition, cb, None, ts, headers), size)
                if stop is not None:
                    return stop
            if count == 0:
                part.begin(seg)
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
        _store(seg, last, count, nbytes, max_ts, big_size, big_offset)
        part.open = None  # the run's last record carries the segment's closing report
        return True

    def _run_constants(self, part: AssignedPartition) -> tuple[str, int, bytes | None, int, Any, Any, Any]:
        """What `_forward_run` needs of the partition and the reports, in locals for the run:
        its target topic and partition, the origin header's value as one format (one
        operation per record instead of two), the largest record it may take without a
        check, its producer's produce, and the segment report callbacks."""
        r = part.route
        origin = r.origin.replace(b"%", b"%%") + b"%d" if r.origin is not None else None
        reports = self._reports
        return (
            r.target_topic,
            r.partition,
            origin,
            part.room,
            part.producer.produce,
            reports.on_segment_start,
            reports.on_segment_end,
        )

    def _retry(
        self, part: AssignedPartition, msgs: list[Message], k: int, exc: Exception, args: tuple[Any, ...], size: int
    ) -> bool | None:
        """produce(*args) of msgs[k] raised `exc` (the segment's figures are stored): None when
        the record is produced after all and the run carries on, else what `_forward_run`
        returns (True: only this partition stops; False: the batch stops)."""
        offset: int = msgs[k].offset()  # type: ignore[assignment]  # a record has an offset
        outcome = self._produce_hard(part, msgs, k, exc, args, offset, size)
        if outcome is not _PRODUCED:
            return outcome is _PARTITION_STOPPED
        if part.failed_at is not None:
            return True  # refused meanwhile (a report served while waiting for room)
        return None

    def _produce_hard(
        self,
        part: AssignedPartition,
        msgs: list[Message],
        k: int,
        exc: Exception,
        args: tuple[Any, ...],
        offset: int,
        size: int,
    ) -> object:
        """produce(*args) of msgs[k] raised `exc`: wait for queue room and produce it, or deal
        with the refusal. Returns _PRODUCED, _PARTITION_STOPPED (the others carry on) or
        _BATCH_STOPPED (the rest of the batch is pending, or the producer failed)."""
        waited = 0.0
        while True:
            if isinstance(exc, BufferError):
                if len(part.producer) == 0:
                    # The queue is empty and still has no room: this record is larger
                    # than the whole producer queue and would wait forever.
                    self._too_big_for_queue(part, offset, size)
                    return _PARTITION_STOPPED
                if waited >= BACKPRESSURE_WAIT or self._stop.is_set():
                    # The target stays slower than the source (or is down): hold the rest,
                    # stop fetching, and go back to the loop so commits, refreshes, stop
                    # requests and group heartbeats carry on. A segment cut here stays
                    # open; the pending rest continues it.
                    self._gate.defer(msgs[k:])
                    return _BATCH_STOPPED
                self._reports.serve(0.05)  # acknowledgements free queue room
                if self._fence.fenced:
                    # Frozen meanwhile, and fenced by that poll: this batch was read before
                    # the freeze; it is re-read from the committed offsets once the group
                    # confirms. Nothing more of it may be produced.
                    return _BATCH_STOPPED
                waited += 0.05
            elif isinstance(exc, KafkaException):
                code = exc.args[0].code()
                if code in GONE_ERRORS:
                    # The producer's metadata does not know this partition yet (partitions
                    # just added to the source and the target grown, or the target topic is
                    # being recreated): hold the rest like a full queue, refresh, retry.
                    self._unknown_partition(part)
                    self._gate.defer(msgs[k:])
                    return _BATCH_STOPPED
                if code == KafkaError._FATAL:
                    # The producer already failed; error_cb names the partition and the
                    # error, not this record. Serve it now.
                    self._reports.serve(0)
                    if self._failures.failure is None:
                        self._reports.producer_fatal(exc.args[0])
                    return _BATCH_STOPPED
                self._produce_refused(part, offset, size, exc.args[0])
                return _PARTITION_STOPPED
            else:
                raise exc
            try:
                part.producer.produce(*args)
                return _PRODUCED
            except (BufferError, KafkaException) as again:
                exc = again

    def _never_fits(
        self, part: AssignedPartition, offset: int, key: bytes | None, value: bytes | None, headers: Any
    ) -> bool:
        """Refuse, before producing it, a record the target topic can never take.

        Sent, the broker would refuse its batch and the producer would fail as a whole (the
        gapless guarantee), taking with it the acknowledgements of everything in flight on
        other partitions: those would be mirrored again by every restart. Refused here, the
        flow drains and commits everything acknowledged, then fails naming this record.
        Compression can only shrink a record so far: zlib (denser than lz4) is the yardstick.
        """
        if part.limit is None:
            return False
        payload = (key or b"") + (value or b"")
        if self._compressed:
            payload = zlib.compress(payload, 1)
        extra = sum(len(k) + (len(v) if v else 0) + 8 for k, v in headers or ()) + RECORD_OVERHEAD
        if len(payload) + extra <= part.limit:
            return False
        r = part.route
        self._poison(
            part,
            offset,
            FatalProduceError(
                r.source_topic,
                r.partition,
                offset,
                f"record of {(len(key) if key else 0) + (len(value) if value else 0)} bytes (with headers "
                f"and framing, compressed at best, {len(payload) + extra}) is larger than "
                f"max.message.bytes={part.limit} of the target topic {r.target_topic}",
                hint=HINT_TARGET_SIZE,
            ),
        )
        return True

    def _poison(self, part: AssignedPartition, offset: int, failure: FatalProduceError) -> None:
        """A record of this partition can never be written (and the producer is fine).

        The partition stops here: nothing from this record on is produced or committed. The
        flow's other partitions carry on until they are caught up (`Failures.poison`).
        Stopping at once would, under a supervisor's restarts, leave the healthy partitions
        of every worker that inherits this one starved (each batch would start with it again).
        """
        self._close_open_segment(part)
        part.failed_at = offset if part.failed_at is None else min(part.failed_at, offset)
        r = part.route
        try:
            self._consumer.pause([TopicPartition(r.source_topic, r.partition)])
        except KafkaException:
            pass  # not assigned any more: nothing to read from it either way
        self._failures.poison(failure)

    def _close_open_segment(self, part: AssignedPartition) -> None:
        """The run of records before a refused one was produced without its closing report
        (that was to be the refused record's neighbour): wait for the producer to deliver
        everything, then acknowledge the run (`PartitionLedger.flushed`), or every restart
        would mirror it again. If the flush gave up with records still queued, drop it
        instead (re-read: duplicates, never a commit past a record the target lacks)."""
        seg = part.open
        if seg is None:
            return
        part.open = None
        # flush returns what is still queued (of any partition): if anything is, this
        # segment may not have landed whole, and acknowledging it would commit past it.
        left = part.producer.flush(DRAIN_TIMEOUT)
        if self._pool.dead or left:
            part.drop(seg)
        else:
            part.flushed(seg)

    def _unknown_partition(self, part: AssignedPartition) -> None:
        r = part.route
        log.warning(
            "flow %s: %s[%d] is not known to the producer yet; refreshing its metadata and retrying",
            self.flow.name,
            r.target_topic,
            r.partition,
        )
        self._refresh.soon()
        try:
            # Bounded: a metadata request for one topic updates the producer's partition count.
            part.producer.list_topics(r.target_topic, timeout=min(2.0, self._target_timeout))
        except KafkaException as exc:
            log.warning("flow %s: metadata of %s: %s", self.flow.name, r.target_topic, exc.args[0].str())

    def _too_big_for_queue(self, part: AssignedPartition, offset: int, size: int) -> None:
        r = part.route
        self._poison(
            part,
            offset,
            FatalProduceError(
                r.source_topic,
                r.partition,
                offset,
                f"the record ({size} bytes, target {r.target_topic}) is larger than the producer's whole "
                f"queue (queue.buffering.max.kbytes={self._queue_kbytes})",
                hint="raise queue.buffering.max.kbytes in the flow's producer settings, then restart",
            ),
        )

    def _produce_refused(self, part: AssignedPartition, offset: int, size: int, err: KafkaError) -> None:
        """produce() itself refused the record (too large for the producer, unknown partition)."""
        r = part.route
        hint = (
            "raise message.max.bytes in the flow's producer settings and on the target"
            if err.code() in SIZE_ERRORS
            else None
        )
        self._poison(
            part,
            offset,
            FatalProduceError(
                r.source_topic, r.partition, offset, f"{err.str()} ({size} bytes, target {r.target_topic})", hint=hint
            ),
        )
