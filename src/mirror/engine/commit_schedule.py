"""When the worker commits next (`FlowWorker.loop`).

At-least-once: commits are `commit_interval` apart, counted from the moment the last one
returned (a slow commit does not bring the next one closer: nobody waits on the source
group's commit to read the copies).

Exactly-once: a record is readable on the target only once its transaction commits, and the
loop reads nothing while it commits. So a record arriving at the source as a commit starts
is read after it, goes into the next transaction, and is readable when that one's commit
is done and its markers are on the partitions: the time between the two commits' starts,
plus the loop's lateness in seeing the next one due (it looks between batches), plus that
commit's own time to readable (the flush of what is in flight, AddOffsetsToTxn and
TxnOffsetCommit, EndTxn), plus the markers the coordinator writes after EndTxn returned,
which the worker cannot see. For `commit_interval` to bound that wait with room for the
parts it cannot see, transactions start half an interval apart (start to start; the first
half an interval in). A target slower than a quarter of the interval spaces them at twice
its slowest recent commit, and the loop reads at least as long as the work after a commit
took (the next transaction begun, the offset-map rows, the source group's commit), both up
to the interval start to start: a slow target misses the bound, it does not commit back
to back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from mirror.engine.transactions import TransactionalCommitter

# Commits remembered for the spacing: a slow one is planned for until this many faster
# ones came after it.
RECENT = 8
HALF = 0.5  # of the interval: exactly-once transactions' spacing while commits are quick


class CommitSchedule:
    """The next commit's due time: `due`, then `start` the commit, then `done` when it returned."""

    def __init__(self, interval: float, clock: Callable[[], float], *, transactional: bool) -> None:
        self.interval = interval
        self.clock = clock
        self.transactional = transactional
        self.next = clock() + self.spacing_before_any
        self._started = self.next
        self._visible_at: float | None = self.next  # when the tick's records became readable
        self._took: deque[float] = deque(maxlen=RECENT)  # start -> readable, of recent commits
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
    def spacing_before_any(self) -> float:
        return self.interval * HALF if self.transactional else self.interval

    @property
    def slowest(self) -> float:
        """The slowest recent commit's time from its start to readable (0 before any): the
        loop's lateness in seeing it due is not the target's slowness."""
        return max(self._took, default=0.0)

    @property
    def spacing(self) -> float:
        """Start to start of a transaction's commits (`commit_interval` at-least-once)."""
        if not self.transactional:
            return self.interval
        return min(self.interval, max(self.interval * HALF, 2 * self.slowest))

    def due(self) -> bool:
        return self.clock() >= self.next

    def start(self) -> None:
        """The commit begins now."""
        self._started, self._visible_at, self._ticking = self.clock(), None, True

    def visible(self) -> None:
        """The target committed a transaction just now: its records are readable."""
        if self._ticking:
            self._visible_at = self.clock()
            self._took.append(max(0.0, self._visible_at - self._started))

    def done(self, running_at: float) -> None:
        """The commit returned; `running_at`: when the loop ran again after it."""
        self._ticking = False
        if self.transactional:
            # From this start, not from the due time: a loop blocked past it (a slow admin
            # call) must not leave a backlog of commits due at once. The work after the
            # records became readable (the next transaction begun, the offset-map rows, the
            # source group's commit) is not in the spacing: the loop then reads at least as
            # long as it took, up to the interval start to start (the schedule without a bound).
            after = running_at - (self._visible_at if self._visible_at is not None else self._started)
            self.next = max(self._started + self.spacing, min(self._started + self.interval, running_at + after))
        else:
            self.next = running_at + self.interval
