"""What the dev servers share: the cache folder, process control, ports, readiness waits.

Servers started here are ours by pid file *and* command line (`owned_pid`): a pid reused by
another program is never signalled.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

CACHE = Path(os.environ.get("MIRROR_CACHE", Path.home() / ".cache" / "mirror"))
START_TIMEOUT = float(os.environ.get("MIRROR_DEV_START_TIMEOUT", "120"))


def java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else "java"


def pid_alive(pid: int) -> bool:
    """True for a running process; a zombie child of ours counts as gone (and is reaped)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def owned_pid(pid_file: Path, marker: str) -> int | None:
    """The pid in `pid_file` if that process is alive and its command line names `marker`."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if pid_alive(pid) and marker in _cmdline(pid):
        return pid
    return None


def started_alive(pid_file: Path) -> bool:
    """Is the process we started (pid in `pid_file`) still running?

    For readiness waits only, not ownership: while a child execs (setpriv, then java),
    /proc briefly shows an empty or foreign command line, and `owned_pid` would call a
    starting server dead.
    """
    try:
        return pid_alive(int(pid_file.read_text().strip()))
    except (OSError, ValueError):
        return False


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def terminate(pid: int, *, grace: float = 30.0, kill: bool = False) -> None:
    """SIGTERM (or SIGKILL) and wait until the process is gone; SIGKILL after `grace`."""
    try:
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while pid_alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
        time.sleep(0.1)


def spawn_prefix() -> list[str]:
    """A command prefix for dev servers started by test sessions.

    `mirror dev up` detaches its servers on purpose: they outlive the command. Test
    sessions set MIRROR_DEV_DIE_WITH_PARENT=1 so that a session killed before its teardown
    (a CI time-out) cannot leave JVMs behind: util-linux's `setpriv --pdeathsig` makes the
    kernel kill the server with the thread that started it. (Not a Python preexec_fn: code
    run between fork and exec in a process with librdkafka threads can crash the child.)
    """
    if os.environ.get("MIRROR_DEV_DIE_WITH_PARENT") == "1":
        setpriv = shutil.which("setpriv")
        if setpriv:
            return [setpriv, "--pdeathsig", "KILL", "--"]
    return []


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log written)"


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()
