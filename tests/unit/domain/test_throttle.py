"""The read cap's token buckets, driven by an injected clock (no sleeping)."""

from __future__ import annotations

import random

import pytest

from mirror.domain.throttle import MAX_DEBT_SECONDS, Throttle, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def drive(
    throttle: Throttle, clock: Clock, seconds: float, record_size: int, step: float = 0.01
) -> list[tuple[float, int]]:
    """A reader that reads whenever allowed, as the worker's loop does; returns (time, bytes) per read."""
    reads = []
    end = clock.now + seconds
    while clock.now < end:
        n = throttle.allowed(2000)
        if n:
            throttle.took(n, n * record_size)
            reads.append((clock.now, n * record_size))
        clock.now += step
    return reads


def most_in_window(reads: list[tuple[float, int]], window: float) -> int:
    best = inside = j = 0
    for t0, b0 in reads:  # each window starting at a read: a sliding sum
        while j < len(reads) and reads[j][0] < t0 + window:
            inside += reads[j][1]
            j += 1
        best = max(best, inside)
        inside -= b0
    return best


def test_uncapped_reads_everything_asked() -> None:
    clock = Clock()
    t = Throttle(clock=clock)
    assert not t.capped
    assert t.allowed(2000) == 2000
    assert t.delay() == 0.0
    assert t.throttled_seconds() == 0.0


@pytest.mark.parametrize("record_size", [100, 1000, 10_000, 300_000])
def test_bytes_cap_holds_over_any_ten_second_window(record_size: int) -> None:
    clock = Clock()
    cap = 1 << 20
    t = Throttle(max_bytes=cap, clock=clock)
    reads = drive(t, clock, 60.0, record_size)
    # At most one second's worth of burst, plus one record the running average misjudged.
    assert most_in_window(reads, 10.0) <= cap * 11 + record_size
    total = sum(b for _, b in reads)
    assert total >= cap * 59  # and the cap is a rate, not a ceiling far below it


def test_records_cap_and_bytes_cap_the_tighter_wins() -> None:
    clock = Clock()
    t = Throttle(max_bytes=1 << 30, max_records=500, clock=clock)
    reads = drive(t, clock, 20.0, 100)
    records = sum(b for _, b in reads) // 100
    assert 500 * 19 <= records <= 500 * 21


def test_records_of_varying_size_stay_within_the_cap() -> None:
    rng = random.Random(7)
    clock = Clock()
    cap = 200_000
    t = Throttle(max_bytes=cap, clock=clock)
    reads = []
    for _ in range(3000):
        n = t.allowed(2000)
        if n:
            sizes = [rng.choice([10, 100, 5000]) for _ in range(n)]
            t.took(n, sum(sizes))
            reads.append((clock.now, sum(sizes)))
        clock.now += 0.01
    assert most_in_window(reads, 10.0) <= cap * 11 + 2000 * 5000 // 50


def test_workers_share_the_cap() -> None:
    clock = Clock()
    t = Throttle(max_bytes=1 << 20, share=4, clock=clock)
    reads = drive(t, clock, 20.0, 1000)
    assert sum(b for _, b in reads) <= (1 << 20) / 4 * 21


def test_throttled_time_is_counted_and_delay_says_when_to_read_again() -> None:
    clock = Clock()
    t = Throttle(max_records=10, clock=clock)
    assert t.allowed(2000) == 10
    t.took(10, 1000)
    assert t.allowed(2000) == 0
    assert t.delay() == pytest.approx(0.1)
    clock.now += 0.5
    assert t.throttled_seconds() == pytest.approx(0.5)  # still throttled: counted as it goes
    assert t.allowed(2000) == 5
    clock.now += 1.0
    assert t.throttled_seconds() == pytest.approx(0.5)  # reading again: no longer counted


def test_caps_change_at_run_time() -> None:
    clock = Clock()
    t = Throttle(max_bytes=1000, clock=clock)
    t.took(5, 5000)  # overdrawn
    assert t.allowed(100) == 0
    t.set_caps(None, None)  # lifted (a reload)
    assert t.allowed(100) == 100
    assert not t.capped
    t.set_caps(None, 50)
    assert t.max_records == 50
    assert t.allowed(100) <= 50


def test_bucket_burst_is_one_second_worth() -> None:
    clock = Clock()
    b = TokenBucket(100.0, clock)
    clock.now += 60
    assert b.available() == 100.0
    b.take(150)
    assert b.wait() == pytest.approx(0.51)


def test_a_record_larger_than_thirty_seconds_of_the_cap_never_stops_reading_longer() -> None:
    """The worker does not poll while throttled; librdkafka would take it out of the group
    after max.poll.interval.ms (60 s at least)."""
    clock = Clock()
    t = Throttle(max_bytes=1000, clock=clock)
    assert t.allowed(10) == 1
    t.took(1, 10_000_000)  # 10,000 s of the cap in one record
    assert t.delay() <= 30.1


class Still:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _held_for(throttle: Throttle, clock: Still, step: float = 0.1, limit: float = 600.0) -> float:
    """Seconds until the worker may read again (the loop asks `allowed` every 0.1 s)."""
    start = clock.now
    while throttle.allowed(2000) == 0 and clock.now - start < limit:
        clock.now += step
    return clock.now - start


def test_a_reload_that_lowers_the_cap_never_holds_reading_longer_than_the_debt_limit() -> None:
    """domain/throttle.py: a read never waits more than MAX_DEBT_SECONDS (30 s), because the
    worker does not call consume while it waits and librdkafka takes a consumer that polls
    less often than max.poll.interval.ms (60 s at least) out of its group (its partitions go
    to another worker while this one still produces: duplicates). A record larger than 30 s
    of the cap (a 4 MiB record under 64 KiB/s) leaves 30 s of debt; a SIGHUP reload lowering
    the cap to 8 KiB/s keeps the debt in bytes (`TokenBucket.set_rate`): reading is held 240 s."""
    clock = Still()
    throttle = Throttle(64 * 1024, None, clock=clock)
    assert throttle.allowed(2000) >= 1
    throttle.took(1, 4 * 2**20)  # one 4 MiB record: the debt is capped at 30 s' worth
    throttle.set_caps(8 * 1024, None)  # the reload
    assert _held_for(throttle, clock) <= MAX_DEBT_SECONDS + 1


def test_a_throttled_read_is_held_not_idle() -> None:
    """worker.py: a poisoned record fails the flow at once when the loop is idle; a loop the
    cap holds back has records waiting at the source, so it must not count as idle."""
    clock = Still()
    throttle = Throttle(1000, None, clock=clock)
    assert throttle.allowed(10) >= 1 and not throttle.holding
    throttle.took(1, 5000)  # 5 s of the cap
    assert throttle.allowed(10) == 0 and throttle.holding
    clock.now += 10
    assert throttle.allowed(10) >= 1 and not throttle.holding
    throttle.set_caps(None, None)
    assert not throttle.holding
