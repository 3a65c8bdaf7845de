"""The images of docker/ built and docker/compose.yaml run for real, with podman.

One compose stack for every check (two Kafka clusters, Cassandra, two mirror replicas, the
canary, the lag exporter, Prometheus with the alert rules), then the Spark image against
the same clusters. The images are built from docker/ as they are; where no registry
answers, the upstream images they start from are stand-ins (docker/standins/README.md).
Grafana's image cannot be had that way: its files are checked in tests/unit/test_docker_files.py.

podman-compose 1.0.3 (Debian bookworm) ignores `condition: service_healthy` and
`stop_grace_period`, and no systemd timer runs health checks here: the test waits for
health itself (`podman healthcheck run`) and gives SIGTERM the compose file's grace period.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
import yaml

from tests.support.kafkautil import commit_group, create_topic, end_offsets, producer, read_topic, wait_for
from tests.support.podman import COMPOSE, ROOT, Stack, build_images, podman_env

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    # Building every image from empty storage takes minutes on a loaded 2-core machine.
    pytest.mark.timeout(2400),
    # Never skipped in CI (CI=true): `make setup` installs podman there, so a missing one fails.
    pytest.mark.skipif(
        not os.environ.get("CI")
        and (os.name != "posix" or os.geteuid() != 0 or shutil.which("podman-compose") is None),
        reason="needs root and podman (`make setup` installs podman with apt-get as root)",
    ),
]

FLOW = "nyc-to-sf"
PARTITIONS = 3
SERVICES = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
# SIGTERM drains and commits; the compose file gives it this long before SIGKILL.
GRACE = int(SERVICES["mirror"]["stop_grace_period"].rstrip("s"))
MIRRORS = SERVICES["mirror"]["deploy"]["replicas"]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    env = podman_env()
    build_images(env, spark=True)
    s = Stack("mirrorct", env)
    s.down()  # what an interrupted run may have left
    try:
        s.compose("up", "-d", "kafka-nyc", "kafka-sf", "cassandra")
        # What `depends_on: condition: service_healthy` does under Docker.
        s.wait_healthy([s.container(n) for n in ("kafka-nyc", "kafka-sf", "cassandra")], timeout=600)
        s.compose("up", "-d", "mirror", "canary", "monitor", "prometheus")
        yield s
    finally:
        s.down()


def _produce(stack: Stack, topic: str, first: int, count: int) -> list[tuple[bytes, bytes]]:
    p = producer(stack.nyc)
    sent = [(f"k{i}".encode(), f"{topic}-{i}".encode()) for i in range(first, first + count)]
    for key, value in sent:
        p.produce(topic, value=value, key=key)
    assert p.flush(60) == 0
    return sent


def _mirrored(stack: Stack, topic: str) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    return {p: [(r.key, r.value) for r in recs] for p, recs in read_topic(stack.sf, f"nyc.{topic}", PARTITIONS).items()}


def _wait_mirrored(stack: Stack, topic: str, count: int, timeout: float = 180) -> None:
    def arrived() -> bool:
        return sum(end_offsets(stack.sf, f"nyc.{topic}", PARTITIONS).values()) >= count

    wait_for(
        arrived,
        timeout,
        f"{count} records in sf's nyc.{topic}",
        detail=lambda: "\n".join(stack.logs(n, 15) for n in stack.containers() if "_mirror_" in n),
    )


def _new_topic(stack: Stack, topic: str) -> None:
    create_topic(stack.nyc, topic, PARTITIONS)


def test_every_container_of_the_stack_reports_healthy(stack: Stack):
    running = [stack.container("mirror", n) for n in range(1, MIRRORS + 1)] + [
        stack.container(n) for n in ("canary", "monitor")
    ]
    stack.wait_healthy(running, timeout=300)
    for name in running:
        assert stack.state(name)["Running"]


def test_every_record_is_mirrored_exactly_and_the_offset_map_is_in_cassandra(stack: Stack):
    topic = "orders.exact"
    _new_topic(stack, topic)
    _produce(stack, topic, 0, 1500)
    _wait_mirrored(stack, topic, 1500)
    source = {p: [(r.key, r.value) for r in recs] for p, recs in read_topic(stack.nyc, topic, PARTITIONS).items()}
    target = _mirrored(stack, topic)
    # Same records, same partitions, same order: nothing lost, nothing twice.
    assert target == source
    assert sum(map(len, target.values())) == 1500

    # The replicas share the offset map through Cassandra: every row there maps a source
    # record to the target offset that holds it.
    query = (
        f"SELECT partition, source_offset, target_offset FROM mirror.offset_syncs "
        f"WHERE flow='{FLOW}' AND topic='{topic}' AND partition IN (0, 1, 2)"
    )
    rows: list[list[str]] = []

    def synced() -> bool:
        rows[:] = stack.cql(query)
        return {int(r[0]) for r in rows} == set(range(PARTITIONS))

    wait_for(synced, 60, f"offset syncs of every partition of {topic} in Cassandra")
    for partition, source_offset, target_offset in ((int(a), int(b), int(c)) for a, b, c in rows):
        assert source[partition][source_offset] == target[partition][target_offset]


def test_the_image_keeps_sqlite_state_in_its_state_dir_with_the_config_read_only(stack: Stack, tmp_path):
    """The default offset store is a relative SQLite path: in the image it must land under
    MIRROR_STATE_DIR (/var/lib/mirror), not next to the read-only config."""
    topic = "audit.readonly"
    _new_topic(stack, topic)
    sent = _produce(stack, topic, 0, 200)
    (tmp_path / "mirror.yaml").write_text(
        "clusters: {nyc: {bootstrap: 'kafka-nyc:9092'}, sf: {bootstrap: 'kafka-sf:9092'}}\n"
        f"flows: [{{name: readonly, source: nyc, target: sf, topics: {{include: ['{topic}']}}}}]\n"
    )
    tmp_path.chmod(0o755)
    (tmp_path / "mirror.yaml").chmod(0o644)
    script = "mirror run -c /etc/mirror/mirror.yaml --until-caught-up && ls /var/lib/mirror/.mirror/offsets.db"
    done = stack.podman(
        "run",
        "--rm",
        "--network",
        stack.network,
        "-v",
        f"{tmp_path}:/etc/mirror:ro",
        "--entrypoint",
        "sh",
        "localhost/mirror:dev",
        "-c",
        script,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    mirrored = [rec for recs in _mirrored(stack, topic).values() for rec in recs]
    assert collections.Counter(mirrored) == collections.Counter(sent)


def _query(stack: Stack, promql: str) -> list[dict]:
    url = f"{stack.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.load(resp)["data"]["result"]


def test_prometheus_scrapes_every_mirror_role_and_loads_the_alert_rules(stack: Stack):
    def all_up() -> bool:
        try:
            up = collections.Counter(r["metric"]["job"] for r in _query(stack, "up == 1"))
        except OSError:
            return False
        return up == {"mirror": MIRRORS, "canary": 1, "monitor": 1}

    wait_for(all_up, 120, f"Prometheus scraping {MIRRORS} mirror replicas, the canary and the monitor")

    def probes_arrive() -> bool:
        try:
            received = _query(stack, "sum(mirror_canary_received_total)")
        except OSError:
            return False
        return bool(received) and float(received[0]["value"][1]) > 0

    wait_for(probes_arrive, 120, "canary probes arriving (mirror_canary_received_total > 0, as Prometheus scraped it)")

    with urllib.request.urlopen(f"{stack.prometheus}/api/v1/rules", timeout=10) as resp:
        loaded = [r["name"] for g in json.load(resp)["data"]["groups"] for r in g["rules"]]
    rules = yaml.safe_load((ROOT / "configs" / "alerts.yaml").read_text(encoding="utf-8"))
    expected = [r.get("alert") or r.get("record") for g in rules["groups"] for r in g["rules"]]
    assert sorted(loaded) == sorted(expected)


DASHBOARD = ROOT / "docker" / "grafana" / "dashboards" / "mirror.json"


def _panel_queries() -> list[tuple[str, str]]:
    """Every target of the Grafana dashboard, with its variables as Grafana fills them in."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [
        (panel["title"], t["expr"].replace("$flow", ".*").replace("$__rate_interval", "1m"))
        for panel in board["panels"]
        for t in panel.get("targets", [])
    ]


