"""A dev Spark standalone cluster: one master and one worker (1 core, a small heap) on 127.0.0.1.

pip's pyspark ships `bin/spark-class` but not the `sbin/start-master.sh` scripts, so the
master and the worker are started with `spark-class org.apache.spark.deploy.master.Master`
/ `...worker.Worker` directly (spark-class execs java, so the pid file names the JVM).
Ports: the master listens on `base-port - 30`, its web UI (readiness: `/json`) on `- 29`,
the worker on `- 28` and `- 27`. pyspark is located, never imported (only mirror.spark
imports it).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import time
import urllib.request
from pathlib import Path

from mirror.devenv.common import START_TIMEOUT, log_tail, owned_pid, require_free_ports, spawn_detached, started_alive, stop_owned
from mirror.errors import DevClusterError

log = logging.getLogger(__name__)

WORKER_MEMORY = "1g"  # what executors may use; the daemons themselves get DAEMON_MEMORY
DAEMON_MEMORY = "256m"


def spark_home() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise DevClusterError("pyspark is not installed", hint="run `make setup` (it installs the `spark` extra)")
    return Path(next(iter(spec.submodule_search_locations)))


class SparkDev:
    """The master and worker under `home/spark`, on ports below `base_port`."""

    def __init__(self, home: Path, base_port: int) -> None:
        self.dir = home / "spark"
        self.base_port = base_port
        self.port, self.ui_port, self.worker_port, self.worker_ui_port = (base_port - 30, base_port - 29, base_port - 28, base_port - 27)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _pid_file(self, role: str) -> Path:
        return self.dir / f"{role}.pid"

    def _log_file(self, role: str) -> Path:
        return self.dir / f"{role}.log"

    def _marker(self, role: str) -> str:
        return f"--port {self.port}" if role == "master" else f"--port {self.worker_port}"

    def pid(self, role: str) -> int | None:
        return owned_pid(self._pid_file(role), self._marker(role))

    def running(self) -> bool:
        return self.pid("master") is not None and self.pid("worker") is not None

    def start(self) -> list[str]:
        """Start what is not running; return the roles started (wait with `wait_ready`)."""
        started = []
        home = spark_home()
        self.dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
               "SPARK_LOG_DIR": str(self.dir), "SPARK_WORKER_DIR": str(self.dir / "work")}
        cmds = {
            "master": ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port)],
            "worker": ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(self.worker_port), "--webui-port", str(self.worker_ui_port),
                       "--cores", "1", "--memory", WORKER_MEMORY, "--work-dir", str(self.dir / "work"), self.master_url],
        }
        for role, args in cmds.items():
            if self.pid(role) is not None:
                continue
            ports = (self.port, self.ui_port) if role == "master" else (self.worker_port, self.worker_ui_port)
            require_free_ports(ports, f"the Spark {role}", hint="pick other ports with --base-port")
            proc = spawn_detached([str(home / "bin" / "spark-class"), *args], log_file=self._log_file(role), pid_file=self._pid_file(role), cwd=self.dir, env=env)
            started.append(f"spark-{role}")
            log.info("started spark %s pid=%d", role, proc.pid)
        return started

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as resp:
                return int(json.loads(resp.read()).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for role in ("master", "worker"):
                if not started_alive(self._pid_file(role)):
                    raise DevClusterError(f"the Spark {role} exited during start; last lines of {self._log_file(role)}:\n{log_tail(self._log_file(role))}")
            if self.alive_workers() >= 1:
                return
            time.sleep(0.3)
        raise DevClusterError(f"the Spark master has no worker after {timeout:g}s; last lines of {self._log_file('worker')}:\n{log_tail(self._log_file('worker'))}")

    def stop(self, *, kill: bool = False) -> list[str]:
        stopped = []
        for role in ("worker", "master"):
            if stop_owned(self.pid(role), self._pid_file(role), kill=kill):
                stopped.append(f"spark-{role}")
            self._pid_file(role).unlink(missing_ok=True)
        return stopped
