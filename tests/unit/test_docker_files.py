"""What can be checked of docker/ without a Docker engine.

The compose file, the Dockerfile, the Prometheus and Grafana files are read as data and
cross-checked against each other and against the code: files they mount exist, every
mirror container's command is one the `mirror` CLI parses, the topology they mount
validates, Prometheus scrapes the compose services on the ports they serve, and the
dashboard only queries metrics the project exports. Building the images and running the
stack is tests/integration/test_containers.py's job (with podman); Grafana, whose image
cannot be had there, is checked only here.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

import click
import pytest
import yaml

from mirror import config as cfg
from mirror.cli import cli, main

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
DOCKERFILE = DOCKER / "Dockerfile"
PROMETHEUS = DOCKER / "prometheus" / "prometheus.yml"
DASHBOARDS = DOCKER / "grafana" / "dashboards"
TOPOLOGY_IN_CONTAINER = "/etc/mirror/mirror.yaml"

# docs/design.md, "Metric names": fixed names as Prometheus stores them (counters with _total,
# the histogram as its _bucket/_sum/_count series).
DESIGN_SERIES = {
    "mirror_records_total",
    "mirror_bytes_total",
    "mirror_replication_lag_records",
    "mirror_replication_lag_seconds",
    "mirror_flow_status",
    "mirror_group_checkpoint_age_seconds",
    "mirror_canary_latency_seconds_bucket",
    "mirror_canary_latency_seconds_sum",
    "mirror_canary_latency_seconds_count",
    "mirror_canary_sent_total",
    "mirror_canary_received_total",
    "mirror_canary_lost_total",
    "mirror_canary_duplicated_total",
}
# Series Prometheus itself writes for every target.
PROMETHEUS_SERIES = {"up"}


# ---------------------------------------------------------------------------- helpers


def _mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """(host path, container path) of each bind mount; named volumes are skipped."""
    out = []
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            if v.get("type") == "bind":
                out.append(((DOCKER / v["source"]).resolve(), v["target"]))
            continue
        source, target = v.split(":")[:2]
        if source.startswith((".", "/")):
            out.append(((DOCKER / source).resolve(), target))
    return out


def _is_mirror_image(service: dict[str, Any]) -> bool:
    build = service.get("build")
    return isinstance(build, dict) and build.get("dockerfile") == "docker/Dockerfile"


MIRROR_SERVICES = {name: s for name, s in SERVICES.items() if _is_mirror_image(s)}


def _command(service: dict[str, Any]) -> list[str]:
    cmd = service["command"]
    return shlex.split(cmd) if isinstance(cmd, str) else list(cmd)


def _parse(argv: list[str]) -> tuple[str, click.Context]:
    """Resolve `mirror ARGV` to its command and parse its arguments, without running it.

    Parsing is everything click does before calling the command: unknown options,
    missing required ones, and types (ports in range, paths) all fail here.
    """
    ctx = click.Context(cli, info_name="mirror")
    group: click.Group = cli
    path = []
    args = list(argv)
    while True:
        name, args = args[0], args[1:]
        sub = group.get_command(ctx, name)
        assert sub is not None, f"`mirror {' '.join(path + [name])}` is not a command"
        path.append(name)
        if isinstance(sub, click.Group):
            ctx = click.Context(sub, info_name=name, parent=ctx)
            group = sub
            continue
        return " ".join(path), sub.make_context(name, args, parent=ctx)


def _metrics_port(params: dict[str, Any]) -> int | None:
    return params.get("metrics_port") or params.get("port")


def _dockerfile_instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    text = path.read_text(encoding="utf-8")
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _bases(path: Path = DOCKERFILE) -> list[str]:
    """The image each FROM names, with the ARG defaults of the file filled in."""
    instructions = _dockerfile_instructions(path)
    args = dict(rest.split("=", 1) for word, rest in instructions if word == "ARG" and "=" in rest)
    return [
        re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], rest.split()[0])
        for word, rest in instructions
        if word == "FROM"
    ]


def _pinned(reference: str, tag: str) -> bool:
    """`tag@sha256:<digest>`: the tag says what it is, the digest makes rebuilds repeatable."""
    return re.fullmatch(re.escape(tag) + r"@sha256:[0-9a-f]{64}", reference) is not None


def _env_of_image(path: Path = DOCKERFILE) -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in _dockerfile_instructions(path):
        if word == "ENV":
            for key, value in re.findall(r"(\w+)=(\S+)", rest):
                env[key] = value
    return env


# ---------------------------------------------------------------------------- compose


def test_compose_has_the_whole_stack():
    assert {"kafka-nyc", "kafka-sf", "mirror", "canary", "monitor", "cassandra", "prometheus", "grafana"} <= set(
        SERVICES
    )
    kafkas = [s for s in SERVICES.values() if str(s.get("image", "")).startswith("apache/kafka")]
    assert len(kafkas) == 2
    for s in kafkas:
        assert s["image"] == "apache/kafka:4.1.1"
        assert s["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, one node
    assert len({s["environment"]["CLUSTER_ID"] for s in kafkas}) == 2
    assert SERVICES["cassandra"]["image"].startswith("cassandra:5.0")


def test_kafka_listeners_name_their_own_service():
    for name, s in SERVICES.items():
        env = s.get("environment", {})
        if "KAFKA_ADVERTISED_LISTENERS" not in env:
            continue
        advertised = dict(l.split("://") for l in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
        assert advertised["PLAINTEXT"] == f"{name}:9092", "containers must reach the broker by its service name"
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"1@{name}:9093"
        # The port advertised to the host is the one published there (a variable, so a test
        # or a second stack can pick a free one), on loopback, to the HOST listener's port.
        host_port = advertised["HOST"].rpartition("localhost:")[2]
        listener_port = re.search(r"HOST://:(\d+)", env["KAFKA_LISTENERS"]).group(1)  # type: ignore[union-attr]
        assert f"127.0.0.1:{host_port}:{listener_port}" in s["ports"], (
            "the listener advertised to the host must be published"
        )


def test_the_mirror_scales():
    mirror = SERVICES["mirror"]
    assert mirror["deploy"]["replicas"] >= 2
    # A fixed name or host port would make a second replica fail to start.
    assert "container_name" not in mirror and "ports" not in mirror
    assert mirror.get("stop_grace_period"), "SIGTERM drains and commits; Docker's 10 s default may cut that short"


def test_everything_compose_mounts_or_builds_exists():
    for name, s in SERVICES.items():
        for host, _target in _mounts(s):
            assert host.exists(), f"service {name} mounts {host}, which is not in the repository"
        build = s.get("build")
        if isinstance(build, dict):
            context = (DOCKER / build["context"]).resolve()
            assert context == ROOT
            assert (context / build["dockerfile"]).is_file()
        for env_file in (
            s.get("env_file", [])
            if isinstance(s.get("env_file"), list)
            else [s.get("env_file")]
            if s.get("env_file")
            else []
        ):
            assert (DOCKER / env_file).is_file()
        for dep in s.get("depends_on", {}):
            assert dep in SERVICES, f"service {name} depends on unknown service {dep}"


def test_mirror_commands_are_real_cli_invocations():
    assert MIRROR_SERVICES, "no service builds docker/Dockerfile"
    commands = {}
    for name, s in MIRROR_SERVICES.items():
        path, ctx = _parse(_command(s))
        commands[path] = name
        assert str(ctx.params["config_path"]) == TOPOLOGY_IN_CONTAINER, f"service {name} must use the mounted topology"
        mounted = dict((target, host) for host, target in _mounts(s))
        assert mounted[TOPOLOGY_IN_CONTAINER] == DOCKER / "mirror.yaml"
    assert {"run", "canary run", "monitor"} <= set(commands)


def test_parser_rejects_what_the_cli_would_reject():
    """The check above is only worth something if a wrong command fails it."""
    with pytest.raises(click.UsageError):
        _parse(["run", "-c", TOPOLOGY_IN_CONTAINER, "--metrics-port", "99999"])
    with pytest.raises(click.UsageError):
        _parse(["monitor", "-c", TOPOLOGY_IN_CONTAINER, "--no-such-option"])
    with pytest.raises(click.UsageError):
        _parse(["canary", "run"])  # -c missing
    with pytest.raises(AssertionError):
        _parse(["mirrror", "-c", TOPOLOGY_IN_CONTAINER])


def test_daemons_serve_metrics_where_healthcheck_and_prometheus_look():
    image_port = int(_env_of_image()["MIRROR_METRICS_PORT"])
    for name, s in MIRROR_SERVICES.items():
        _path, ctx = _parse(_command(s))
        assert _metrics_port(ctx.params) == image_port, f"service {name}: the healthcheck probes port {image_port}"


def test_docker_topology_validates_and_uses_compose_names(capsys: pytest.CaptureFixture[str]):
    topology = DOCKER / "mirror.yaml"
    assert main(["validate", "--offline", "-c", str(topology)]) == 0
    capsys.readouterr()
    config = cfg.load(topology, env={})
    for name, cluster in config.clusters.items():
        for hostport in cluster.bootstrap.split(","):
            host, _, port = hostport.rpartition(":")
            assert host in SERVICES, f"cluster {name}: {host} is not a compose service"
            assert f"PLAINTEXT://{host}:{port}" in SERVICES[host]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    store = config.offset_store
    assert store.kind == "cassandra"  # replicas of the mirror share one offset map
    for point in store.contact_points:
        assert point.partition(":")[0] in SERVICES
    assert config.metrics.host == "0.0.0.0", "Prometheus scrapes from another container"
    assert config.metrics.port == int(_env_of_image()["MIRROR_METRICS_PORT"])


# ---------------------------------------------------------------------------- Dockerfile


def test_dockerfile_builds_a_non_root_mirror_image():
    instructions = _dockerfile_instructions()
    bases = _bases()
    assert bases and all(_pinned(b, "python:3.11-slim") for b in bases)
    users = [rest for word, rest in instructions if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    entrypoints = [rest for word, rest in instructions if word == "ENTRYPOINT"]
    assert json.loads(entrypoints[-1]) == ["mirror"]
    (health,) = [rest for word, rest in instructions if word == "HEALTHCHECK"]
    assert "/metrics" in health and "MIRROR_METRICS_PORT" in health
    for word, rest in instructions:
        if word == "COPY" and "--from" not in rest:
            *sources, _dest = rest.split()
            for src in sources:
                assert (ROOT / src).exists(), f"COPY {src}: not in the build context (the repository root)"
    # Everything pip needs to build the package is copied (pyproject's package-dir).
    copied = {src for word, rest in instructions if word == "COPY" for src in rest.split()[:-1]}
    assert {"pyproject.toml", "README.md", "src", "failover", "canary"} <= copied


def test_dockerignore_keeps_what_the_image_copies():
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text(encoding="utf-8").split()
    for needed in ("pyproject.toml", "README.md", "src/", "failover/", "canary/"):
        assert f"!{needed}" in ignore


def test_the_root_dockerignore_sends_only_what_the_images_copy():
    """Podman and Docker's classic builder read only the context root's .dockerignore."""
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert "*" in ignore
    kept = {line for line in ignore if line.startswith("!")}
    for dockerfile in ("Dockerfile", "Dockerfile.spark"):
        assert {
            line
            for line in (DOCKER / f"{dockerfile}.dockerignore").read_text(encoding="utf-8").split()
            if line.startswith("!")
        } <= kept


# ---------------------------------------------------------------------------- Prometheus


def test_prometheus_scrapes_the_compose_services_and_loads_the_alert_rules():
    prom = yaml.safe_load(PROMETHEUS.read_text(encoding="utf-8"))
    ports = {name: _metrics_port(_parse(_command(s))[1].params) for name, s in MIRROR_SERVICES.items()}
    scraped: set[str] = set()
    for job in prom["scrape_configs"]:
        targets = [t for sc in job.get("static_configs", []) for t in sc["targets"]]
        targets += [f"{n}:{sd['port']}" for sd in job.get("dns_sd_configs", []) for n in sd["names"]]
        assert targets, f"job {job['job_name']} has no targets"
        for target in targets:
            host, _, port = target.rpartition(":")
            assert host in SERVICES, f"job {job['job_name']}: {host} is not a compose service"
            assert int(port) == ports[host], f"job {job['job_name']}: {host} serves /metrics on {ports[host]}"
            scraped.add(host)
        if "scrape_timeout" in job:
            assert _seconds(job["scrape_timeout"]) <= _seconds(prom["global"]["scrape_interval"])
    assert set(MIRROR_SERVICES) <= scraped
    # The scaled service must be discovered by DNS: a static target reaches one replica.
    assert any("mirror" in sd["names"] for job in prom["scrape_configs"] for sd in job.get("dns_sd_configs", []))

    mounted = {target: host for host, target in _mounts(SERVICES["prometheus"])}
    assert mounted["/etc/prometheus/prometheus.yml"] == PROMETHEUS
    rule_targets = [t for t, h in mounted.items() if h == ROOT / "configs" / "alerts.yaml"]
    assert rule_targets, "configs/alerts.yaml is not mounted into Prometheus"
    assert any(PurePosixPath(rule_targets[0]).match(glob) for glob in prom["rule_files"])


def _seconds(duration: str) -> float:
    return cfg.parse_duration(duration)


# ---------------------------------------------------------------------------- Grafana


def test_grafana_provisioning_points_at_prometheus_and_the_dashboards():
    mounted = {target: host for host, target in _mounts(SERVICES["grafana"])}
    provisioning = mounted["/etc/grafana/provisioning"]
    (ds,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text(encoding="utf-8"))[
        "datasources"
    ]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "mirror.yaml").read_text(encoding="utf-8"))["providers"]
    assert mounted[provider["options"]["path"]] == DASHBOARDS
    assert list(DASHBOARDS.glob("*.json"))


_FUNCTIONS = {
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "topk",
    "bottomk",
    "quantile",
    "stddev",
    "group",
    "rate",
    "irate",
    "increase",
    "delta",
    "deriv",
    "histogram_quantile",
    "clamp_min",
    "clamp_max",
    "abs",
    "time",
    "vector",
    "scalar",
    "max_over_time",
    "min_over_time",
    "avg_over_time",
    "absent",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression (or a Grafana `label_values(...)` query) selects."""
    e = re.sub(r"label_values\(\s*([^,()]+?)\s*,\s*\w+\s*\)", r"\1", expr)
    e = re.sub(r'"(?:[^"\\]|\\.)*"', "", e)
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # range and subquery windows
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\$\w+", "", e)  # Grafana variables
    return {t for t in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", e) if t not in _FUNCTIONS}


def test_metric_name_extraction():
    assert metric_names(
        'histogram_quantile(0.99, sum by (flow, le) (rate(a_bucket{flow=~"$flow"}[$__rate_interval])))'
    ) == {"a_bucket"}
    assert metric_names("label_values(mirror_flow_status, flow)") == {"mirror_flow_status"}
    assert metric_names('count(up{job="mirror"} == 1) / on (flow) b') == {"up", "b"}


def _exported_series() -> set[str]:
    """Every series name the project's code exports, as Prometheus stores it."""
    from prometheus_client import CollectorRegistry

    from mirror import metrics as m

    registry = CollectorRegistry()
    m.RunMetrics.create(registry)
    m.CanaryMetrics(registry)
    m.MonitorMetrics(registry)
    families = list(registry.collect())
    families += [getattr(m, n)() for n in dir(m) if n.endswith("_family") and callable(getattr(m, n))]
    names: set[str] = set()
    for f in families:
        if f.type == "counter":
            names.add(f"{f.name}_total")
        elif f.type == "histogram":
            names |= {f"{f.name}{s}" for s in ("_bucket", "_sum", "_count")}
        else:
            names.add(f.name)
    # Families built elsewhere at scrape time (monitor, offset-map recorder, lag).
    for py in [
        *(ROOT / "src" / "mirror").glob("*.py"),
        *(ROOT / "canary").glob("*.py"),
        *(ROOT / "failover").glob("*.py"),
    ]:
        for kind, name in re.findall(
            r"\b(Counter|CounterMetricFamily|Gauge|GaugeMetricFamily|Histogram)\(\s*\"(mirror_\w+)\"",
            py.read_text(encoding="utf-8"),
        ):
            if kind.startswith("Counter"):
                names.add(f"{name}_total")
            elif kind == "Histogram":
                names |= {f"{name}{s}" for s in ("_bucket", "_sum", "_count")}
            else:
                names.add(name)
    return names


def test_design_metric_names_are_exported():
    assert DESIGN_SERIES <= _exported_series()


def _queries(dashboard: dict[str, Any]) -> list[str]:
    out = []

    def panels(items: list[dict[str, Any]]) -> None:
        for p in items:
            out.extend(t["expr"] for t in p.get("targets", []) if t.get("expr"))
            panels(p.get("panels", []))

    panels(dashboard.get("panels", []))
    for var in dashboard.get("templating", {}).get("list", []):
        q = var.get("query")
        if var.get("type") == "query":
            out.append(q["query"] if isinstance(q, dict) else q)
    return out


@pytest.mark.parametrize("path", sorted(DASHBOARDS.glob("*.json")), ids=lambda p: p.name)
def test_dashboard_queries_only_exported_metrics(path: Path):
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    queried = set().union(*(metric_names(q) for q in _queries(dashboard)))
    unknown = queried - _exported_series() - PROMETHEUS_SERIES
    assert not unknown, f"{path.name} queries metrics nobody exports: {sorted(unknown)}"
    # The panels an SRE opens it for: lag, status, throughput, canary, checkpoints.
    wanted = {
        "mirror_replication_lag_records",
        "mirror_replication_lag_seconds",
        "mirror_flow_status",
        "mirror_records_total",
        "mirror_bytes_total",
        "mirror_canary_latency_seconds_bucket",
        "mirror_canary_lost_total",
        "mirror_canary_duplicated_total",
        "mirror_group_checkpoint_age_seconds",
    }
    assert wanted <= queried, f"{path.name} has no panel for {sorted(wanted - queried)}"
    quantiles = {float(q) for e in _queries(dashboard) for q in re.findall(r"histogram_quantile\(\s*([0-9.]+)", e)}
    assert {0.5, 0.99} <= quantiles


def test_dashboard_panels_use_a_provisioned_datasource():
    ds_uids = {
        d["uid"]
        for d in yaml.safe_load(
            (DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text(encoding="utf-8")
        )["datasources"]
    }
    for path in DASHBOARDS.glob("*.json"):
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        variables = {
            v["name"] for v in dashboard.get("templating", {}).get("list", []) if v.get("type") == "datasource"
        }
        for p in dashboard["panels"]:
            if p["type"] == "row":
                continue
            uid = p["datasource"]["uid"]
            assert uid in ds_uids or uid.strip("${}") in variables, (
                f"{path.name}: panel {p['title']!r} uses datasource {uid}"
            )


# ------------------------------------------------------------ promtool (a project dependency: make setup)


@pytest.fixture(scope="module")
def promtool() -> str:
    import shutil

    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: run `make setup` (installs the Debian package prometheus)")
    return path


def test_prometheus_config_passes_promtool_with_the_alert_rules(promtool: str, tmp_path: Path):
    """promtool reads prometheus.yml as the container would, rules file included."""
    import subprocess

    prom = yaml.safe_load(PROMETHEUS.read_text(encoding="utf-8"))
    prom["rule_files"] = [str(ROOT / "configs" / "alerts.yaml")]  # where the mount puts it, here
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(prom), encoding="utf-8")
    out = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_dashboard_queries_are_valid_promql(promtool: str, tmp_path: Path):
    """Each panel's query, with Grafana's variables filled in, parsed by promtool as a recording rule."""
    import subprocess

    grafana_vars = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "$flow": ".*"}
    rules = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for i, expr in enumerate(_queries(json.loads(path.read_text(encoding="utf-8")))):
            if expr.startswith("label_values("):
                continue  # a Grafana function, not PromQL
            for var, value in grafana_vars.items():
                expr = expr.replace(var, value)
            assert "$" not in expr, f"{path.name}: unknown Grafana variable in {expr!r}"
            rules.append({"record": f"dashboard:{path.stem}:{i}", "expr": expr})
    rules_file = tmp_path / "dashboard_rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    out = subprocess.run([promtool, "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


