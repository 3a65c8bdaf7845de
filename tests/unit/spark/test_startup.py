from __future__ import annotations

import threading

import pytest

from mirror.spark.startup import SessionStart


class FakeSession:
    def __init__(self) -> None:
        self.stopped = threading.Event()

    def stop(self) -> None:
        assert not self.stopped.is_set(), "stopped twice"
        self.stopped.set()


def held_start() -> tuple[SessionStart, FakeSession, threading.Event]:
    """A session start that finishes once the event returned is set."""
    release = threading.Event()
    session = FakeSession()

    def factory() -> FakeSession:
        release.wait(5)
        return session

    return SessionStart(factory), session, release


def test_get_waits_for_the_session_started_in_the_background() -> None:
    starting, session, release = held_start()
    release.set()
    assert starting.get() is session
    starting.close()
    assert session.stopped.is_set()


def test_the_factory_error_is_raised_by_get() -> None:
    def factory() -> FakeSession:
        raise RuntimeError("no JVM")

    starting = SessionStart(factory)
    with pytest.raises(RuntimeError, match="no JVM"):
        starting.get()
    starting.close()  # nothing to stop


def test_closed_while_starting_the_session_is_stopped_once_up() -> None:
    starting, session, release = held_start()
    starting.close()  # a check failed: the run does not wait for the JVM
    assert not session.stopped.is_set()
    release.set()
    assert session.stopped.wait(5)


def test_a_session_that_was_already_running_is_not_stopped() -> None:
    """getOrCreate hands back a session the process already runs (a test's shared session):
    a run that fails its checks must not stop it for its owner."""
    session = FakeSession()
    starting = SessionStart(lambda: session, running=lambda: True)
    assert starting.get() is session
    starting.close()
    assert not session.stopped.is_set()


class FakeProcess:
    """pyspark's getOrCreate in one process: one session at a time, created under a lock, its
    JVM start held until `release` is set; `checked` is set by a `running()` check."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: FakeSession | None = None
        self.release = threading.Event()
        self.checked = threading.Event()

    def running(self) -> bool:
        up = self.active is not None and not self.active.stopped.is_set()
        self.checked.set()
        return up

    def get_or_create(self) -> FakeSession:
        with self.lock:
            if self.active is None or self.active.stopped.is_set():
                self.release.wait(5)
                self.active = FakeSession()
            return self.active


def test_two_runs_sharing_a_session_they_started_stop_it_only_once_both_are_done() -> None:
    """A library running two flows at once in one process: both starts began before the JVM
    was up, so getOrCreate handed both the same session. The run that ends first must not
    stop it under the other (whose query would fail)."""
    proc = FakeProcess()
    first = SessionStart(proc.get_or_create, running=proc.running)
    assert proc.checked.wait(5)
    proc.checked.clear()
    second = SessionStart(proc.get_or_create, running=proc.running)
    # A second start that checks only once the first's session is up never signals: bounded.
    proc.checked.wait(1)
    proc.release.set()
    session = first.get()
    assert second.get() is session
    first.close()
    assert not session.stopped.is_set(), "the first run to end stopped the session the second still uses"
    second.close()
    assert session.stopped.is_set()


def test_a_run_started_while_a_failed_run_s_session_starts_gets_a_live_session() -> None:
    """The first run failed its checks while its session was starting (close() before it is
    up); a second run starting meanwhile must not be handed the session the first then stops."""
    proc = FakeProcess()
    first = SessionStart(proc.get_or_create, running=proc.running)
    assert proc.checked.wait(5)
    first.close()
    second = SessionStart(proc.get_or_create, running=proc.running)
    proc.release.set()
    session = second.get()
    assert not session.stopped.is_set()
    second.close()
    # The second start may have been handed the first's session before the first's thread
    # let go of it: then that thread, not this close, is the last user and stops it.
    assert session.stopped.wait(5)


def test_a_stop_while_the_session_starts_ends_the_wait_and_the_session_is_stopped_once_up() -> None:
    """SIGTERM while the run waits for its session (a standalone master that does not
    register the application holds the JVM's start for a minute): the run stops now, not
    once the session is up, and starts no query."""
    starting, session, release = held_start()
    stop = threading.Event()
    stop.set()
    assert starting.get(stop) is None
    starting.close()
    release.set()
    assert session.stopped.wait(5)
