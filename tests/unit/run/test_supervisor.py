"""The --workers supervisor's restart backoff: doubling per crash of the pool, capped, reset after a calm spell."""

from __future__ import annotations

from mirror.run.supervisor import HEALTHY_AFTER, RESTART_BACKOFF_MAX, crash_streak, restart_delay


def test_restart_delay_doubles_and_is_capped():
    delays = [restart_delay(n) for n in range(1, 10)]
    assert delays[:4] == [2.0, 4.0, 8.0, 16.0]
    assert all(b >= a for a, b in zip(delays, delays[1:]))
    assert max(delays) == RESTART_BACKOFF_MAX


def test_a_fault_moving_between_workers_keeps_backing_off():
    """A poison partition kills worker 0 after 30 s, moves to worker 1 (running for an hour),
    kills it 30 s later, and so on: the pool's streak grows, whichever worker dies."""
    streak, calm, now, delays = 0, None, 3600.0, []
    for _ in range(6):
        streak = crash_streak(streak, calm, now)
        calm = now
        delay = restart_delay(streak)
        delays.append(delay)
        now += delay
        calm = now  # the restart
        now += 30  # the next crash, on whichever worker holds the partition now
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0]
    # An hour with no crash since the last restart: the next crash starts over.
    assert crash_streak(streak, calm, calm + HEALTHY_AFTER) == 1


CHILD = """
import signal, sys, time
time.sleep(1.0)  # still starting up when the supervisor passes a reload on
got = []
signal.signal(signal.SIGHUP, lambda *_: got.append(1))
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
deadline = time.monotonic() + 10
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(0 if got else 5)
"""


def test_a_reload_passed_on_before_the_worker_listens_waits_for_it_instead_of_killing_it():
    import os
    import signal
    import sys

    from mirror.run.supervisor import spawn_blocking_hup

    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    proc = spawn_blocking_hup([sys.executable, "-c", CHILD], dict(os.environ))
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before  # the supervisor's own mask is back
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(30) == 0  # alive, and the reload reached its handler
