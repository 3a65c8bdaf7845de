"""`Failures`: what stops the flow, and when."""

from __future__ import annotations

import logging
from collections.abc import Callable

from mirror.engine.status import FlowState, FlowStatus
from mirror.errors import FatalProduceError, MirrorError

log = logging.getLogger(__name__)

POISON_GRACE = 30.0  # how long the other partitions may carry on after one hit a record that never fits


class Failures:
    """The flow's failure, raised by the loop, and the record that can never be written.

    A failure (a refused record, a missing grant, a dead producer or consumer) stops the
    flow at the loop's next turn. A *poisoned* partition (a record the target can never
    take, refused before it was sent, the producer fine) stops only itself: the others
    carry on until caught up, at most POISON_GRACE, and only then does the poison become
    the failure. Invariant: the only writer of both; once set, a failure is replaced only
    by a more telling one of the same refusal (`fail`), never by a later unrelated one
    (`first`), and cleared only by `clear` (a resync that explained it).
    """

    def __init__(self, flow: str, status: FlowStatus, clock: Callable[[], float]) -> None:
        self._flow, self._status, self._clock = flow, status, clock
        self.failure: MirrorError | None = None
        self.poisoned: FatalProduceError | None = None
        self._poison_deadline = 0.0

    def fail(self, failure: MirrorError) -> None:
        """The flow fails with this (its state says so at once)."""
        self.failure = failure
        self._status.set(FlowState.FAILED, str(failure))

    def first(self, failure: MirrorError) -> None:
        """The flow fails with this unless it failed already."""
        if self.failure is None:
            self.failure = failure

    def replace(self, failure: MirrorError) -> None:
        """The flow fails with this, whatever it failed with before (its state follows at the stop)."""
        self.failure = failure

    def poison(self, failure: FatalProduceError) -> None:
        """A partition hit a record that can never be written: the flow fails with it once
        the other partitions are caught up (`due`), or after POISON_GRACE."""
        if self.poisoned is None:
            self.poisoned = failure
            self._poison_deadline = self._clock() + POISON_GRACE
            log.info(
                "flow %s: %s; the other partitions carry on until caught up (at most %.0fs), then the flow stops",
                self._flow,
                failure,
                POISON_GRACE,
            )
            self._status.set(FlowState.FAILED, str(failure))

    def due(self, idle: bool) -> None:
        """The poison becomes the failure once nothing else is to be done, or its grace is over."""
        if self.poisoned is not None and self.failure is None and (idle or self._clock() >= self._poison_deadline):
            self.failure = self.poisoned

    def clear(self) -> None:
        self.failure = None
