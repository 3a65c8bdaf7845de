"""Real clusters, started once per test session and always torn down."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.clusters import TestClusters, start_cassandra, start_clusters

# ------------------------------------------------------------- three shards, side by side

# `make test` runs this tier as three pytest processes at once (MIRROR_TEST_SHARD=1, 2, 3),
# each with its own clusters: one process left the 2 cores idle about half of its 39 minutes,
# two still 29 % of theirs, waiting on brokers, Cassandra, Spark and containers (vmstat, wave 4).
# A file runs whole in one shard, so a server only its tests need starts once: shard 2 has the
# Spark tests (one local session, one standalone cluster) and the container stack, shard 3 the
# Cassandra node's tests, the secured clusters and exactly-once; about 790 of the tier's 2,350
# measured seconds each. Every other file, a new one included, is shard 1.
SHARD_OF = {
    **dict.fromkeys(
        (
            "test_containers.py",
            "test_reload.py",
            "test_source_gaps.py",
            "test_spark.py",
            "test_spark_exactly_once.py",
            "test_spark_flow_controls.py",
            "test_spark_submit.py",
        ),
        "2",
    ),
    **dict.fromkeys(
        (
            "test_alerts_prometheus.py",
            "test_canary_fresh_start.py",
            "test_cassandra_trim.py",
            "test_datapath_faults.py",
            "test_exactly_once.py",
            "test_failover.py",
            "test_security.py",
            "test_topic_deletes.py",
        ),
        "3",
    ),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = os.environ.get("MIRROR_TEST_SHARD")
    if not shard:
        return
    if shard not in ("1", "2", "3"):
        raise pytest.UsageError(f"MIRROR_TEST_SHARD={shard!r}: 1, 2 or 3, or unset for the whole tier")
    keep = [i for i in items if SHARD_OF.get(i.path.name, "1") == shard]
    kept = set(map(id, keep))
    config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
    items[:] = keep


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
def more_clusters(early: Early) -> Iterator[TestClusters]:
    """Two more Kafka clusters, `b` and `c`, for topologies of more than two clusters
    (started only when a selected test asks; shared by the session like `clusters`)."""
    tc = early.take("more_clusters")
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
def cassandra(early: Early):
    """One real Cassandra node for the whole session, started only if a selected test asks for it."""
    node = early.take("cassandra")
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def spark_local(early: Early):
    """One local-mode Spark session (its driver JVM) for every in-process Spark test."""
    spark = early.take("spark_local")
    try:
        yield spark
    finally:
        spark.stop()


@pytest.fixture(scope="session")
def spark_cluster(early: Early):
    """`mirror dev up --spark`'s standalone master and worker (no Kafka: the session's clusters serve)."""
    dev, home, master = early.take("spark_cluster")
    try:
        yield home, master
    finally:
        dev.down()


# ------------------------------------------------------------- started early, beside the first tests


def _more_clusters(factory: pytest.TempPathFactory) -> TestClusters:
    return start_clusters(factory.mktemp("more-clusters"), ["b", "c"])


def _cassandra(factory: pytest.TempPathFactory) -> Any:
    return start_cassandra(factory.mktemp("cassandra"))


def _spark_local(factory: pytest.TempPathFactory) -> Any:
    from mirror.spark.session import spark_session

    return spark_session("local[2]", "mirror-tests", ui_port=None)  # no test looks at its UI


def _spark_cluster(factory: pytest.TempPathFactory) -> tuple[Any, Path, str]:
    from mirror.devenv.kafka import DevClusters
    from tests.support.clusters import free_base_port

    home = factory.mktemp("spark-dev")
    dev = DevClusters(home)
    base = free_base_port(0, extra_below=30)
    try:
        result = dev.up([], base, spark=True)
    except BaseException:
        dev.down()
        raise
    return dev, home, result.status["spark"]["master"]


# What each is started with, and how one started but never handed to its fixture is stopped.
STARTS: dict[str, tuple[Callable[[pytest.TempPathFactory], Any], Callable[[Any], Any]]] = {
    "more_clusters": (_more_clusters, lambda tc: tc.dev.down()),
    "cassandra": (_cassandra, lambda node: node.stop()),
    "spark_local": (_spark_local, lambda spark: spark.stop()),
    "spark_cluster": (_spark_cluster, lambda started: started[0].down()),
}


class Early:
    """The session's slow servers the selected tests will ask for, started in the background
    as the first test starts: a test that needs one later finds it up (or starting) instead of
    waiting its whole start-up. Each is started once; its fixture takes it and stops it."""

    def __init__(self, factory: pytest.TempPathFactory, wanted: list[str]) -> None:
        self._factory = factory
        # One at a time, in the order the tests need them: on 2 cores, JVMs starting all at once
        # would slow the tests running beside them more than the overlap saves.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="early-start")
        self._futures: dict[str, Future[Any]] = {n: self._pool.submit(STARTS[n][0], factory) for n in wanted}
        self._taken: set[str] = set()

    def take(self, name: str) -> Any:
        """The started server (its start's own error, if it failed); started now if not wanted early."""
        self._taken.add(name)
        future = self._futures.get(name)
        return future.result() if future is not None else STARTS[name][0](self._factory)

    def close(self) -> None:
        """Stop what was started and never taken (a run cut short, `-x`)."""
        self._pool.shutdown(wait=True)
        for name, future in self._futures.items():
            if name not in self._taken and future.exception() is None:
                STARTS[name][1](future.result())


@pytest.fixture(scope="session", autouse=True)
def early(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Early]:
    wanted: list[str] = []  # in the order of the first test that needs each
    for item in request.session.items:
        # A fixture parametrized by a server's name asks for it by that name (test_failover's
        # `store_yaml`: `request.getfixturevalue("cassandra")`), which fixturenames do not show.
        params = getattr(getattr(item, "callspec", None), "params", {}).values()
        names = [*getattr(item, "fixturenames", ()), *(p for p in params if isinstance(p, str))]
        wanted += [n for n in names if n in STARTS and n not in wanted]
    starts = Early(tmp_path_factory, wanted)
    try:
        yield starts
    finally:
        starts.close()
