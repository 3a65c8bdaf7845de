"""A dev Spark standalone cluster: one master and N workers (1 core, a small heap each) on 127.0.0.1.

pip's pyspark ships `bin/spark-class` but not the `sbin/start-master.sh` scripts, so the
master and the workers are started with `spark-class org.apache.spark.deploy.master.Master`
/ `...worker.Worker` directly (spark-class execs java, so the pid file names the JVM).
Ports: the master listens on `base-port - 30`, its web UI (readiness: `/json`) on `- 29`,
worker i on `- 28 + 2i` and its UI on `- 27 + 2i` (so at most MAX_WORKERS fit below the
base port). Worker 0 keeps its files under the names of a one-worker cluster (`worker.pid`,
`work/`). pyspark is located, never imported (only mirror.spark imports it).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import time
import urllib.request
from pathlib import Path

from mirror.devenv.common import (
    START_TIMEOUT,
    log_tail,
    owned_pid,
    require_free_ports,
    spawn_detached,
    started_alive,
    stop_owned,
)
from mirror.errors import DevClusterError

log = logging.getLogger(__name__)

WORKER_MEMORY = "1g"  # what executors may use; the daemons themselves get DAEMON_MEMORY
DAEMON_MEMORY = "256m"
MAX_WORKERS = 13  # worker i's ports are base-port - 28 + 2i and - 27 + 2i: the last pair ends at base-port - 3


def spark_home() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise DevClusterError("pyspark is not installed", hint="run `make setup` (it installs the `spark` extra)")
    return Path(next(iter(spec.submodule_search_locations)))


class SparkDev:
    """The master and `workers` workers under `home/spark`, on ports below `base_port`.

    Starting again with more workers adds the missing ones to the running cluster (a running
    application gets executors on them); stopping stops every worker found, however many."""

    def __init__(self, home: Path, base_port: int, workers: int = 1) -> None:
        if not 1 <= workers <= MAX_WORKERS:
            raise DevClusterError(f"--spark-workers {workers}: 1 to {MAX_WORKERS} workers fit below the base port")
        self.dir = home / "spark"
        self.base_port = base_port
        self.workers = workers
        self.port, self.ui_port = base_port - 30, base_port - 29

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @staticmethod
    def worker_role(i: int) -> str:
        return "worker" if i == 0 else f"worker-{i}"

    def _roles(self) -> list[str]:
        return ["master", *(self.worker_role(i) for i in range(self.workers))]

    def _ports(self, role: str) -> tuple[int, int]:
        if role == "master":
            return self.port, self.ui_port
        i = 0 if role == "worker" else int(role.removeprefix("worker-"))
        return self.base_port - 28 + 2 * i, self.base_port - 27 + 2 * i

    def work_dir(self, role: str) -> Path:
        """Where a worker keeps its executors' directories and logs (`app-*/<executor id>/`)."""
        return self.dir / ("work" if role == "worker" else f"work{role.removeprefix('worker')}")

    def _pid_file(self, role: str) -> Path:
        return self.dir / f"{role}.pid"

    def _log_file(self, role: str) -> Path:
        return self.dir / f"{role}.log"

    def _marker(self, role: str) -> str:
        return f"--port {self._ports(role)[0]}"

    def pid(self, role: str) -> int | None:
        return owned_pid(self._pid_file(role), self._marker(role))

    def pids(self) -> list[int]:
        """The master's and the workers' JVMs that run (executors are the workers' children)."""
        return [pid for role in self._roles() if (pid := self.pid(role)) is not None]

    def running(self) -> bool:
        return all(self.pid(role) is not None for role in self._roles())

    def _command(self, role: str) -> list[str]:
        port, ui = self._ports(role)
        if role == "master":
            return [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ]
        return [
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
            "--cores",
            "1",
            "--memory",
            WORKER_MEMORY,
            "--work-dir",
            str(self.work_dir(role)),
            self.master_url,
        ]

    def start(self) -> list[str]:
        """Start what is not running; return the roles started (wait with `wait_ready`)."""
        started = []
        home = spark_home()
        self.dir.mkdir(parents=True, exist_ok=True)
        for role in self._roles():
            if self.pid(role) is not None:
                continue
            require_free_ports(self._ports(role), f"the Spark {role}", hint="pick other ports with --base-port")
            proc = spawn_detached(
                [str(home / "bin" / "spark-class"), *self._command(role)],
                log_file=self._log_file(role),
                pid_file=self._pid_file(role),
                cwd=self.dir,
                env=self.env(role, home),
            )
            started.append(f"spark-{role}")
            log.info("started spark %s pid=%d", role, proc.pid)
        return started

    def env(self, role: str, home: Path) -> dict[str, str]:
        """The environment of the `role` daemon (its executors inherit the worker's)."""
        return {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "SPARK_LOG_DIR": str(self.dir),
            "SPARK_WORKER_DIR": str(self.dir / "work"),
        }

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as resp:
                return int(json.loads(resp.read()).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for role in self._roles():
                if not started_alive(self._pid_file(role)):
                    raise DevClusterError(
                        f"the Spark {role} exited during start; last lines of "
                        f"{self._log_file(role)}:\n{log_tail(self._log_file(role))}"
                    )
            if self.alive_workers() >= self.workers:
                return
            time.sleep(0.3)
        raise DevClusterError(
            f"the Spark master has fewer than {self.workers} workers after {timeout:g}s; last lines of "
            f"{self._log_file('worker')}:\n{log_tail(self._log_file('worker'))}"
        )

    def stop(self, *, kill: bool = False) -> list[str]:
        stopped = []
        workers = sorted(f.stem for f in self.dir.glob("worker*.pid"))
        for role in (*workers, "master"):
            if stop_owned(self.pid(role), self._pid_file(role), kill=kill):
                stopped.append(f"spark-{role}")
            self._pid_file(role).unlink(missing_ok=True)
        return stopped
