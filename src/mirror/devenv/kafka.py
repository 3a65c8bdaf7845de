"""Real Apache Kafka (and Cassandra) clusters on 127.0.0.1, for development, demos and tests.

Each Kafka cluster is one JVM running a combined KRaft broker+controller from the jars
`make setup` fetched from Maven Central. Everything a cluster owns lives under
`HOME/NAME/`: `server.properties`, `data/`, `kafka.log`, `kafka.pid`. `down` and `stop`
signal only pids whose command line names that cluster's own properties file, so they
never touch a process they did not start.

The test fixtures call this same module, so what the tests run is what `mirror dev up`
runs.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mirror.config import ClusterConfig, Config
from mirror.devenv.cassandra import CassandraNode
from mirror.devenv.common import (
    CACHE,
    START_TIMEOUT,
    java,
    owned_pid,
    require_free_ports,
    spawn_detached,
    stop_owned,
    wait_started,
)
from mirror.devenv.security import Material, Security, password_var
from mirror.devenv.spark import SparkDev
from mirror.domain.acls import COMMANDS, cluster_bindings, required_grants
from mirror.errors import DevClusterError, MirrorError
from mirror.kafka import Admin

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.1.1"
DEFAULT_HOME = Path(".mirror/dev")
DEFAULT_BASE_PORT = 19092
PORT_STEP = 100  # cluster i listens on base + 100*i; its controller on base + 100*i + 1


def default_heap() -> str:
    """A shared 2-core machine runs several brokers next to the mirror: keep the heap small
    (MIRROR_DEV_HEAP overrides; read at start, not at import)."""
    return os.environ.get("MIRROR_DEV_HEAP", "384m")


def kafka_libs() -> Path:
    libs = Path(os.environ.get("MIRROR_KAFKA_LIBS", CACHE / f"kafka-{KAFKA_VERSION}" / "libs"))
    if not (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        raise DevClusterError(
            f"Apache Kafka {KAFKA_VERSION} jars not found in {libs}",
            hint="run `make setup` to fetch them from Maven Central",
        )
    return libs


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    port: int
    home: Path

    @property
    def controller_port(self) -> int:
        return self.port + 1

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def dir(self) -> Path:
        return self.home / self.name

    @property
    def props(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.dir / "kafka.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / "kafka.pid"


def specs(names: Sequence[str], base_port: int, home: Path) -> list[ClusterSpec]:
    return [ClusterSpec(n, base_port + PORT_STEP * i, home.resolve()) for i, n in enumerate(names)]


# ---------------------------------------------------------------------------- kafka

# log4j2 for the JVMs this project starts (brokers; MirrorMaker 2 in bench/): plain lines to one file.
LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def server_properties(spec: ClusterSpec, broker_config: Mapping[str, str] | None = None, security: str = "") -> str:
    """Kafka's own defaults (auto-created topics included, as on most production clusters),
    except what one loopback node needs; `broker_config` lines come last and win.
    `security`: the listener lines of a secured broker (`Material.server_properties`)."""
    extra = "".join(f"{k}={v}\n" for k, v in (broker_config or {}).items())
    listeners = (
        security
        or f"""\
listeners=PLAINTEXT://127.0.0.1:{spec.port},CONTROLLER://127.0.0.1:{spec.controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{spec.port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
"""
    )
    return f"""\
