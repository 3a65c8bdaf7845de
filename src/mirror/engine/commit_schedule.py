"""When the worker commits next (`FlowWorker.loop`).

At-least-once: commits are `commit_interval` apart, counted from the moment the last one
returned (a slow commit does not bring the next one closer: nobody waits on the source
group's commit to read the copies).

Exactly-once: a record is readable on the target only once its transaction commits, and the
loop reads nothing while it commits. So a record arriving at the source as a commit starts
is read after it, goes into the next transaction, and is readable when that one's commit
is done: the time between the two commits' starts, plus the loop's lateness in seeing the
next one due (it looks between batches), plus that commit's own time to readable (the flush
of what is in flight, AddOffsetsToTxn and TxnOffsetCommit, EndTxn). For `commit_interval`
to bound that wait, each commit starts early by the `lead`: the slowest of the recent
commits' times from due to readable, at most half the interval (a target that slow gets two
transactions per interval, not a stream of them) and at most half the time the loop had to
read between commits (a commit slower than that gets the reading time, not the bound).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from mirror.engine.transactions import TransactionalCommitter

# Commits remembered for the lead: a slow one is planned for until this many faster ones
# came after it.
RECENT = 8
MAX_LEAD = 0.5  # of the interval


class CommitSchedule:
    """The next commit's due time: `due`, then `start` the commit, then `done` when it returned."""

    def __init__(self, interval: float, clock: Callable[[], float], *, transactional: bool) -> None:
        self.interval = interval
        self.clock = clock
        self.transactional = transactional
        self.next = clock() + interval
        self._due = self._started = self.next
        self._took: deque[float] = deque(maxlen=RECENT)  # due -> readable, of recent commits
        # Between `start` and `done`: a revoke's transaction (in a consume) teaches nothing; a
        # claim's is not reported at all (`TransactionalCommitter.on_committed`).
        self._ticking = False

    @classmethod
    def of(cls, interval: float, clock: Callable[[], float], committer: Any) -> CommitSchedule:
        """The schedule of `committer`'s commits: a transactional one tells it when a
        transaction's records became readable (`visible`)."""
        transactional = isinstance(committer, TransactionalCommitter)
        schedule = cls(interval, clock, transactional=transactional)
        if transactional:
            committer.on_committed = schedule.visible
        return schedule

    @property
    def lead(self) -> float:
        """How early a transaction's commit starts (0 at-least-once), less after a slow commit (`done`)."""
        return min(max(self._took, default=0.0), self.interval * MAX_LEAD)

    def due(self) -> bool:
        return self.clock() >= self.next

    def start(self) -> None:
        """The commit begins now."""
        self._due, self._started, self._ticking = self.next, self.clock(), True

    def visible(self) -> None:
        """The target committed a transaction just now: its records are readable."""
        if self._ticking:
            self._took.append(max(0.0, self.clock() - self._due))

    def done(self, running_at: float) -> None:
        """The commit returned; `running_at`: when the loop ran again after it."""
        self._ticking = False
        if self.transactional:
            # From this start, not from the due time: a loop blocked past it (a slow admin
            # call) must not leave a backlog of commits due at once. The loop reads only
            # between commits: the lead takes at most half of the time it had for that, or a
            # commit slower than half the interval would be followed by the next at once.
            reading = self._started + self.interval - running_at
            self.next = self._started + self.interval - min(self.lead, max(0.0, reading / 2))
        else:
            self.next = running_at + self.interval
