"""One real Apache Cassandra node on 127.0.0.1, for development, demos and tests.

It runs the pinned `cassandra-all` jars `make setup` fetched from Maven Central with a
plain `java -cp`, the way `mirror.devenv.kafka` runs Kafka. Everything the node owns lives
under `HOME/cassandra/`: `cassandra.yaml`, `data/`, `cassandra.log`, `cassandra.pid`.
`stop` signals only a pid whose command line names this node's own yaml file.

Ports: the native (CQL) port is the one given; the internode storage port is the next
one. JMX is left off on purpose (no third port to clash, nothing here needs nodetool).
The settings trade durability of the *dev node itself* and features nobody uses here
(SASI/MV, hints, auto snapshots) for a start in well under a minute on a shared 2-core box.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path

from mirror.devenv.common import (
    CACHE,
    START_TIMEOUT,
    java,
    owned_pid,
    require_free_ports,
    spawn_detached,
    stop_owned,
    wait_started,
    wait_until,
)
from mirror.errors import DevClusterError, MirrorError

log = logging.getLogger(__name__)

CASSANDRA_VERSION = "5.0.6"
DEFAULT_HEAP = os.environ.get("MIRROR_DEV_CASSANDRA_HEAP", "768m")

# The module exports and opens Cassandra's own conf/jvm17-server.options lists: it reaches
# into JDK internals (Unsafe, direct buffers, attach, JMX) and refuses to start without them.
_JVM17 = [
    "-Djdk.attach.allowAttachSelf=true",
    "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports", "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens", "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
]

# Fast start of a single seed node: nothing to gossip with, so waiting for the ring to
# settle (30 s by default) only wastes time; one token is enough for one node.
_FAST_START = [
    "-Dcassandra.skip_wait_for_gossip_to_settle=0",
    "-Dcassandra.ring_delay_ms=100",
    "-Dcassandra.superuser_setup_delay_ms=0",
    "-Dcassandra.auto_bootstrap=false",
    "-Dcassandra-foreground=yes",  # otherwise the daemon closes stdout and its log is lost
]

_LOGBACK = """\
<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d %-5level [%thread] %logger{20}: %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="OUT"/></root>
  <logger name="org.apache.cassandra.utils.SigarLibrary" level="ERROR"/>
  <logger name="org.apache.cassandra.service.StartupChecks" level="ERROR"/>
</configuration>
"""


def cassandra_libs() -> Path:
    libs = Path(os.environ.get("MIRROR_CASSANDRA_LIBS", CACHE / f"cassandra-{CASSANDRA_VERSION}" / "libs"))
    if not (libs / f"cassandra-all-{CASSANDRA_VERSION}.jar").exists():
        raise DevClusterError(
            f"Apache Cassandra {CASSANDRA_VERSION} jars not found in {libs}",
            hint="run `make setup` to fetch them from Maven Central",
        )
    return libs


def _yaml(d: Path, port: int, storage_port: int, auth: bool = False) -> str:
    return f"""\