# Written by `mirror dev`: one combined KRaft broker+controller on loopback.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{spec.controller_port}
{listeners}log.dirs={spec.dir / "data"}
# Single node: internal topics cannot have more than one replica.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
num.partitions=1
log.retention.hours=-1
{"# --broker-config" + chr(10) + extra if extra else ""}"""


def _cluster_id(name: str) -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaNode:
    """One dev Kafka cluster: format, start, stop, readiness."""

    def __init__(
        self,
        spec: ClusterSpec,
        heap: str | None = None,
        broker_config: Mapping[str, str] | None = None,
        security: Security | str = Security.PLAINTEXT,
        extra_security: Sequence[Security | str] = (),
    ) -> None:
        self.spec = spec
        self.heap = heap or default_heap()
        self.broker_config = dict(broker_config or {})
        self.security = Security(security)
        self.material = Material(spec.home)
        # More client listeners of other protocols, on port + 2, + 3, ... (tests: one
        # cluster pair serves ssl, sasl_plaintext and sasl_ssl clients).
        extra = [Security(m) for m in extra_security if Security(m) not in (self.security, Security.PLAINTEXT)]
        self.extra_ports = {m: spec.port + 2 + i for i, m in enumerate(extra)}

    def bootstrap(self, mode: Security | str | None = None) -> str:
        m = self.security if mode is None else Security(mode)
        return self.spec.bootstrap if m is self.security else f"127.0.0.1:{self.extra_ports[m]}"

    def client(
        self, user: str = "admin", *, with_password: bool = False, mode: Security | str | None = None
    ) -> dict[str, str | int | float | bool]:
        """librdkafka settings for a dev user on this cluster (none for plaintext)."""
        m = self.security if mode is None else Security(mode)
        if m is Security.PLAINTEXT:
            return {}
        pw = self.material.passwords()[user] if with_password else None
        return dict(self.material.client(m, user, password=pw))

    def pid(self) -> int | None:
        return owned_pid(self.spec.pid_file, str(self.spec.props))

    def _prepare(self) -> None:
        d = self.spec.dir
        d.mkdir(parents=True, exist_ok=True)
        secured = ""
        if self.security is not Security.PLAINTEXT:
            self.material.ensure()
            secured = self.material.server_properties(
                self.security, self.spec.port, self.spec.controller_port, self.extra_ports
            )
        # 0600: a secured broker's file holds the admin password.
        fd = os.open(self.spec.props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(server_properties(self.spec, self.broker_config, secured))
        (d / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        if not (d / "data" / "meta.properties").exists():
            # SCRAM users exist from the first moment (KIP-900), so the broker can authenticate
            # itself and the admin before any API is up.
            scram = self.material.scram_args() if self.security.sasl else []
            out = subprocess.run(
                [
                    java(),
                    "-Xmx256m",
                    "-cp",
                    f"{kafka_libs()}/*",
                    f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}",
                    "kafka.tools.StorageTool",
                    "format",
                    f"--cluster-id={_cluster_id(self.spec.name)}",
                    "-c",
                    str(self.spec.props),
                    *scram,
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if out.returncode != 0:
                # The output may quote the arguments (passwords): show only the last line of it.
                tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or [""]
                shown = tail[0] if not scram else "see the format command's output (not shown: it may quote passwords)"
                raise DevClusterError(f"cannot format storage of cluster {self.spec.name!r}: {shown[-500:]}")

    def start(self) -> int:
        """Start the JVM (detached) and return its pid; readiness is `wait_ready`'s job."""
        require_free_ports(
            (self.spec.port, self.spec.controller_port, *self.extra_ports.values()), f"cluster {self.spec.name!r}"
        )
        self._prepare()
        d = self.spec.dir
        cmd = [
            java(),
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={d}",
            "-cp",
            f"{kafka_libs()}/*",
            "kafka.Kafka",
            str(self.spec.props),
        ]
        proc = spawn_detached(cmd, log_file=self.spec.log_file, pid_file=self.spec.pid_file, cwd=d)
        log.info("started kafka %s pid=%d on %s", self.spec.name, proc.pid, self.spec.bootstrap)
        return proc.pid

    def _admin(self) -> Admin:
        return Admin(
            f"dev-{self.spec.name}",
            ClusterConfig(bootstrap=self.spec.bootstrap, client=self.client(with_password=True), timeout=2.0),
        )

    def ready(self) -> bool:
        """The broker answers metadata and has a live broker registered."""
        try:
            return self._admin().broker_count() > 0
        except MirrorError:
            return False

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        wait_started(
            f"kafka cluster {self.spec.name!r}",
            pid_file=self.spec.pid_file,
            log_file=self.spec.log_file,
            ready=lambda: self.ready() and self._probe_topic(),
            timeout=timeout,
            interval=0.3,
        )

    def _probe_topic(self) -> bool:
        """Create and delete a topic: the controller is elected and accepts metadata writes."""
        admin = Admin(
            f"dev-{self.spec.name}",
            ClusterConfig(bootstrap=self.spec.bootstrap, client=self.client(with_password=True), timeout=15.0),
        )
        try:
            admin.create_topic("__mirror_dev_probe", 1, 1)
            admin.delete_topics(["__mirror_dev_probe"])
            return True
        except MirrorError:
            return False

    def stop(self, *, kill: bool = False) -> bool:
        pid = self.pid()
        if not stop_owned(pid, self.spec.pid_file, kill=kill):
            return False
        log.info("stopped kafka %s (pid %d)", self.spec.name, pid)
        return True