# ---------------------------------------------------------------------------- Spark profile

SPARK_DOCKERFILE = DOCKER / "Dockerfile.spark"
SPARK_SERVICES = {name: s for name, s in SERVICES.items() if "spark" in s.get("profiles", [])}


def test_the_spark_profile_is_optional_and_complete():
    assert set(SPARK_SERVICES) == {"spark-master", "spark-worker", "mirror-spark"}
    for name, s in SPARK_SERVICES.items():
        assert s["build"]["dockerfile"] == "docker/Dockerfile.spark" and s["image"] == "mirror:dev-spark", name
    # `docker compose up` without the profile starts none of it, and needs none of it.
    for name, s in SERVICES.items():
        if name not in SPARK_SERVICES:
            assert not set(s.get("depends_on", {})) & set(SPARK_SERVICES), (
                f"{name} depends on the optional Spark profile"
            )


def test_spark_master_and_worker_start_as_the_dev_cluster_does():
    """spark-class with the Master / Worker classes `mirror dev up --spark` uses, from the
    image's pyspark; the worker joins the master's service name and port."""
    home = _env_of_image(SPARK_DOCKERFILE)["SPARK_HOME"]
    dev_source = (ROOT / "src" / "mirror" / "devenv" / "spark.py").read_text(encoding="utf-8")
    master, worker = SPARK_SERVICES["spark-master"], SPARK_SERVICES["spark-worker"]
    for s in (master, worker):
        assert s["entrypoint"] == [f"{home}/bin/spark-class"]
        assert f'"{_command(s)[0]}"' in dev_source, f"{_command(s)[0]} is not what mirror dev up --spark starts"
    m = _command(master)
    assert m[m.index("--host") + 1] == "spark-master" == master["hostname"]
    assert f"spark://spark-master:{m[m.index('--port') + 1]}" == _command(worker)[-1]


