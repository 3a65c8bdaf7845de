"""Contender processes: start them in their own session, sample their memory and CPU, stop them.

Peak RSS and CPU time are taken over the whole process tree a contender starts
(`mirror run --workers 2` forks workers; MirrorMaker 2 is one JVM), by reading /proc
every `interval` seconds. Reading /proc needs no extra dependency and costs well under
1% of one core at 5 samples a second.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, utime+stime seconds) of a live process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw.rsplit(")", 1)[1].split()
    # fields after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICK


def _rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def process_tree(root: int) -> list[int]:
    """`root` and all its descendants (one pass over /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        st = _stat(int(entry.name))
        if st is not None:
            children.setdefault(st[0], []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


@dataclass
class Usage:
    peak_rss_bytes: int = 0  # of the whole tree at one instant
    peak_rss_per_process_bytes: int = 0  # of its largest single process (a worker)
    peak_rss_pyspark_worker_bytes: int = 0  # of its largest PySpark Python worker (Spark rows only)
    max_processes: int = 0
    cpu_seconds: float = 0.0
    samples: int = 0

    @property
    def peak_rss_mb(self) -> float:
        return self.peak_rss_bytes / 1e6


class Sampler:
    """Samples a process tree in a background thread until `stop()`."""

    def __init__(self, root: int, interval: float = 0.2, extra_roots: Sequence[int] = ()) -> None:
        self.root = root
        self.extra_roots = list(extra_roots)  # other trees that work for the contender (a Spark cluster's daemons)
        self.interval = interval
        self.usage = Usage()
        self._cpu: dict[int, float] = {}  # last CPU time seen per pid (processes may exit between samples)
        self._pyspark: dict[int, bool] = {}  # pid -> a PySpark daemon or worker (its command line, read once)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-{root}", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def sample(self) -> None:
        pids = process_tree(self.root)
        for extra in self.extra_roots:
            pids += process_tree(extra)
        total = 0
        alive = 0
        for pid in pids:
            st = _stat(pid)
            if st is None:
                continue
            alive += 1
            self._cpu[pid] = st[1]
            rss = _rss_bytes(pid)
            total += rss
            self.usage.peak_rss_per_process_bytes = max(self.usage.peak_rss_per_process_bytes, rss)
            if self._is_pyspark(pid):
                self.usage.peak_rss_pyspark_worker_bytes = max(self.usage.peak_rss_pyspark_worker_bytes, rss)
        u = self.usage
        u.samples += 1
        u.peak_rss_bytes = max(u.peak_rss_bytes, total)
        u.max_processes = max(u.max_processes, alive)
        u.cpu_seconds = sum(self._cpu.values())

    def _is_pyspark(self, pid: int) -> bool:
        """Spark's Python workers: forked from `python -m pyspark.daemon`, whose command line they keep."""
        known = self._pyspark.get(pid)
        if known is None:
            try:
                known = b"pyspark.daemon" in Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                known = False
            self._pyspark[pid] = known
        return known

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def stop(self) -> Usage:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.usage


@dataclass
class Contender:
    """One running contender process (and its tree), with its log file."""

    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    sampler: Sampler | None = None
    started_at: float = 0.0
    started_wall: float = 0.0  # time.time() at start, to compare with broker timestamps
    done_at: float | None = None  # when the harness saw it done (exit, or target complete)
    ended_at: float | None = None
    exit_cpu_seconds: float | None = None  # from wait4, when it exited on its own
    extra: dict = field(default_factory=dict)
    extra_roots: Sequence[int] = ()  # sampled with the contender's own tree

    def start(self) -> Contender:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **(self.env or {})}
        with open(self.log_path, "ab") as logf:
            logf.write(("$ " + " ".join(self.argv) + "\n").encode())
            logf.flush()
            # Own session: stopping the contender signals its whole process group, and
            # nothing else on this shared machine.
            self.proc = subprocess.Popen(
                list(self.argv),
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
            )
        self.started_at = time.monotonic()
        self.started_wall = time.time()
        self.sampler = Sampler(self.proc.pid, extra_roots=self.extra_roots).start()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def poll(self) -> int | None:
        """Exit status, or None while running; reaps with wait4 to get exact CPU time.

        The sampler can miss the last fraction of a second of a process that exits on its
        own (`--until-caught-up`); the kernel's rusage of the reaped child (and of the
        workers it reaped) is exact.
        """
        assert self.proc is not None
        if self.proc.returncode is not None:
            return self.proc.returncode
        try:
            pid, status, rusage = os.wait4(self.proc.pid, os.WNOHANG)
        except ChildProcessError:
            return self.proc.poll()
        if pid == 0:
            return None
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.ended_at = time.monotonic()
        self.exit_cpu_seconds = rusage.ru_utime + rusage.ru_stime
        return self.proc.returncode

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGTERM the process group, SIGKILL after `grace`; returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            if self.sampler is not None:
                self.sampler.sample()  # one last look before shutdown frees memory
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        # Workers a contender forked may outlive their parent: end the group in any case.
        _signal_group(self.proc.pid, signal.SIGKILL)
        if self.ended_at is None:
            self.ended_at = time.monotonic()
        return self.proc.returncode

    def finish(self) -> Usage:
        """Stop sampling (before any shutdown work), then stop the process."""
        usage = self.sampler.stop() if self.sampler else Usage()
        if self.exit_cpu_seconds is not None:
            usage.cpu_seconds = max(usage.cpu_seconds, self.exit_cpu_seconds)
        self.stop()
        return usage

    @property
    def wall_seconds(self) -> float:
        """Start to done (not to the end of its shutdown)."""
        return (self.done_at or self.ended_at or time.monotonic()) - self.started_at

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
