"""SIGTERM and SIGINT set the stop event while a command runs; the caller's handlers come back after."""

from __future__ import annotations

import os
import signal

from mirror.cli.signals import stop_on_signals


def test_sigterm_stops_without_interrupting_and_handlers_are_restored():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    with stop_on_signals() as signals:
        assert not signals.stop.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.stop.wait(5)
        assert not signals.interrupted  # SIGTERM: exit 0 after draining
    assert {s: signal.getsignal(s) for s in before} == before


def test_sigint_stops_and_counts_as_interrupted():
    with stop_on_signals() as signals:
        os.kill(os.getpid(), signal.SIGINT)
        assert signals.stop.wait(5)
    assert signals.interrupted  # Ctrl-C: exit 130 after draining
