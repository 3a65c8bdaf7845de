"""`mirror run` as a real child process, for tests that kill, stop or race it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from mirror.devenv.common import spawn_prefix


class MirrorProcess:
    def __init__(self, config: Path, *args: str, log: Path | None = None) -> None:
        self.log = log or config.with_suffix(f".{os.getpid()}.{id(self)}.log")
        self._logf = open(self.log, "wb")
        self.proc = subprocess.Popen(
            # dies with the test session even if it is SIGKILLed before its teardown
            [*spawn_prefix(), sys.executable, "-m", "mirror", "-v", "run", "-c", str(config), *args],
            stdout=self._logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(30)

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._logf.flush()

    def output(self) -> str:
        if not self._logf.closed:
            self._logf.flush()
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM (drain and commit), then close; killed if it does not exit in time."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        self.close()

    def close(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(30)
        self._logf.close()

    def __enter__(self) -> MirrorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a mirror's worker processes, a Spark worker's executors)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out