def test_the_spark_driver_runs_the_command_the_tests_run():
    """`mirror spark run` (tests/integration/test_spark.py's SparkRun) on the mounted
    topology's flow, at the profile's master, serving metrics where the image says."""
    s = SPARK_SERVICES["mirror-spark"]
    assert "entrypoint" not in s  # the image's: `mirror`
    path, ctx = _parse(_command(s))
    assert path == "spark run"
    assert '"spark", "run", "-c"' in (ROOT / "tests" / "integration" / "test_spark.py").read_text(encoding="utf-8")
    assert str(ctx.params["config_path"]) == TOPOLOGY_IN_CONTAINER
    assert dict((t, h) for h, t in _mounts(s))[TOPOLOGY_IN_CONTAINER] == DOCKER / "mirror.yaml"
    config = cfg.load(DOCKER / "mirror.yaml", env={})
    assert ctx.params["flow_name"] in {f.name for f in config.flows}
    m = _command(SPARK_SERVICES["spark-master"])
    assert ctx.params["master"] == f"spark://spark-master:{m[m.index('--port') + 1]}"
    assert ctx.params["metrics_port"] == int(_env_of_image(SPARK_DOCKERFILE)["MIRROR_METRICS_PORT"])
    assert s["hostname"] == "mirror-spark"  # executors connect back to the driver by this name


