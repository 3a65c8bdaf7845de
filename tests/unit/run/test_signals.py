"""SIGTERM/SIGINT as a stop event, shared by `mirror run`, `mirror spark run` and `spark submit`."""

from __future__ import annotations

import os
import signal

from mirror.run.signals import stop_on_signals


def test_signals_set_the_stop_event_and_the_previous_handlers_come_back():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    with stop_on_signals() as signals:
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.stop.wait(5) and signals.received == [signal.SIGTERM] and not signals.interrupted
        os.kill(os.getpid(), signal.SIGINT)
        assert signals.received == [signal.SIGTERM, signal.SIGINT] and signals.interrupted
    assert {sig: signal.getsignal(sig) for sig in before} == before
