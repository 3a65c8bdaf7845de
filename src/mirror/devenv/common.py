"""What the dev servers share: the cache folder, process control, ports, readiness waits.

Each server (a Kafka broker, Cassandra, the Spark master and worker) is one detached JVM
with a pid file and a log file in its directory: `require_free_ports`, `spawn_detached`,
`wait_started` and `stop_owned` are its life cycle, written once.

Servers started here are ours by pid file *and* command line (`owned_pid`): a pid reused by
another program is never signalled.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from mirror.errors import DevClusterError

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


def free_ports(count: int, low: int, high: int) -> int:
    """The first of `count` consecutive free loopback ports in [low, high), picked at random
    (a `--workers N` pool serves metrics on port..port+N-1). Callers pick ranges below the
    kernel's ephemeral one (32768-60999): a port found free there can be taken by any outgoing
    connection before the server binds it."""
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(low, high - count)
        if all(port_free(port + i) for i in range(count)):
            return port
    raise RuntimeError(f"no {count} consecutive free loopback ports found in {low}-{high}")


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


def require_free_ports(
    ports: Sequence[int], needed_by: str, hint: str = "stop what holds it, or pick other ports with --base-port"
) -> None:
    """DevClusterError naming the first port on 127.0.0.1 already in use."""
    for port in ports:
        if not port_free(port):
            raise DevClusterError(f"port {port} on 127.0.0.1 is already in use (needed by {needed_by})", hint=hint)


def spawn_detached(
    cmd: Sequence[str], *, log_file: Path, pid_file: Path, cwd: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a server in its own session (it outlives `mirror dev up`), output appended to
    `log_file`, its pid written to `pid_file`; readiness is `wait_started`'s job."""
    with open(log_file, "ab") as logf:
        proc = subprocess.Popen(
            [*spawn_prefix(), *cmd],
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
            env=None if env is None else dict(env),
        )
    pid_file.write_text(str(proc.pid))
    return proc


def wait_started(
    what: str, *, pid_file: Path, log_file: Path, ready: Callable[[], bool], timeout: float, interval: float
) -> None:
    """Return once `ready()`; DevClusterError with the log's last lines when the process
    exits first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not started_alive(pid_file):
            raise DevClusterError(f"{what} exited during start; last lines of {log_file}:\n{log_tail(log_file)}")
        if ready():
            return
        time.sleep(interval)
    raise DevClusterError(f"{what} not ready after {timeout:g}s; last lines of {log_file}:\n{log_tail(log_file)}")


def stop_owned(pid: int | None, pid_file: Path, *, kill: bool = False) -> bool:
    """Stop the server `pid` (ours, see `owned_pid`) and forget its pid file; False when none ran."""
    if pid is None:
        return False
    terminate(pid, kill=kill)
    pid_file.unlink(missing_ok=True)
    return True
