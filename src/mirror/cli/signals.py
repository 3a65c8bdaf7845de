"""SIGTERM and SIGINT as a stop event, for the commands that run until stopped; SIGHUP as a
reload request for those that re-read their config file (`mirror run`)."""

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
    reload: threading.Event = field(default_factory=threading.Event)  # set by SIGHUP, when asked for

    @property
    def interrupted(self) -> bool:
        return signal.SIGINT in self.received


@contextmanager
def stop_on_signals(*, reload: bool = False) -> Iterator[StopSignals]:
    """Handlers that set a stop event, restored on the way out: `main()` is also called
    in-process (tests, embedding), where a handler left behind would swallow the caller's
    own SIGTERM. With `reload`, SIGHUP sets `reload` (else it keeps its default: exit)."""
    signals = StopSignals()

    def on_signal(signum: int, _frame: object) -> None:
        signals.received.append(signum)
        signals.stop.set()

    def on_hup(_signum: int, _frame: object) -> None:
        signals.reload.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    if reload:
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hup)
        # A supervisor starts its workers with SIGHUP blocked (`spawn_blocking_hup`): one sent
        # before this handler existed waited, and is served now instead of killing the worker.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
    try:
        yield signals
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
