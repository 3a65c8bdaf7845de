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
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import DevClusterError

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.1.1"
CACHE = Path(os.environ.get("MIRROR_CACHE", Path.home() / ".cache" / "mirror"))
DEFAULT_HOME = Path(".mirror/dev")
DEFAULT_BASE_PORT = 19092
PORT_STEP = 100  # cluster i listens on base + 100*i; its controller on base + 100*i + 1
def default_heap() -> str:
    """A shared 2-core machine runs several brokers next to the mirror: keep the heap small
    (MIRROR_DEV_HEAP overrides; read at start, not at import)."""
    return os.environ.get("MIRROR_DEV_HEAP", "384m")
START_TIMEOUT = float(os.environ.get("MIRROR_DEV_START_TIMEOUT", "120"))


def kafka_libs() -> Path:
    libs = Path(os.environ.get("MIRROR_KAFKA_LIBS", CACHE / f"kafka-{KAFKA_VERSION}" / "libs"))
    if not (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        raise DevClusterError(f"Apache Kafka {KAFKA_VERSION} jars not found in {libs}", hint="run `make setup` to fetch them from Maven Central")
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


# ---------------------------------------------------------------------------- processes


def pid_alive(pid: int) -> bool:
    """True for a running process; a zombie child of ours counts as gone (and is reaped)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def owned_pid(pid_file: Path, marker: str) -> int | None:
    """The pid in `pid_file` if that process is alive and its command line names `marker`."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    if pid_alive(pid) and marker in _cmdline(pid):
        return pid
    return None


def started_alive(pid_file: Path) -> bool:
    """Is the process we started (pid in `pid_file`) still running?

    For readiness waits only, not ownership: while a child execs (setpriv, then java),
    /proc briefly shows an empty or foreign command line, and `owned_pid` would call a
    starting server dead.
    """
    try:
        return pid_alive(int(pid_file.read_text().strip()))
    except (OSError, ValueError):
        return False


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def terminate(pid: int, *, grace: float = 30.0, kill: bool = False) -> None:
    """SIGTERM (or SIGKILL) and wait until the process is gone; SIGKILL after `grace`."""
    try:
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while pid_alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
        time.sleep(0.1)


def spawn_prefix() -> list[str]:
    """A command prefix for dev servers started by test sessions.

    `mirror dev up` detaches its servers on purpose: they outlive the command. Test
    sessions set MIRROR_DEV_DIE_WITH_PARENT=1 so that a session killed before its teardown
    (a CI time-out) cannot leave JVMs behind: util-linux's `setpriv --pdeathsig` makes the
    kernel kill the server with the thread that started it. (Not a Python preexec_fn: code
    run between fork and exec in a process with librdkafka threads can crash the child.)
    """
    if os.environ.get("MIRROR_DEV_DIE_WITH_PARENT") == "1":
        setpriv = shutil.which("setpriv")
        if setpriv:
            return [setpriv, "--pdeathsig", "KILL", "--"]
    return []


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log written)"


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()


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


def _server_properties(spec: ClusterSpec) -> str:
    return f"""\
# Written by `mirror dev`: one combined KRaft broker+controller on loopback.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{spec.controller_port}
listeners=PLAINTEXT://127.0.0.1:{spec.port},CONTROLLER://127.0.0.1:{spec.controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{spec.port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={spec.dir / 'data'}
# Single node: internal topics cannot have more than one replica.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Tests and demos must see what the mirror created, not what a typo auto-created.
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
num.partitions=1
log.retention.hours=-1
"""


def _cluster_id(name: str) -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else "java"


