"""Session-wide real Kafka clusters for the integration tests, started by `mirror.devenv.kafka`.

Ports are chosen free at start (never the dev defaults 19092/19192), so a developer's
running `mirror dev` clusters and a second test run on the same machine do not clash.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mirror.devenv.common import port_free
from mirror.devenv.kafka import PORT_STEP, DevClusters


def free_base_port(count: int, *, extra_below: int = 50) -> int:
    """A base port such that every cluster's client and controller port (and Cassandra's) are free."""
    if os.environ.get("MIRROR_TEST_BASE_PORT"):
        return int(os.environ["MIRROR_TEST_BASE_PORT"])
    rng = random.Random()
    for _ in range(200):
        # Below the kernel's ephemeral range (32768-60999 on Linux): a port there can be
        # taken by any outgoing connection between this check and a broker's (re)start.
        base = rng.randrange(20000, 32000, 10)
        ports = [base - extra_below, base - extra_below + 1]
        for i in range(count):
            ports += [base + PORT_STEP * i + d for d in range(5)]  # client, controller, extra listeners
        if all(port_free(p) for p in ports):
            return base
    raise RuntimeError("no free port range found for test clusters")


@dataclass
class TestClusters:
    dev: DevClusters
    base_port: int
    names: Sequence[str]
    bootstraps: dict[str, str] = field(default_factory=dict)

    def bootstrap(self, name: str) -> str:
        return self.bootstraps[name]

    def stop(self, name: str, *, kill: bool = False) -> None:
        self.dev.node(name).stop(kill=kill)

    def start(self, name: str) -> None:
        node = self.dev.node(name)
        if node.pid() is None:
            node.start()
        node.wait_ready()


def start_clusters(home: Path, names: Sequence[str], *, cassandra: bool = False) -> TestClusters:
    dev = DevClusters(home)
    base = free_base_port(len(names))
    result = dev.up(list(names), base, cassandra=cassandra)
    tc = TestClusters(dev, base, list(names))
    tc.bootstraps = {n: c["bootstrap"] for n, c in result.status["clusters"].items()}
    return tc


def start_cassandra(home: Path, *, auth: bool = False):
    """One dev Cassandra node on a free native/storage port pair (never the dev default 19042)."""
    from mirror.devenv.cassandra import CassandraNode

    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(12000, 18000, 2)  # below the ephemeral range, as above
        if port_free(port) and port_free(port + 1):
            break
    else:
        raise RuntimeError("no free port pair found for test Cassandra")
    node = CassandraNode(home, port, auth=auth)
    node.start()
    try:
        node.wait_ready()
    except BaseException:
        node.stop(kill=True)
        raise
    return node