def test_the_spark_image_has_the_pinned_pyspark_and_its_connector():
    instructions = _dockerfile_instructions(SPARK_DOCKERFILE)
    bases = _bases(SPARK_DOCKERFILE)
    assert bases[0] == bases[-1] and _pinned(bases[0], "python:3.11-slim")
    assert _pinned(bases[1], "maven:3.9-eclipse-temurin-17")
    users = [rest for word, rest in instructions if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert json.loads([rest for word, rest in instructions if word == "ENTRYPOINT"][-1]) == ["mirror"]
    for word, rest in instructions:
        if word == "COPY" and "--from" not in rest:
            for src in rest.split()[:-1]:
                assert (ROOT / src).exists(), f"COPY {src}: not in the build context"
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    version = re.search(r'spark = \["pyspark==([\d.]+)"', pyproject).group(1)  # type: ignore[union-attr]
    assert f"<spark.version>{version}</spark.version>" in (ROOT / "deps" / "spark" / "pom.xml").read_text(
        encoding="utf-8"
    )
    env = _env_of_image(SPARK_DOCKERFILE)
    jars = [rest.split()[-1] for word, rest in instructions if word == "COPY" and "--from=jars" in rest]
    assert jars[-1] == f"{env['MIRROR_CACHE']}/spark-{version}/jars"  # the runtime stage's: where connector_jars looks
    assert any("deps/spark/pom.xml" in rest for word, rest in instructions if word == "COPY")
    assert any("'.[spark]'" in rest for word, rest in instructions if word == "RUN")
    ignore = (DOCKER / "Dockerfile.spark.dockerignore").read_text(encoding="utf-8").split()
    for needed in ("pyproject.toml", "README.md", "src/", "failover/", "canary/", "deps/spark/pom.xml"):
        assert f"!{needed}" in ignore


def test_the_spark_image_has_the_jvm_writer_where_the_driver_looks():
    """Built by the Maven command `make setup` runs (jvm/writer/pom.xml), copied to the path
    the image's $MIRROR_SPARK_WRITER_JAR names (`mirror.spark.session.writer_jar`)."""
    from mirror.spark.session import JAR_ENV, JAR_NAME

    build = "-f jvm/writer/pom.xml -DskipTests package"
    instructions = _dockerfile_instructions(SPARK_DOCKERFILE)
    assert _pinned(_bases(SPARK_DOCKERFILE)[2], "maven:3.9-eclipse-temurin-17")
    assert any(f"mvn -q -B {build}" in rest for word, rest in instructions if word == "RUN")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "MVN := mvn -q -B\n" in makefile and f"$(MVN) {build}\n" in makefile
    copied = [rest.split()[-1] for word, rest in instructions if word == "COPY" and "--from=writer" in rest]
    assert copied == [_env_of_image(SPARK_DOCKERFILE)[JAR_ENV]] and copied[0].endswith(f"/{JAR_NAME}")
    ignore = (DOCKER / "Dockerfile.spark.dockerignore").read_text(encoding="utf-8").split()
    assert "!jvm/writer/" in ignore


def test_the_jvm_writer_takes_its_spark_version_from_the_connectors_pom():
    """One definition: the writer's pom has deps/spark/pom.xml as its parent and names Spark's
    artifacts by its `spark.version` (kafka-clients comes through the connector), all provided."""
    import xml.etree.ElementTree as ET

    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    writer = ET.parse(ROOT / "jvm" / "writer" / "pom.xml").getroot()
    deps = ET.parse(ROOT / "deps" / "spark" / "pom.xml").getroot()
    parent = writer.find("m:parent", ns)
    assert parent is not None and parent.findtext("m:relativePath", namespaces=ns) == "../../deps/spark/pom.xml"
    assert parent.findtext("m:artifactId", namespaces=ns) == deps.findtext("m:artifactId", namespaces=ns)
    assert writer.find("m:properties/m:spark.version", ns) is None
    for dep in writer.findall("m:dependencies/m:dependency", ns):
        group, scope = dep.findtext("m:groupId", namespaces=ns), dep.findtext("m:scope", namespaces=ns)
        if group == "org.apache.spark":
            assert (dep.findtext("m:version", namespaces=ns), scope) == ("${spark.version}", "provided")
        else:
            assert scope == "test" and group != "org.apache.kafka"


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, SPARK_DOCKERFILE], ids=lambda p: p.name)
def test_a_run_that_mounts_a_stage_is_rebuilt_when_the_stage_changes(dockerfile: Path):
    """Podman's layer cache keys a RUN on its text and the layers under it, not on what it
    bind-mounts: a stage a RUN mounts must also be copied from earlier in the same stage (a
    file that changes with what is mounted), or a rebuild keeps a stale install."""
    copied: set[str] = set()
    for word, rest in _dockerfile_instructions(dockerfile):
        if word == "FROM":
            copied = set()
        elif word == "COPY":
            copied |= set(re.findall(r"--from=(\w+)", rest))
        elif word == "RUN":
            mounted = set(re.findall(r"type=bind,from=(\w+)", rest))
            assert mounted <= copied, f"RUN {rest[:70]}...: mounts {sorted(mounted - copied)}, copies nothing from it"


# ---------------------------------------------------------------------------- stand-ins


def _upstream_name(reference: str) -> str:
    """`docker.io/library/python:3.11-slim` -> `python:3.11-slim`, as compose and FROM write it."""
    return reference.removeprefix("docker.io/").removeprefix("library/")


def test_every_upstream_image_the_container_test_runs_has_a_stand_in():
    """A version bump in compose.yaml or a Dockerfile must bump the stand-in's tag too, or
    the container test would build against an image nobody pinned."""
    script = (DOCKER / "standins" / "podman.sh").read_text(encoding="utf-8")
    calls = re.findall(r"^\s*standin (\S+) (\S+)", script, re.M)
    assert all((DOCKER / "standins" / file).exists() for _image, file in calls)
    standins = {_upstream_name(image) for image, _file in calls}
    used = {s["image"] for s in SERVICES.values() if "build" not in s and not s["image"].startswith("grafana/")}
    used |= {b.split("@")[0] for b in _bases() + _bases(SPARK_DOCKERFILE)}
    assert used == standins