def _alert_metrics() -> set[str]:
    rules = yaml.safe_load((ROOT / "configs" / "alerts.yaml").read_text(encoding="utf-8"))
    exprs = " ".join(str(r["expr"]) for g in rules["groups"] for r in g["rules"])
    return set(re.findall(r"\b(mirror_[a-z0-9_]+)", exprs))


def test_every_dashboard_panel_and_every_alert_metric_has_series_from_the_running_stack(stack: Stack):
    """A panel or an alert over a metric nobody exports shows nothing and pages nobody: each
    query of the dashboard and each metric an alert rule names must come back non-empty from
    the stack's Prometheus (a checkpointed group gives the group panels their series)."""
    topic = "orders.dashboard"
    _new_topic(stack, topic)
    _produce(stack, topic, 0, 30)
    _wait_mirrored(stack, topic, 30)
    commit_group(stack.nyc, "billing.dashboard", topic, dict.fromkeys(range(PARTITIONS), 5))
    queries = _panel_queries() + [(f"alert rule metric {m}", m) for m in sorted(_alert_metrics())]
    empty: list[str] = []

    def every_query_answers() -> bool:
        empty.clear()
        for title, promql in queries:
            try:
                if not _query(stack, promql):
                    empty.append(f"{title}: {promql}")
            except OSError as exc:
                empty.append(f"{title}: {promql} ({exc})")
        return not empty

    what = "every dashboard query and alert metric with series"
    wait_for(every_query_answers, 240, what, detail=lambda: "\n".join(empty))


