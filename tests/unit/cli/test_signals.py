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


def test_sighup_asks_for_a_reload_without_stopping_and_only_when_asked():
    before = signal.getsignal(signal.SIGHUP)
    with stop_on_signals(reload=True) as signals:
        os.kill(os.getpid(), signal.SIGHUP)
        assert signals.reload.wait(5)
        assert not signals.stop.is_set()
    assert signal.getsignal(signal.SIGHUP) == before
    with stop_on_signals() as signals:
        assert signal.getsignal(signal.SIGHUP) == before  # other commands keep SIGHUP's default
