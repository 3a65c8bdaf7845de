"""A Spark session started in the background while the driver checks the clusters.

The JVM and the SparkContext take seconds to start, and so do the flow's checks and its
start (admin requests, target topics created, the group's offsets read): neither needs the
other until the first query is planned, so `mirror spark run` runs them side by side and
the first record comes that much sooner. Nothing is produced before the query starts, so a
check failing meanwhile only costs a session that is stopped unused.

Started off the main thread, the SparkContext leaves the process's SIGINT handler alone
(PySpark installs its own only from the main thread): Ctrl-C stays the run's stop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class SessionStart:
    """One session being created by `factory` on a daemon thread; `get()` waits for it.

    `close()` stops the session: now if it is up, else as soon as it is (a run that failed
    its checks does not wait for a JVM it will not use; the JVM also ends with this process).
    Not when `running()` said, as the start began, that the process already ran a session:
    the factory (`getOrCreate`) then hands back that one, which is its owner's to stop.
    """

    def __init__(self, factory: Callable[[], Any], running: Callable[[], bool] = lambda: False) -> None:
        self._factory = factory
        self._running = running
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._session: Any = None
        self._error: BaseException | None = None
        self._closed = False
        self._borrowed = False  # a session the process already ran: never stopped here
        self._thread = threading.Thread(target=self._start, name="spark-session-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            if self._running():
                self._borrowed = True
            session = self._factory()
        except BaseException as exc:  # noqa: BLE001 - handed to get(), raised on the caller's thread
            self._error = exc
            self._done.set()
            return
        with self._lock:
            self._session = session
            closed = self._closed
        self._done.set()
        if closed and not self._borrowed:
            session.stop()

    def get(self) -> Any:
        """The session, once started; the factory's error raised here."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._session

    def close(self) -> None:
        with self._lock:
            self._closed = True
            session = self._session
        if session is not None and not self._borrowed:
            session.stop()