# ---------------------------------------------------------------------------- the set


@dataclass
class UpResult:
    started: list[str]
    already_running: list[str]
    status: dict


class DevClusters:
    """The clusters (and optional Cassandra) under one home directory."""

    STATE = "state.json"

    def __init__(self, home: Path | str = DEFAULT_HOME) -> None:
        self.home = Path(home).resolve()

    # state.json remembers names and ports so that `status` and `down` need no flags.
    def _state(self) -> dict:
        try:
            return json.loads((self.home / self.STATE).read_text())
        except (OSError, ValueError):
            return {"clusters": {}, "cassandra": None, "spark": None}

    def _save(self, state: dict) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / self.STATE).write_text(json.dumps(state, indent=2))

    def nodes(self) -> list[KafkaNode]:
        state = self._state()
        return [
            KafkaNode(
                ClusterSpec(n, c["port"], self.home),
                broker_config=c.get("broker_config"),
                security=c.get("security", "plaintext"),
                extra_security=c.get("extra_security", ()),
            )
            for n, c in state["clusters"].items()
        ]

    def node(self, name: str) -> KafkaNode:
        for n in self.nodes():
            if n.spec.name == name:
                return n
        raise DevClusterError(f"no dev cluster named {name!r} under {self.home}")

    def up(
        self,
        names: Sequence[str],
        base_port: int = DEFAULT_BASE_PORT,
        *,
        cassandra: bool = False,
        heap: str | None = None,
        broker_config: Mapping[str, str] | None = None,
        security: Security | str = Security.PLAINTEXT,
        extra_security: Sequence[Security | str] = (),
        spark: bool = False,
        spark_workers: int = 1,
    ) -> UpResult:
        """Start the named clusters; `broker_config` lines are added to every broker's
        server.properties (and remembered, so a restart of the node keeps them)."""
        state = self._state()
        started: list[str] = []
        running: list[str] = []
        nodes = [
            KafkaNode(s, heap, broker_config, security, extra_security) for s in specs(names, base_port, self.home)
        ]
        self._check_prior(state, nodes)
        try:
            self._start_kafka(state, nodes, started, running)
            if cassandra:
                self._start_cassandra(state, base_port, security, started, running)
            if spark:
                self._start_spark(state, base_port, spark_workers, started, running)
        except BaseException:
            # Leave nothing half-started behind: stop what this call started.
            for node in nodes:
                if node.spec.name in started:
                    node.stop(kill=True)
            if "cassandra" in started:
                CassandraNode(self.home, base_port - 50).stop(kill=True)
            if any(s.startswith("spark-") for s in started):
                SparkDev(self.home, base_port).stop(kill=True)
            raise
        return UpResult(started, running, self.status())

    def _check_prior(self, state: dict, nodes: Sequence[KafkaNode]) -> None:
        """Refuse to start a cluster with another security mode than its data was formatted
        with, or on another port than where it already runs."""
        for node in nodes:
            prior = state["clusters"].get(node.spec.name)
            if (
                prior
                and prior.get("security", "plaintext") != node.security.value
                and (node.spec.dir / "data").exists()
            ):
                raise DevClusterError(
                    f"cluster {node.spec.name!r} was formatted with --security "
                    f"{prior.get('security', 'plaintext')}, not {node.security.value}",
                    hint="use another --home, or remove its data with `mirror dev down` and deleting the home",
                )
            if prior and prior["port"] != node.spec.port:
                old = KafkaNode(ClusterSpec(node.spec.name, prior["port"], self.home))
                if old.pid() is not None:
                    raise DevClusterError(
                        f"cluster {node.spec.name!r} already runs on port {prior['port']}, not {node.spec.port}",
                        hint="run `mirror dev down` first to move it",
                    )

    def _start_kafka(self, state: dict, nodes: Sequence[KafkaNode], started: list[str], running: list[str]) -> None:
        """Start the brokers not running yet, each remembered as soon as it is started; wait for all."""
        for node in nodes:
            if node.pid() is not None:
                running.append(node.spec.name)
                continue
            node.start()
            started.append(node.spec.name)
            state["clusters"][node.spec.name] = {
                "port": node.spec.port,
                "bootstrap": node.spec.bootstrap,
                "broker_config": node.broker_config,
                "security": node.security.value,
                "extra_security": [m.value for m in node.extra_ports],
            }
            self._save(state)
        for node in nodes:
            node.wait_ready()

    def _start_cassandra(
        self, state: dict, base_port: int, security: Security | str, started: list[str], running: list[str]
    ) -> None:
        # With --security the store is secured too: PasswordAuthenticator, and a
        # `mirror` role with the mirror user's password.
        auth = Security(security) is not Security.PLAINTEXT
        cas = CassandraNode(self.home, base_port - 50, auth=auth)
        if cas.pid() is None:
            cas.start()
            started.append("cassandra")
        else:
            running.append("cassandra")
        state["cassandra"] = {"port": cas.port, "contact_point": cas.contact_point, "auth": auth}
        self._save(state)
        cas.wait_ready()
        if auth:
            cas.create_role("mirror", Material(self.home).passwords()["mirror"])

    def _start_spark(self, state: dict, base_port: int, workers: int, started: list[str], running: list[str]) -> None:
        sp = SparkDev(self.home, base_port, workers)
        new = sp.start()
        started += new
        if not new:
            running.append("spark")
        state["spark"] = {
            "base_port": base_port,
            "master": sp.master_url,
            "workers": max(workers, (state.get("spark") or {}).get("workers", 1)),
        }
        self._save(state)
        sp.wait_ready()

    def status(self) -> dict:
        """The `dev status --json` shape of docs/design.md, plus liveness for people."""
        state = self._state()
        clusters = {}
        for node in self.nodes():
            clusters[node.spec.name] = {
                "bootstrap": node.spec.bootstrap,
                "running": node.pid() is not None,
                "pid": node.pid(),
                "log": str(node.spec.log_file),
                "security": node.security.value,
                # The mirror user's librdkafka settings; the password as ${VAR}, its value in `passwords`.
                "client": node.client("mirror"),
            }
        cas = None
        if state.get("cassandra"):
            cnode = CassandraNode(self.home, state["cassandra"]["port"])
            cas = {
                "contact_point": cnode.contact_point,
                "running": cnode.pid() is not None,
                "pid": cnode.pid(),
                "log": str(cnode.log_file),
            }
            if state["cassandra"].get("auth"):
                cas.update(username="mirror", password=f"${{{password_var('mirror')}}}")
        secured = any(n.security is not Security.PLAINTEXT for n in self.nodes())
        passwords = str(Material(self.home).passwords_file) if secured else None
        sp = None
        if state.get("spark"):
            dev = SparkDev(self.home, state["spark"]["base_port"], state["spark"].get("workers", 1))
            sp = {
                "master": dev.master_url,
                "running": dev.running(),
                "pid": dev.pid("master"),
                "log": str(dev.dir),
                "workers": dev.workers,
            }
        return {"clusters": clusters, "cassandra": cas, "spark": sp, "passwords": passwords}

    def admin(self, name: str) -> Admin:
        """An admin client logged in as the dev admin (a super user) on one cluster."""
        node = self.node(name)
        return Admin(
            f"dev-{name}",
            ClusterConfig(bootstrap=node.spec.bootstrap, client=node.client("admin", with_password=True), timeout=15.0),
        )

    def grant(self, config: Config, user: str = "mirror", commands: Sequence[str] = COMMANDS) -> dict[str, int]:
        """Grant `user` what `mirror acls` lists for `config` (all commands unless narrowed),
        on each config cluster that is one of these dev clusters (matched by bootstrap).
        Returns cluster -> ACLs created."""
        by_bootstrap = {n.bootstrap(m): n.spec.name for n in self.nodes() for m in (n.security, *n.extra_ports)}
        grants = required_grants(config, commands)
        out = {}
        for name, cluster in config.clusters.items():
            dev = by_bootstrap.get(cluster.bootstrap)
            if dev is not None and self.node(dev).security is not Security.PLAINTEXT:
                bindings = {(r.kind, r.name, r.pattern): ops for r, ops in cluster_bindings(grants, name).items()}
                out[name] = self.admin(dev).create_acls(f"User:{user}", bindings)
        return out

    def down(self) -> list[str]:
        stopped = [n.spec.name for n in self.nodes() if n.stop()]
        state = self._state()
        if state.get("cassandra"):
            if CassandraNode(self.home, state["cassandra"]["port"]).stop():
                stopped.append("cassandra")
        if state.get("spark"):
            stopped += SparkDev(self.home, state["spark"]["base_port"]).stop()
        return stopped
