"""CommitSchedule: when the worker commits next, on a clock moved by hand."""

from __future__ import annotations

from typing import Any

from mirror.engine.commit_schedule import CommitSchedule
from mirror.kafka import KafkaException
from tests.unit.engine.eos_fakes import FENCED, make_eos
from tests.unit.engine.fakes import P0, P1, batch, run


class Hand:
    """A clock that moves only when the test says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tick(
    schedule: CommitSchedule, clock: Hand, *, late: float, visible_after: float | None, returns_after: float
) -> tuple[float, float | None]:
    """One commit as the loop makes it: seen due `late` after its due time (the loop was busy
    with a batch), its records readable `visible_after` its start (None: it committed
    nothing), returning `returns_after` its start. Returns (start, readable at)."""
    clock.now = schedule.next + late
    assert schedule.due()
    schedule.start()
    start, visible = clock.now, None
    if visible_after is not None:
        clock.now = visible = start + visible_after
        schedule.visible()
    clock.now = start + returns_after
    schedule.done(clock.now)
    return start, visible


def waits(durations: list[float], *, late: float = 0.02, interval: float = 1.0) -> list[float]:
    """How long a record waits to be readable when it arrives at the source as a commit
    starts: the loop is blocked in the commit, so it is read after it and goes into the next
    transaction. One wait per commit after the first, with these times to readable."""
    clock = Hand()
    schedule = CommitSchedule(interval, clock, transactional=True)
    commits = [tick(schedule, clock, late=late, visible_after=d, returns_after=d + 0.05) for d in durations]
    return [visible - start for (start, _), (_, visible) in zip(commits, commits[1:]) if visible is not None]


def test_at_least_once_commits_an_interval_after_the_last_commit_returned():
    clock = Hand()
    schedule = CommitSchedule(1.0, clock, transactional=False)
    assert schedule.next == 1.0 and not schedule.due()

    start, _ = tick(schedule, clock, late=0.0, visible_after=None, returns_after=0.4)

    assert schedule.next == start + 0.4 + 1.0  # a slow commit does not bring the next one closer


def test_exactly_once_a_record_is_readable_within_one_interval_of_arriving_as_a_commit_starts():
    # Transactions an interval apart (start to start) made such a record wait the interval,
    # the loop's lateness and the next commit's own 0.26 s; the markers come on top.
    assert max(waits([0.26] * 10)[1:]) <= 1.0 - 0.15  # room for the markers and the reader


def test_exactly_once_transactions_start_half_an_interval_apart_while_commits_are_quick():
    clock = Hand()
    schedule = CommitSchedule(1.0, clock, transactional=True)

    # Seen due 3 s late (the loop was blocked in an admin call), committed at once.
    start, _ = tick(schedule, clock, late=3.0, visible_after=0.0, returns_after=0.0)
    assert schedule.next == start + 0.5  # from this start: no backlog of commits due at once

    start, _ = tick(schedule, clock, late=0.0, visible_after=0.2, returns_after=0.25)
    assert schedule.next == start + 0.5


def test_exactly_once_a_slow_target_gets_transactions_twice_its_commit_apart_up_to_the_interval():
    """The loop reads nothing while it commits: commits taking 0.4 s half an interval apart
    would leave it 0.1 s of every 0.5 to read. Twice the slowest recent commit keeps the
    commits to about half its time; slower than half the interval, the interval (the
    schedule before exactly-once had a latency bound)."""
    durations = [0.1, 0.3, 0.2, 0.25, 0.1, 0.3, 0.15, 0.3, 0.2, 0.1]
    assert max(waits(durations)[2:]) <= 1.0  # once the slowest (0.3) was seen: spaced 0.6

    clock = Hand()
    schedule = CommitSchedule(1.0, clock, transactional=True)
    start, _ = tick(schedule, clock, late=0.0, visible_after=0.4, returns_after=0.45)
    assert abs(schedule.next - (start + 0.8)) < 1e-9
    start, _ = tick(schedule, clock, late=0.0, visible_after=3.0, returns_after=3.0)
    assert schedule.next == start + 1.0


def test_exactly_once_a_commit_that_made_nothing_readable_teaches_nothing():
    clock = Hand()
    schedule = CommitSchedule(1.0, clock, transactional=True)
    tick(schedule, clock, late=0.0, visible_after=0.4, returns_after=0.4)

    tick(schedule, clock, late=0.0, visible_after=None, returns_after=0.7)  # nothing produced

    assert schedule.slowest == 0.4 and schedule.spacing == 0.8


def test_exactly_once_the_spacing_follows_the_target_when_commits_get_faster_again():
    clock = Hand()
    schedule = CommitSchedule(1.0, clock, transactional=True)
    tick(schedule, clock, late=0.0, visible_after=0.4, returns_after=0.4)
    for _ in range(20):
        start, _ = tick(schedule, clock, late=0.0, visible_after=0.1, returns_after=0.1)

    assert abs(schedule.next - (start + 0.5)) < 1e-9  # the slow one forgotten


def test_exactly_once_a_transaction_committed_outside_the_tick_teaches_nothing():
    clock = Hand()
    schedule = CommitSchedule(1.0, clock, transactional=True)
    tick(schedule, clock, late=0.0, visible_after=0.3, returns_after=0.3)
    clock.now += 0.5
    schedule.visible()  # a revoke's or a claim's transaction, between ticks

    start, _ = tick(schedule, clock, late=0.0, visible_after=0.3, returns_after=0.3)

    assert abs(schedule.next - (start + 0.6)) < 1e-9


def test_an_exactly_once_worker_learns_its_spacing_from_its_transactions(monkeypatch):
    worker, _, target = make_eos(monkeypatch, [batch(P0, range(10)), batch(P1, range(5)), batch(P0, range(10, 20))])
    worker.run()

    assert target.visible(P0) == list(range(20))
    schedule = worker.committer.on_committed.__self__  # type: ignore[attr-defined]
    assert isinstance(schedule, CommitSchedule) and schedule.transactional
    # The fake clock moves a quarter second per look: a commit's start to readable is a look
    # or two, so the spacing is twice that, at least half the interval.
    assert schedule.slowest > 0
    assert schedule.spacing == min(1.0, max(0.5, 2 * schedule.slowest))


def test_an_at_least_once_worker_commits_on_the_plain_schedule():
    worker, _, _ = run([batch(P0, range(10))])

    assert not hasattr(worker.committer, "on_committed")


def test_exactly_once_a_claim_in_the_tick_teaches_nothing(monkeypatch):
    """A held worker claims its partitions again in the tick (`Claims.recover`): that
    transaction carries no copies and its time (a new producer, fencing the old writer, two
    progress reads) is not a commit's time to readable. Learnt, it would space the next RECENT
    transactions by twice its time."""
    from mirror.engine.claims import Claims

    holder: dict[str, Any] = {}
    taught: list[bool] = []  # per readable moment reported in a tick: was it a claim's?
    claims_in_tick: list[bool] = []
    claiming = [False]
    # Spies on `Claims._claim` and `CommitSchedule._ticking`: the invariant is about when a
    # claim runs relative to a tick, which no public outcome shows by itself.
    claim, visible = Claims._claim, CommitSchedule.visible

    def schedule() -> CommitSchedule:
        return holder["worker"].committer.on_committed.__self__

    def watched_claim(self: Claims, *args: Any, **kwargs: Any) -> Any:
        if holder["worker"].committer.on_committed is not None:
            claims_in_tick.append(schedule()._ticking)
        claiming[0] = True
        try:
            return claim(self, *args, **kwargs)
        finally:
            claiming[0] = False

    def watched_visible(self: CommitSchedule) -> None:
        if self._ticking:
            taught.append(claiming[0])
        visible(self)

    monkeypatch.setattr(Claims, "_claim", watched_claim)
    monkeypatch.setattr(CommitSchedule, "visible", watched_visible)

    def fenced_flush(consumer: Any) -> list[Any]:
        producer = holder["worker"].pool.for_topic(None)
        target.fence(producer.tid)  # another owner took the id: the tick's flush fails, the worker holds

        def flush(timeout: float = 0) -> int:
            raise KafkaException(FENCED)

        producer.flush = flush
        return batch(P0, range(10, 15))

    script = [batch(P0, range(10))] + [[]] * 8 + [fenced_flush] + [[]] * 8 + [batch(P0, range(15, 20))] + [[]] * 8
    worker, _, target = make_eos(monkeypatch, script)
    holder["worker"] = worker
    worker.run()

    assert True in claims_in_tick  # the partitions were claimed again inside a tick
    assert taught and not any(taught)  # ... and only the commits' own transactions taught the spacing


def test_exactly_once_the_work_after_a_commit_leaves_the_loop_time_to_read():
    """After EndTxn the tick still begins the next transaction, stores the offset-map rows and
    commits the source group, unseen by the spacing: readable after 0.1 s but returning after
    0.6 s, half an interval apart would make the next commit due before the loop read
    anything (a stream of transactions, one consume batch between them). The loop reads at
    least as long as that work took, never less than before exactly-once had a bound (the
    interval, start to start)."""
    for interval, readable, returned in [(1.0, 0.1, 0.6), (0.5, 0.06, 0.3), (1.0, 0.4, 0.9), (1.0, None, 0.6)]:
        clock = Hand()
        schedule = CommitSchedule(interval, clock, transactional=True)
        for _ in range(3):
            start, _ = tick(schedule, clock, late=0.0, visible_after=readable, returns_after=returned)
            reading = schedule.next - clock.now

            assert reading >= min(returned - (readable or 0.0), start + interval - clock.now) - 1e-9
            assert schedule.next <= start + interval + 1e-9


def test_exactly_once_the_first_transaction_commits_half_an_interval_in():
    clock = Hand()
    assert CommitSchedule(1.0, clock, transactional=True).next == 0.5
    assert CommitSchedule(1.0, clock, transactional=False).next == 1.0
