"""`mirror run --workers N`: N worker processes on one host, one flow consumer group.

One Python process is bound to one core, so a host with more cores runs more workers.
They share the flow's partitions through the consumer group; when one dies, the group
hands its partitions to the others within the session timeout, and the supervisor starts
a replacement. SIGTERM/SIGINT are passed on; the supervisor exits once every worker has.
SIGHUP (reload the config file) is passed on too: each worker reads and validates the file
itself and applies it to its own flows.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from mirror.errors import ExitCode

log = logging.getLogger(__name__)

RESTART_BACKOFF = 2.0  # first restart delay; doubled on each crash in a row
RESTART_BACKOFF_MAX = 60.0
HEALTHY_AFTER = 60.0  # the pool ran this long without a crash: the backoff starts over


def restart_delay(crashes: int, *, base: float = RESTART_BACKOFF, cap: float = RESTART_BACKOFF_MAX) -> float:
    """Delay before restarting a worker after its `crashes`-th crash in a row (1, 2, …).

    A deterministic failure (a record the target can never take) would otherwise restart,
    re-read and fail again every few seconds forever, hammering both clusters.
    """
    return min(cap, base * 2 ** max(0, crashes - 1))


def crash_streak(streak: int, calm_since: float | None, now: float) -> int:
    """Crashes in a row of the whole pool, given the time of its last crash or restart.

    Counted for the pool, not per worker: a record that can never be written moves with its
    partition from the worker it killed to another, and a per-worker count would start each
    long-running worker's backoff over. The streak ends only once no
    worker has crashed for HEALTHY_AFTER since the last restart.
    """
    return 1 if calm_since is None or now - calm_since >= HEALTHY_AFTER else streak + 1


SUPERVISOR_PID = "MIRROR_SUPERVISOR_PID"  # set in each worker's environment


def stop_with_supervisor(stop: threading.Event, interval: float = 1.0) -> None:
    """In a worker: set `stop` (drain, commit, exit) once the supervisor is gone.

    A supervisor killed with SIGKILL cannot forward SIGTERM, and orphaned workers would go
    on mirroring unsupervised, with nobody to stop them. Polling the parent pid is portable
    and needs no code between fork and exec. No-op outside a supervised worker.
    """
    expected = os.environ.get(SUPERVISOR_PID)
    if not expected:
        return

    def watch() -> None:
        while not stop.wait(interval):
            if os.getppid() != int(expected):
                log.warning("supervisor (pid %s) is gone; stopping this worker", expected)
                stop.set()

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


def spawn_blocking_hup(args: Sequence[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a worker with SIGHUP blocked; it unblocks it once its reload handler is in place.

    A blocked signal mask survives fork and exec, a Python handler does not: a reload
    forwarded while the worker still imports would otherwise kill it (SIGHUP's default)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        return subprocess.Popen(args, env=env)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def supervise(
    argv: Sequence[str],
    workers: int,
    *,
    metrics_port: int | None,
    stop: threading.Event,
    restart: bool = True,
    reload: threading.Event | None = None,
) -> int:
    """Run `mirror run ARGV` in `workers` child processes; returns the exit status.

    Each time `reload` is set, SIGHUP is sent to every live worker."""

    def spawn(i: int) -> subprocess.Popen[bytes]:
        args = [sys.executable, "-m", "mirror", *argv]
        if metrics_port:
            args += ["--metrics-port", str(metrics_port + i)]  # one exporter per worker
        env = {**os.environ, "MIRROR_WORKER_INDEX": str(i), SUPERVISOR_PID: str(os.getpid())}
        proc = spawn_blocking_hup(args, env)
        log.info("worker %d started (pid %d)", i, proc.pid)
        return proc

    procs = {i: spawn(i) for i in range(workers)}
    streak, calm_since = 0, None  # crashes in a row of the pool; its last crash or restart
    due: dict[int, float] = {}  # worker slot -> when to restart it
    codes: dict[int, int] = {}
    forwarded = False
    while procs or due:
        if stop.is_set():
            due.clear()
        if stop.is_set() and not forwarded:
            for p in procs.values():
                p.send_signal(signal.SIGTERM)
            forwarded = True
        if reload is not None and reload.is_set() and not stop.is_set():
            reload.clear()
            log.info("passing the reload on to %d worker(s)", len(procs))
            for p in procs.values():
                p.send_signal(signal.SIGHUP)
        for i, p in list(procs.items()):
            rc = p.poll()
            if rc is None:
                continue
            del procs[i]
            codes[i] = rc
            crashed = rc not in (ExitCode.OK, ExitCode.INTERRUPTED, -signal.SIGTERM)
            if crashed and restart and not stop.is_set() and rc != ExitCode.USAGE:
                streak = crash_streak(streak, calm_since, time.monotonic())
                calm_since = time.monotonic()
                delay = restart_delay(streak)
                log.warning(
                    "worker %d exited with %d (crash %d in a row); its partitions move to the others; restarting it in "
                    "%.0fs",
                    i,
                    rc,
                    streak,
                    delay,
                )
                due[i] = time.monotonic() + delay  # the other workers are watched meanwhile
            elif rc == ExitCode.USAGE and not stop.is_set():
                log.error(
                    "worker %d exited with %d (its config or flags are wrong; see its error above): not restarted; "
                    "any other workers still running take its partitions",
                    i,
                    rc,
                )
        for i, when in list(due.items()):
            if time.monotonic() >= when and not stop.is_set():
                del due[i]
                procs[i] = spawn(i)
                calm_since = time.monotonic()
        stop.wait(0.2)
    if any(c == ExitCode.USAGE for c in codes.values()):
        return ExitCode.USAGE
    failed = [c for c in codes.values() if c not in (ExitCode.OK, ExitCode.INTERRUPTED, -signal.SIGTERM)]
    return ExitCode.FAILURE if failed else ExitCode.OK
