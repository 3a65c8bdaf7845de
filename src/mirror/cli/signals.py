"""SIGTERM and SIGINT as a stop event, for the commands that run until stopped."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class StopSignals:
    """`stop` is set by the first SIGTERM or SIGINT; `interrupted`: one of them was SIGINT (exit 130)."""

    stop: threading.Event = field(default_factory=threading.Event)
    received: list[int] = field(default_factory=list)

    @property
    def interrupted(self) -> bool:
        return signal.SIGINT in self.received


@contextmanager
def stop_on_signals() -> Iterator[StopSignals]:
    """Handlers that set a stop event, restored on the way out: `main()` is also called
    in-process (tests, embedding), where a handler left behind would swallow the caller's
    own SIGTERM."""
    signals = StopSignals()

    def on_signal(signum: int, _frame: object) -> None:
        signals.received.append(signum)
        signals.stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield signals
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
