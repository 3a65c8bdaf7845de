"""`mirror spark run`'s start, without Spark: what holds before its session's JVM starts."""

from __future__ import annotations

import signal
from types import SimpleNamespace

from mirror.cli import main
from mirror.spark import job, session


def test_a_sigterm_while_the_session_starts_stops_the_run_with_exit_0(tmp_path, monkeypatch):
    """The handlers are in place before the JVM starts: a SIGTERM then is a stop, not death by signal."""
    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        "clusters:\n  a: {bootstrap: '127.0.0.1:1'}\n  b: {bootstrap: '127.0.0.1:2'}\n"
        "flows:\n  - {name: f1, source: a, target: b, topics: {include: ['x']}}\n"
    )
    default = signal.getsignal(signal.SIGTERM)
    seen: dict[str, object] = {}

    def start_session(*args, **kwargs):
        handler = signal.getsignal(signal.SIGTERM)
        seen["handler"] = handler
        if handler is not default:  # else the signal would end the test run itself
            signal.raise_signal(signal.SIGTERM)
        return SimpleNamespace(close=lambda: seen.setdefault("closed", True))

    def run_flow(config, flow, *, stop, starting, **kwargs):
        seen["stopped"] = stop.is_set()
        return SimpleNamespace(records=0, skipped=0, paths={})

    monkeypatch.setattr(session, "check_local", lambda *args: None)
    monkeypatch.setattr(session, "start_session", start_session)
    monkeypatch.setattr(job, "run_flow", run_flow)
    code = main(["spark", "run", "-c", str(cfg), "--flow", "f1", "--checkpoint", str(tmp_path / "cp")])
    assert seen["handler"] is not default
    assert (code, seen["stopped"], seen["closed"]) == (0, True, True)
    assert signal.getsignal(signal.SIGTERM) is default
