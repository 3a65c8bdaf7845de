"""A Spark session started in the background while the driver checks the clusters.

The JVM and the SparkContext take seconds to start, and so do the flow's checks and its
start (admin requests, target topics created, the group's offsets read): neither needs the
other until the first query is planned, so `mirror spark run` runs them side by side and
the first record comes that much sooner. Nothing is produced before the query starts, so a
check failing meanwhile only costs a session that is stopped unused.

Started off the main thread, the SparkContext leaves the process's SIGINT handler alone
(PySpark installs its own only from the main thread): Ctrl-C stays the run's stop.

One process has one SparkContext (`getOrCreate` hands back the running one), and a library
may run several flows in it, one after another or at once: a session is stopped only by the
last run using it, and only if a run started it (`_Users`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

log = logging.getLogger(__name__)


class _Users:
    """The sessions runs started in this process, with how many runs use each.

    One lock for a start's check-then-create and for the last user's stop: a start deciding
    whether it creates the session cannot interleave with another start creating it (both
    would own it) nor with a stop (it would be handed a session being stopped).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[int, tuple[Any, int]] = {}  # id(session) -> (session, runs using it)

    def start(self, factory: Callable[[], Any], running: Callable[[], bool], guard: Callable[[], Any]) -> Any:
        """The session `factory` gives; counted as a user where a run started it, else borrowed (None)."""
        with self.lock, guard():
            borrowed = running()
            session = factory()
            known = self.counts.get(id(session))
            if known is not None:
                self.counts[id(session)] = (session, known[1] + 1)
            elif not borrowed:
                self.counts[id(session)] = (session, 1)
            return session

    def release(self, session: Any) -> None:
        """One run done with `session`: the last one stops it, if a run started it."""
        with self.lock:
            known = self.counts.get(id(session))
            if known is None:
                return  # the process's own session, which its owner stops
            if known[1] > 1:
                self.counts[id(session)] = (session, known[1] - 1)
                return
            del self.counts[id(session)]
            session.stop()


_USERS = _Users()


class SessionStart:
    """One session being created by `factory` on a daemon thread; `get()` waits for it.

    `close()` lets go of the session: now if it is up, else as soon as it is (a run that
    failed its checks does not wait for a JVM it will not use; the JVM also ends with this
    process). The last run to let go of a session a run started stops it. One the process
    already ran when the start checked `running()` is its owner's: never stopped here.
    `guard` is held around that check and the factory (pyspark's own locks, so no other
    thread creates a session in between).
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        running: Callable[[], bool] = lambda: False,
        guard: Callable[[], AbstractContextManager[Any]] = nullcontext,
    ) -> None:
        self._factory = factory
        self._running = running
        self._guard = guard
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._session: Any = None
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._start, name="spark-session-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        began = time.monotonic()
        try:
            session = _USERS.start(self._factory, self._running, self._guard)
        except BaseException as exc:  # noqa: BLE001 - handed to get(), raised on the caller's thread
            self._error = exc
            self._done.set()
            return
        log.debug("the Spark session is up, %.1f s after its start began", time.monotonic() - began)
        with self._lock:
            self._session = session
            closed = self._closed
        self._done.set()
        if closed:
            _USERS.release(session)

    def get(self, stop: threading.Event | None = None) -> Any:
        """The session, once started; the factory's error raised here. None if `stop` is set
        first (the session, when up, is let go of by `close()`)."""
        while not self._done.wait(0.2 if stop is not None else None):
            if stop is not None and stop.is_set():
                return None
        if self._error is not None:
            raise self._error
        return self._session

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            session = self._session
        if session is not None:
            _USERS.release(session)