# Written by `mirror dev`: one Cassandra node on loopback, tuned for a fast start.
cluster_name: mirror-dev
num_tokens: 1
initial_token: 0
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:{storage_port}"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: {storage_port}
start_native_transport: true
native_transport_port: {port}
data_file_directories: [{d / 'data' / 'data'}]
commitlog_directory: {d / 'data' / 'commitlog'}
saved_caches_directory: {d / 'data' / 'saved_caches'}
hints_directory: {d / 'data' / 'hints'}
cdc_raw_directory: {d / 'data' / 'cdc_raw'}
# The offset store's durability promise holds on production clusters (replication);
# a dev node fsyncs its commit log in batches like a default install.
commitlog_sync: periodic
commitlog_sync_period: 2000ms
authenticator: {"PasswordAuthenticator" if auth else "AllowAllAuthenticator"}
authorizer: AllowAllAuthorizer
hinted_handoff_enabled: false
auto_snapshot: false
materialized_views_enabled: false
sasi_indexes_enabled: false
concurrent_reads: 4
concurrent_writes: 4
concurrent_counter_writes: 2
concurrent_compactors: 1
memtable_flush_writers: 1
dynamic_snitch: false
"""


class CassandraNode:
    """One dev Cassandra node under `home/cassandra`: start, stop, readiness."""

    def __init__(self, home: Path, port: int, heap: str = DEFAULT_HEAP, *, auth: bool = False) -> None:
        self.home = Path(home).resolve()
        self.port = port
        self.heap = heap
        # PasswordAuthenticator: the default superuser cassandra/cassandra creates roles
        # (`create_role`); clients log in with a username and password from the environment.
        self.auth = auth

    @property
    def storage_port(self) -> int:
        return self.port + 1

    @property
    def contact_point(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def dir(self) -> Path:
        return self.home / "cassandra"

    @property
    def config_file(self) -> Path:
        return self.dir / "cassandra.yaml"

    @property
    def log_file(self) -> Path:
        return self.dir / "cassandra.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / "cassandra.pid"

    def pid(self) -> int | None:
        return owned_pid(self.pid_file, str(self.config_file))

    def start(self) -> int:
        """Start the JVM (detached) and return its pid; readiness is `wait_ready`'s job."""
        require_free_ports((self.port, self.storage_port), "dev Cassandra")
        libs = cassandra_libs()
        d = self.dir
        (d / "triggers").mkdir(parents=True, exist_ok=True)
        for sub in ("data", "commitlog", "saved_caches", "hints", "cdc_raw"):
            (d / "data" / sub).mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(_yaml(d, self.port, self.storage_port, self.auth))
        (d / "logback.xml").write_text(_LOGBACK)
        cmd = [
            java(), f"-Xms{self.heap}", f"-Xmx{self.heap}", "-Xss512k",
            "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=100", "-XX:+AlwaysPreTouch",
            "-XX:TieredStopAtLevel=1",  # C1 only: most of start-up is class loading, not hot loops
            "-Djava.awt.headless=true",
            *_JVM17,
            *_FAST_START,
            f"-javaagent:{libs / 'jamm-0.4.0.jar'}",
            f"-Dcassandra.config=file://{self.config_file}",
            "-Dcassandra.superuser_setup_delay_ms=0",
            f"-Dcassandra.storagedir={d / 'data'}",
            f"-Dcassandra.logdir={d}",
            f"-Dcassandra.triggers_dir={d / 'triggers'}",
            f"-Dlogback.configurationFile={d / 'logback.xml'}",
            "-cp", f"{libs}/*",
            "org.apache.cassandra.service.CassandraDaemon",
        ]
        proc = spawn_detached(cmd, log_file=self.log_file, pid_file=self.pid_file, cwd=d)
        # Until the child has exec'ed java, /proc shows Python's command line and `pid()`
        # would call the node dead; wait for the exec (or the exit) before returning.
        wait_until(lambda: proc.poll() is not None or self.pid() is not None, 10.0, 0.05)
        log.info("started cassandra pid=%d on %s", proc.pid, self.contact_point)
        return proc.pid

    def ready(self) -> bool:
        """The native transport accepts connections (it is the last thing start-up opens)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def wait_ready(self, timeout: float = max(START_TIMEOUT, 180.0)) -> None:
        wait_started("cassandra", pid_file=self.pid_file, log_file=self.log_file, ready=self.ready, timeout=timeout, interval=0.5)

    def create_role(self, role: str, password: str) -> None:
        """A login role for the offset store (needs `auth`); retried while the superuser is set up."""
        from mirror.store.cassandra import ensure_role

        deadline = time.monotonic() + 120
        while True:
            try:
                ensure_role(self.contact_point, ("cassandra", "cassandra"), role, password)
                return
            except MirrorError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def stop(self, *, kill: bool = False) -> bool:
        pid = self.pid()
        if not stop_owned(pid, self.pid_file, kill=kill):
            return False
        log.info("stopped cassandra (pid %d)", pid)
        return True
