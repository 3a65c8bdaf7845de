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
