"""A real Prometheus server (Debian package) on a free loopback port, for alert tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml

from mirror.devenv.common import free_ports, spawn_prefix


def free_port(count: int = 1) -> int:
    """The first of `count` consecutive free loopback ports for a test's server: below the
    test clusters' and Cassandra's ranges (tests/support/clusters.py), so a stopped broker's
    port is still free when it restarts."""
    return free_ports(count, 8000, 12000)


class PrometheusServer:
    """`prometheus` scraping `targets` every second and evaluating `rules` every second."""

    def __init__(self, home: Path, targets: list[str], rules: dict) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus not found: run `make setup` (installs the Debian package prometheus)")
        home.mkdir(parents=True, exist_ok=True)
        (home / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
        (home / "prometheus.yml").write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
                    "rule_files": [str(home / "rules.yaml")],
                    "scrape_configs": [{"job_name": "mirror", "static_configs": [{"targets": targets}]}],
                }
            )
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(home / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [
                *spawn_prefix(),
                binary,
                f"--config.file={home / 'prometheus.yml'}",
                f"--storage.tsdb.path={home / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(home / 'prometheus.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).read()
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("prometheus did not become ready within 60s")

    def api(self, path: str) -> dict:
        return json.loads(urllib.request.urlopen(f"{self.url}/api/v1/{path}", timeout=10).read())["data"]

    def alerts(self) -> list[dict]:
        return self.api("alerts")["alerts"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