class KafkaNode:
    """One dev Kafka cluster: format, start, stop, readiness."""

    def __init__(self, spec: ClusterSpec, heap: str | None = None) -> None:
        self.spec = spec
        self.heap = heap or default_heap()

    def pid(self) -> int | None:
        return owned_pid(self.spec.pid_file, str(self.spec.props))

    def _prepare(self) -> None:
        d = self.spec.dir
        d.mkdir(parents=True, exist_ok=True)
        self.spec.props.write_text(_server_properties(self.spec))
        (d / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        if not (d / "data" / "meta.properties").exists():
            out = subprocess.run(
                [_java(), "-Xmx256m", "-cp", f"{kafka_libs()}/*", f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}",
                 "kafka.tools.StorageTool", "format", f"--cluster-id={_cluster_id(self.spec.name)}", "-c", str(self.spec.props)],
                capture_output=True, text=True, timeout=120,
            )
            if out.returncode != 0:
                raise DevClusterError(f"cannot format storage of cluster {self.spec.name!r}: {(out.stderr or out.stdout).strip()[-500:]}")

    def start(self) -> int:
        """Start the JVM (detached) and return its pid; readiness is `wait_ready`'s job."""
        for port in (self.spec.port, self.spec.controller_port):
            if not port_free(port):
                raise DevClusterError(
                    f"port {port} on 127.0.0.1 is already in use (needed by cluster {self.spec.name!r})",
                    hint="stop what holds it, or pick other ports with --base-port",
                )
        self._prepare()
        d = self.spec.dir
        cmd = [
            *spawn_prefix(),
            _java(), f"-Xms{self.heap}", f"-Xmx{self.heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={d / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={d}", "-cp", f"{kafka_libs()}/*", "kafka.Kafka", str(self.spec.props),
        ]
        with open(self.spec.log_file, "ab") as logf:
            proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=d)
        self.spec.pid_file.write_text(str(proc.pid))
        log.info("started kafka %s pid=%d on %s", self.spec.name, proc.pid, self.spec.bootstrap)
        return proc.pid

    def ready(self) -> bool:
        """The broker answers metadata and has a live broker registered."""
        from confluent_kafka.admin import (
            AdminClient,  # dev tooling only; the data path uses mirror.kafka
        )

        try:
            md = AdminClient({"bootstrap.servers": self.spec.bootstrap, "logger": _Quiet()}).list_topics(timeout=2)
        except Exception:
            return False
        return len(md.brokers) > 0

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not started_alive(self.spec.pid_file):
                raise DevClusterError(f"kafka cluster {self.spec.name!r} exited during start; last lines of {self.spec.log_file}:\n{log_tail(self.spec.log_file)}")
            if self.ready() and self._probe_topic():
                return
            time.sleep(0.3)
        raise DevClusterError(f"kafka cluster {self.spec.name!r} not ready after {timeout:g}s; last lines of {self.spec.log_file}:\n{log_tail(self.spec.log_file)}")

    def _probe_topic(self) -> bool:
        """Create and delete a topic: the controller is elected and accepts metadata writes."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.spec.bootstrap, "logger": _Quiet()})
        name = "__mirror_dev_probe"
        try:
            fut = admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=10)[name]
            try:
                fut.result(timeout=15)
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    return False
            admin.delete_topics([name], operation_timeout=10)[name].result(timeout=15)
            return True
        except Exception:
            return False

    def stop(self, *, kill: bool = False) -> bool:
        pid = self.pid()
        if pid is None:
            return False
        terminate(pid, kill=kill)
        self.spec.pid_file.unlink(missing_ok=True)
        log.info("stopped kafka %s (pid %d)", self.spec.name, pid)
        return True


class _Quiet:
    def log(self, *args: object) -> None:
        pass


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
            return {"clusters": {}, "cassandra": None}

    def _save(self, state: dict) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / self.STATE).write_text(json.dumps(state, indent=2))

    def nodes(self) -> list[KafkaNode]:
        st = self._state()
        return [KafkaNode(ClusterSpec(n, c["port"], self.home)) for n, c in st["clusters"].items()]

    def node(self, name: str) -> KafkaNode:
        for n in self.nodes():
            if n.spec.name == name:
                return n
        raise DevClusterError(f"no dev cluster named {name!r} under {self.home}")

    def up(self, names: Sequence[str], base_port: int = DEFAULT_BASE_PORT, *, cassandra: bool = False, heap: str | None = None) -> UpResult:
        state = self._state()
        started, running = [], []
        nodes = [KafkaNode(s, heap) for s in specs(names, base_port, self.home)]
        for node in nodes:
            prior = state["clusters"].get(node.spec.name)
            if prior and prior["port"] != node.spec.port:
                old = KafkaNode(ClusterSpec(node.spec.name, prior["port"], self.home))
                if old.pid() is not None:
                    raise DevClusterError(
                        f"cluster {node.spec.name!r} already runs on port {prior['port']}, not {node.spec.port}",
                        hint="run `mirror dev down` first to move it",
                    )
        try:
            for node in nodes:
                if node.pid() is not None:
                    running.append(node.spec.name)
                    continue
                node.start()
                started.append(node.spec.name)
                state["clusters"][node.spec.name] = {"port": node.spec.port, "bootstrap": node.spec.bootstrap}
                self._save(state)
            for node in nodes:
                node.wait_ready()
            if cassandra:
                from .devcassandra import CassandraNode

                cas = CassandraNode(self.home, base_port - 50)
                if cas.pid() is None:
                    cas.start()
                    started.append("cassandra")
                else:
                    running.append("cassandra")
                state["cassandra"] = {"port": cas.port, "contact_point": cas.contact_point}
                self._save(state)
                cas.wait_ready()
        except BaseException:
            # Leave nothing half-started behind: stop what this call started.
            for node in nodes:
                if node.spec.name in started:
                    node.stop(kill=True)
            if "cassandra" in started:
                from .devcassandra import CassandraNode

                CassandraNode(self.home, base_port - 50).stop(kill=True)
            raise
        return UpResult(started, running, self.status())

    def status(self) -> dict:
        """DESIGN.md's `dev status --json` shape, plus liveness for people."""
        state = self._state()
        clusters = {}
        for node in self.nodes():
            clusters[node.spec.name] = {
                "bootstrap": node.spec.bootstrap,
                "running": node.pid() is not None,
                "pid": node.pid(),
                "log": str(node.spec.log_file),
            }
        cas = None
        if state.get("cassandra"):
            from .devcassandra import CassandraNode

            node = CassandraNode(self.home, state["cassandra"]["port"])
            cas = {"contact_point": node.contact_point, "running": node.pid() is not None, "pid": node.pid(), "log": str(node.log_file)}
        return {"clusters": clusters, "cassandra": cas}

    def down(self) -> list[str]:
        stopped = [n.spec.name for n in self.nodes() if n.stop()]
        state = self._state()
        if state.get("cassandra"):
            from .devcassandra import CassandraNode

            if CassandraNode(self.home, state["cassandra"]["port"]).stop():
                stopped.append("cassandra")
        return stopped
