"""The Burrow-style evaluator, driven by an injected clock (no sleeping, no network)."""

from __future__ import annotations

from mirror.domain.lag_status import WINDOW, Evaluator, Observation, Status, evaluate, worst


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def tick(self, seconds: float = 15.0) -> float:
        self.now += seconds
        return self.now


def feed(ev: Evaluator, clock: Clock, points, *, active=None, start=0, topic="t", partition=0):
    verdict = None
    for position, end in points:
        verdict = ev.observe("f", topic, partition, Observation(clock.tick(), position, end, start, active))
    return verdict


def test_idle_caught_up_partition_is_never_stopped():
    ev, clock = Evaluator(), Clock()
    # an hour of scrapes on a partition nobody writes to: position never moves
    v = feed(ev, clock, [(42, 42)] * 240, active=False)
    assert v.status is Status.OK and v.reason == "caught up"


def test_empty_partition_is_ok():
    assert evaluate([Observation(1.0, 0, 0), Observation(2.0, 0, 0), Observation(3.0, 0, 0)]).status is Status.OK


def test_mirror_stopped_with_records_waiting_is_stop():
    ev, clock = Evaluator(), Clock()
    feed(ev, clock, [(100, 100)] * 3, active=True)  # caught up, then the mirror dies
    v = feed(ev, clock, [(100, 200), (100, 300)], active=False)
    assert v.status is Status.OK  # two observations are not a trend yet
    v = feed(ev, clock, [(100, 400)], active=False)
    assert v.status is Status.STOP
    assert "no mirror running" in v.reason


def test_stuck_while_running_is_stall_and_unknown_liveness_is_stall():
    for active in (True, None):
        ev, clock = Evaluator(), Clock()
        v = feed(ev, clock, [(10, 50)] * 4, active=active)
        assert v.status is Status.STALL


def test_min_span_waits_for_the_commit_interval():
    ev, clock = Evaluator(min_span=60.0), Clock()
    v = feed(ev, clock, [(10, 50)] * 4, active=False)  # 45 s unchanged
    assert v.status is Status.OK
    v = feed(ev, clock, [(10, 50)], active=False)  # 60 s
    assert v.status is Status.STOP


def test_slow_topic_caught_up_between_scrapes_is_ok():
    ev, clock = Evaluator(), Clock()
    points = []
    for i in range(30):  # one record now and then, mirrored within a scrape interval
        points += [(i, i + 1), (i + 1, i + 1)]
    assert feed(ev, clock, points, active=True).status is Status.OK


def test_moving_but_falling_behind_warns_after_a_full_window():
    ev, clock = Evaluator(), Clock()
    points = [(i * 100, i * 100 + 50 + i * 10) for i in range(WINDOW - 1)]
    assert feed(ev, clock, points, active=True).status is Status.OK
    v = feed(ev, clock, [(WINDOW * 100, WINDOW * 100 + 50 + WINDOW * 10)], active=True)
    assert v.status is Status.WARN


def test_moving_and_catching_up_is_ok():
    ev, clock = Evaluator(), Clock()
    points = [(i * 100, 5_000 + i * 20) for i in range(WINDOW * 2)]
    assert feed(ev, clock, points, active=True).status is Status.OK


def test_busy_partition_jitter_is_ok():
    ev, clock = Evaluator(), Clock()
    lags = [500, 620, 480, 700, 510, 650, 490, 600, 530, 610, 505]
    points = [(i * 1000, i * 1000 + lag) for i, lag in enumerate(lags)]
    assert feed(ev, clock, points, active=True).status is Status.OK


def test_rewind_is_err():
    ev, clock = Evaluator(), Clock()
    v = feed(ev, clock, [(100, 200), (150, 200), (20, 200)], active=True)
    assert v.status is Status.ERR and "rewind" in v.reason


def test_position_below_log_start_is_err():
    v = evaluate([Observation(1.0, 5, 100, start=50)])
    assert v.status is Status.ERR and "expired" in v.reason
    assert Observation(1.0, 5, 100, start=50).lag == 50  # only what still exists is lag


def test_recreated_topic_restarts_the_window():
    ev, clock = Evaluator(), Clock()
    feed(ev, clock, [(500, 600)] * 2, active=True)
    v = feed(ev, clock, [(0, 10)], active=True)  # end went down: new topic
    assert v.status is Status.OK  # not a rewind, not a stall


def test_recovery_clears_stop():
    ev, clock = Evaluator(), Clock()
    assert feed(ev, clock, [(0, 1000)] * 4, active=False).status is Status.STOP
    assert feed(ev, clock, [(600, 1000)], active=True).status is Status.OK
    assert feed(ev, clock, [(1000, 1000)], active=True).status is Status.OK


def test_flow_status_is_the_worst_partition():
    ev, clock = Evaluator(), Clock()
    ok = feed(ev, clock, [(5, 5)] * 4, partition=0)
    stop = feed(ev, clock, [(5, 50)] * 4, partition=1, active=False)
    assert worst([ok, stop]) is Status.STOP
    assert worst([]) is Status.OK


def test_forget_drops_deleted_partitions():
    ev, clock = Evaluator(), Clock()
    feed(ev, clock, [(5, 50)] * 2, topic="gone")
    ev.forget("f", keep=[])
    assert feed(ev, clock, [(5, 50)], topic="gone").status is Status.OK
