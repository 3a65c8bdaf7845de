"""A dev server's life cycle helpers: a taken port is named, a server that dies during start
is reported with its log's last lines, stopping nothing is said so."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from mirror.devenv.common import require_free_ports, spawn_detached, stop_owned, wait_started
from mirror.errors import DevClusterError


def test_a_taken_port_is_named_with_who_needed_it():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(DevClusterError, match=f"port {port} on 127.0.0.1 is already in use \\(needed by dev Cassandra\\)"):
            require_free_ports((port,), "dev Cassandra")


def test_a_server_that_exits_during_start_is_reported_with_its_log(tmp_path: Path):
    log, pid = tmp_path / "x.log", tmp_path / "x.pid"
    proc = spawn_detached([sys.executable, "-c", "print('bad option: --nope')"], log_file=log, pid_file=pid, cwd=tmp_path)
    assert pid.read_text() == str(proc.pid)
    proc.wait(30)
    with pytest.raises(DevClusterError, match="kafka cluster 'x' exited during start; last lines of .*\n.*bad option: --nope"):
        wait_started("kafka cluster 'x'", pid_file=pid, log_file=log, ready=lambda: False, timeout=30, interval=0.05)


def test_a_server_not_ready_in_time_is_reported_with_its_log(tmp_path: Path):
    log, pid = tmp_path / "x.log", tmp_path / "x.pid"
    proc = spawn_detached([sys.executable, "-c", "import time; print('starting', flush=True); time.sleep(60)"], log_file=log, pid_file=pid, cwd=tmp_path)
    try:
        with pytest.raises(DevClusterError, match="cassandra not ready after 0.3s"):
            wait_started("cassandra", pid_file=pid, log_file=log, ready=lambda: False, timeout=0.3, interval=0.05)
        assert stop_owned(proc.pid, pid)
        assert proc.wait(30) is not None and not pid.exists()
    finally:
        proc.kill()
        proc.wait(30)


def test_stopping_no_server_says_so(tmp_path: Path):
    assert stop_owned(None, tmp_path / "none.pid") is False
