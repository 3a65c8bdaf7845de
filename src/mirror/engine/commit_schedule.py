"""When the worker commits next (`FlowWorker.loop`).

At-least-once: commits are `commit_interval` apart, counted from the moment the last one
returned (a slow commit does not bring the next one closer: nobody waits on the source
group's commit to read the copies).

Exactly-once: transactions start a commit interval apart, the commit included (a record is
readable on the target only once its transaction commits).
"""

from __future__ import annotations

from collections.abc import Callable


class CommitSchedule:
    """The next commit's due time: `due`, then `start` the commit, then `done` when it returned."""

    def __init__(self, interval: float, clock: Callable[[], float], *, transactional: bool) -> None:
        self.interval = interval
        self.clock = clock
        self.transactional = transactional
        self.next = clock() + interval
        self._started = self.next

    def due(self) -> bool:
        return self.clock() >= self.next

    def start(self) -> None:
        """The commit begins now."""
        self._started = self.clock()

    def visible(self) -> None:
        """The target committed the transaction just now: its records are readable."""

    def done(self, running_at: float) -> None:
        """The commit returned; `running_at`: when the loop ran again after it."""
        self.next = (self._started if self.transactional else running_at) + self.interval