def test_sigterm_exits_0_and_a_restart_duplicates_nothing(stack: Stack):
    topic = "orders.restart"
    _new_topic(stack, topic)
    sent = _produce(stack, topic, 0, 600)
    _wait_mirrored(stack, topic, 600)
    replicas = [stack.container("mirror", n) for n in range(1, MIRRORS + 1)]
    for name in replicas:
        stack.podman("stop", "-t", str(GRACE), name, timeout=GRACE + 60)
        assert stack.state(name)["ExitCode"] == 0, stack.logs(name)
    sent += _produce(stack, topic, 600, 600)  # while no replica runs
    for name in replicas:
        stack.podman("start", name)
    _wait_mirrored(stack, topic, 1200)
    mirrored = [rec for recs in _mirrored(stack, topic).values() for rec in recs]
    assert collections.Counter(mirrored) == collections.Counter(sent)


def test_a_killed_replica_s_partitions_go_to_the_other_and_nothing_is_lost(stack: Stack):
    topic = "orders.failover"
    _new_topic(stack, topic)
    sent = _produce(stack, topic, 0, 600)
    _wait_mirrored(stack, topic, 600)
    killed, survivor = stack.container("mirror", 1), stack.container("mirror", 2)
    stack.podman("kill", "--signal", "KILL", killed)
    sent += _produce(stack, topic, 600, 600)

    def all_there() -> bool:
        mirrored = {rec for recs in _mirrored(stack, topic).values() for rec in recs}
        return set(sent) <= mirrored

    # The survivor gets the dead member's partitions after its session times out (10 s).
    wait_for(all_there, 180, f"every record of {topic} in sf after {killed} was killed", interval=2)
    assert not stack.state(killed)["Running"], "the killed replica came back: the survivor's takeover is unproven"
    assert stack.state(survivor)["Running"]
    # At least once: records the dead replica had written but not committed may be there twice.
    mirrored = [rec for recs in _mirrored(stack, topic).values() for rec in recs]
    assert set(mirrored) == set(sent)


def test_the_spark_image_runs_the_spark_pipeline(stack: Stack):
    # One engine per flow: the Spark run refuses while the flow's group has live members.
    for n in range(1, MIRRORS + 1):
        stack.podman("stop", "-t", str(GRACE), stack.container("mirror", n), timeout=GRACE + 60)
    topic = "orders.spark"
    _new_topic(stack, topic)
    sent = _produce(stack, topic, 0, 300)
    stack.compose("up", "-d", "spark-master", "spark-worker")
    stack.wait_logged(stack.container("spark-worker"), "Successfully registered with master", timeout=300)
    # The driver as compose defines it (its hostname is what executors connect back to),
    # told to stop once caught up.
    driver = SERVICES["mirror-spark"]
    mounts = [arg for v in driver["volumes"] for arg in ("-v", v.replace("./", f"{COMPOSE.parent}/", 1))]
    done = stack.podman(
        "run",
        "--rm",
        "--name",
        stack.container("mirror-spark"),
        "--network",
        stack.network,
        "--hostname",
        driver["hostname"],
        "--network-alias",
        driver["hostname"],
        *mounts,
        driver["image"],
        *driver["command"],
        "--until-caught-up",
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    mirrored = [rec for recs in _mirrored(stack, topic).values() for rec in recs]
    assert collections.Counter(mirrored) == collections.Counter(sent)
    # The image has the JVM writer's jar (docker/Dockerfile.spark builds it): batches went
    # through it, not all through the Python tasks (its closing line counts them).
    by_jvm = re.search(r"batches by the JVM writer: (\d+)", done.stderr)
    assert by_jvm is not None and int(by_jvm.group(1)) > 0, done.stderr[-3000:]
