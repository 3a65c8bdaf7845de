"""`ReadGate`: whether the worker reads from the source, and what it read but could not produce yet."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from typing import Any, cast

from mirror.domain.acks import SourcePartition
from mirror.domain.ledger import Ledger
from mirror.engine.partition import AssignedPartition
from mirror.engine.status import FlowState, FlowStatus
from mirror.kafka import Message, TopicPartition

log = logging.getLogger(__name__)


class ReadGate:
    """Pauses and resumes reading; holds the records consumed but not yet produced.

    Reading pauses for three reasons, each with its own owner of when it ends: a full
    producer queue (`defer`: the pending records, once produced, resume it), a listener
    that cannot keep up (`hold_back`), and a fence after a freeze (`shut`/`open`). It
    resumes only when none is left. Invariants: records are pending only while reading is
    paused; a partition whose pending records are dropped is tainted (the consumer's
    position is past them, so it must not be committed); a partition stopped by a refused
    record stays paused whatever else resumes.
    """

    def __init__(
        self, flow: str, target: str, consumer: Any, ledger: Ledger[AssignedPartition], status: FlowStatus
    ) -> None:
        self._flow, self._target, self._consumer, self._ledger, self._status = flow, target, consumer, ledger, status
        self.pending: deque[Message] = deque()  # consumed, not yet accepted by a full producer queue
        self.paused = False
        self._held = False  # a listener (the offset store) is behind
        self._shut = False  # fenced after a freeze

    def defer(self, msgs: Iterable[Message]) -> None:
        """Keep these records for later and stop reading until they are produced."""
        self.pending.extend(msgs)
        self.pause()

    def take_pending(self) -> list[Message]:
        msgs = list(self.pending)
        self.pending.clear()
        return msgs

    def drop_pending(self, keys: set[SourcePartition] | None = None) -> None:
        """Forget pending records (of `keys`, or all): they will not be produced, so their
        partitions must not commit the consumer's position, which is past them."""
        keep: deque[Message] = deque()
        for m in self.pending:
            tp = cast(SourcePartition, (m.topic(), m.partition()))  # a record's are always set
            if keys is None or tp in keys:
                part = self._ledger.parts.get(tp)
                if part is not None:
                    part.tainted = True
            else:
                keep.append(m)
        self.pending = keep

    def forget_pending(self) -> None:
        """Forget pending records whose partitions are all re-read anyway (a fence)."""
        self.pending.clear()

    def pause(self, reason: str | None = None) -> None:
        if not self.paused:
            self._consumer.pause(self._consumer.assignment())
            self.paused = True
            self._status.set(FlowState.RETRYING, reason or f"target {self._target} is not keeping up; reading paused")

    def hold_back(self, held: bool) -> None:
        """Pause reading while a listener cannot keep up (the offset store is away and its
        buffer is full): records read now would only add rows that cannot be written."""
        if held == self._held:
            return
        self._held = held
        if held:
            log.warning(
                "flow %s: offset store behind (its buffer is full); reading paused until it answers", self._flow
            )
            self.pause("offset store unreachable; reading paused")
        elif not self.pending:
            self.resume()

    def shut(self, reason: str) -> None:
        """Fenced: no reading until `open`."""
        self._shut = True
        self.pause(reason)

    def open(self) -> None:
        self._shut = False
        if not self.pending and not self._held:
            self.resume()

    def resume(self) -> None:
        """Read again, unless held back or fenced."""
        if self._held or self._shut or not self.paused:
            return
        assignment = self._consumer.assignment()
        self._consumer.resume(assignment)
        # Pausing drops librdkafka's prefetched records; make sure fetching restarts at the
        # record after the last one handed to us (all of which are produced by now), not
        # after the last one fetched, or the dropped ones would be skipped.
        for tp in self._consumer.position(assignment):
            if tp.offset >= 0:
                self._consumer.seek(tp)
        stopped = [TopicPartition(t, p) for (t, p), part in self._ledger.parts.items() if part.failed_at is not None]
        if stopped:
            self._consumer.pause(stopped)
        self.paused = False
        self._status.set(FlowState.RUNNING, "reading resumed")
