"""SIGTERM and SIGINT as a stop `Event`, for the processes that drain before they exit."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class StopSignals:
    """The stop event the signals set, and which signals arrived (SIGINT exits 130)."""

    stop: threading.Event = field(default_factory=threading.Event)
    received: list[int] = field(default_factory=list)

    @property
    def interrupted(self) -> bool:
        return signal.SIGINT in self.received


@contextmanager
def stop_on_signals() -> Iterator[StopSignals]:
    """Inside, SIGTERM and SIGINT set the stop event instead of ending the process.

    The previous handlers come back on exit: the CLI's `main()` is also called in-process
    (tests, embedding), where a handler left behind would swallow the caller's own SIGTERM.
    """
    state = StopSignals()

    def on_signal(signum: int, _frame: object) -> None:
        state.received.append(signum)
        state.stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield state
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
