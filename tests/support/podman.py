"""docker/compose.yaml run by podman-compose under one project name, for the container test.

The images come from docker/standins/podman.sh (upstream images where they can be pulled,
stand-ins where not). The host ports the stack publishes are picked free, on loopback, and
passed through the compose file's variables.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.prometheus import free_port

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
PODMAN_SH = ROOT / "docker" / "standins" / "podman.sh"


def podman_env() -> dict[str, str]:
    """The process environment plus the podman settings podman.sh writes (CONTAINERS_CONF)."""
    out = subprocess.run([str(PODMAN_SH), "env"], capture_output=True, text=True, check=True).stdout
    return {**os.environ, **dict(line.split("=", 1) for line in out.splitlines() if "=" in line)}


def build_images(env: dict[str, str], *, spark: bool) -> None:
    """Stand-ins where needed, then mirror:dev (and mirror:dev-spark) from docker/ as they are."""
    subprocess.run([str(PODMAN_SH), "build", *(["--spark"] if spark else [])], env=env, check=True, timeout=3000)


class Stack:
    """One compose project: start services, reach its containers, tear it all down."""

    def __init__(self, project: str, env: dict[str, str]) -> None:
        self.project = project
        self.ports = {name: free_port() for name in ("NYC_HOST_PORT", "SF_HOST_PORT", "PROMETHEUS_HOST_PORT")}
        self.env = {**env, **{k: str(v) for k, v in self.ports.items()}}

    @property
    def nyc(self) -> str:
        return f"127.0.0.1:{self.ports['NYC_HOST_PORT']}"

    @property
    def sf(self) -> str:
        return f"127.0.0.1:{self.ports['SF_HOST_PORT']}"

    @property
    def prometheus(self) -> str:
        return f"http://127.0.0.1:{self.ports['PROMETHEUS_HOST_PORT']}"

    @property
    def network(self) -> str:
        return f"{self.project}_default"

    def compose(self, *args: str, timeout: float = 600) -> str:
        return self._run(["podman-compose", "-p", self.project, "-f", str(COMPOSE), *args], timeout)

    def podman(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=check
        )

    def _run(self, cmd: Sequence[str], timeout: float) -> str:
        done = subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(
                f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done.stdout

    def container(self, service: str, number: int = 1) -> str:
        """podman-compose names containers <project>_<service>_<n>."""
        return f"{self.project}_{service}_{number}"

    def containers(self) -> list[str]:
        out = self.podman(
            "ps", "-a", "--filter", f"label=io.podman.compose.project={self.project}", "--format", "{{.Names}}"
        ).stdout
        return out.split()

    def state(self, name: str) -> dict:
        return json.loads(self.podman("inspect", "--format", "{{json .State}}", name).stdout)

    def healthy(self, name: str) -> bool:
        """Runs the image's or compose's health check once (no systemd timer runs them here)."""
        return self.podman("healthcheck", "run", name, check=False, timeout=120).returncode == 0

    def wait_healthy(self, names: Sequence[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(names)
        while pending and time.monotonic() < deadline:
            pending = [n for n in pending if not self.healthy(n)]
        if pending:
            raise AssertionError(
                f"not healthy within {timeout}s: {pending}\n" + "\n".join(self.logs(n) for n in pending)
            )

    def wait_logged(self, name: str, text: str, timeout: float) -> None:
        """Until the container's output has `text` (a daemon saying it is ready)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = self.podman("logs", name, check=False)
            if text in done.stdout or text in done.stderr:
                return
            time.sleep(1)
        raise AssertionError(f"{name} did not log {text!r} within {timeout}s\n{self.logs(name)}")

    def logs(self, name: str, tail: int = 40) -> str:
        done = self.podman("logs", "--tail", str(tail), name, check=False)
        return f"--- {name} ---\n{done.stdout[-4000:]}{done.stderr[-4000:]}"

    def cql(self, query: str) -> list[list[str]]:
        """Rows of a CQL query, run by cqlsh in the Cassandra container."""
        out = self.podman("exec", self.container("cassandra"), "cqlsh", "--no-color", "-e", query).stdout
        lines = [line for line in out.splitlines() if "|" in line]
        return [[cell.strip() for cell in line.split("|")] for line in lines[1:]]

    def down(self) -> None:
        """Every container of the project (volumes too) and its network, whatever state they are in."""
        names = self.containers()
        if names:
            self.podman("rm", "-f", "-v", "-t", "0", *names, check=False, timeout=600)
        self.podman("network", "rm", "-f", self.network, check=False)
