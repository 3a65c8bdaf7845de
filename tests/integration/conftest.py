"""Real clusters, started once per test session and always torn down."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.clusters import TestClusters, start_cassandra, start_clusters


@pytest.fixture(scope="session")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClusters]:
    """Two Kafka clusters, `src` and `dst`, shared by every integration test."""
    home = tmp_path_factory.mktemp("clusters")
    tc = start_clusters(home, ["src", "dst"])
    try:
        yield tc
    finally:
        tc.dev.down()


@pytest.fixture(scope="session")
def more_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClusters]:
    """Two more Kafka clusters, `b` and `c`, for topologies of more than two clusters
    (started only when a test asks; shared by the session like `clusters`)."""
    tc = start_clusters(tmp_path_factory.mktemp("more-clusters"), ["b", "c"])
    try:
        yield tc
    finally:
        tc.dev.down()


@pytest.fixture
def unique() -> str:
    """A per-test suffix so tests sharing the session clusters never share topics or groups."""
    return uuid.uuid4().hex[:8]


@pytest.fixture
def write_config(tmp_path: Path, clusters: TestClusters):
    """Write a topology file naming the session clusters; returns its path."""

    def write(body: str) -> Path:
        path = tmp_path / f"mirror-{uuid.uuid4().hex[:6]}.yaml"
        head = "clusters:\n" + "".join(
            f"  {n}:\n    bootstrap: {clusters.bootstrap(n)}\n    timeout: 10s\n" for n in clusters.names
        )
        path.write_text(head + body)
        return path

    return write


@pytest.fixture(scope="session")
def cassandra(tmp_path_factory: pytest.TempPathFactory):
    """One real Cassandra node for the whole session, started only if a test asks for it."""
    node = start_cassandra(tmp_path_factory.mktemp("cassandra"))
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def spark_local():
    """One local-mode Spark session (its driver JVM) for every in-process Spark test."""
    from mirror.spark.session import spark_session

    spark = spark_session("local[2]", "mirror-tests", ui_port=None)  # no test looks at its UI
    try:
        yield spark
    finally:
        spark.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory):
    """`mirror dev up --spark`'s standalone master and worker (no Kafka: the session's clusters serve)."""
    from mirror.devenv.kafka import DevClusters
    from tests.support.clusters import free_base_port

    home = tmp_path_factory.mktemp("spark-dev")
    dev = DevClusters(home)
    base = free_base_port(0, extra_below=30)
    result = dev.up([], base, spark=True)
    try:
        yield home, result.status["spark"]["master"]
    finally:
        dev.down()
