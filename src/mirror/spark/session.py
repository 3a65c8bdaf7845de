"""The Spark session a run mirrors on: where its jars are, the checks before it starts, its settings.

Kept apart from `mirror.spark.job` and light to import (no Kafka client, no config models,
no store): `mirror spark run` starts the session's JVM from here first of all, so the seconds
the JVM and the SparkContext take run beside the rest of the run's imports, its config and
its checks instead of after them (`start_session`).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from mirror.errors import MirrorError, UsageError
from mirror.spark.class_archive import DRIVER_OPTIONS, driver_options, java_binary
from mirror.spark.clients import REDACT, java_kafka_options
from mirror.spark.startup import SessionStart

if TYPE_CHECKING:
    from mirror.config import Config, FlowConfig

CACHE = Path(os.environ.get("MIRROR_CACHE", Path.home() / ".cache" / "mirror"))

JAR_NAME = "mirror-spark-writer.jar"
JAR_ENV = "MIRROR_SPARK_WRITER_JAR"  # where the jar is when not in the checkout's build/jvm


def writer_jar() -> Path | None:
    """The writer's jar for `spark.jars` / `--jars`: $MIRROR_SPARK_WRITER_JAR, else the one
    `make setup` built in the checkout (None: not built; the Python tasks mirror alone)."""
    named = os.environ.get(JAR_ENV)
    jar = Path(named) if named else Path(__file__).resolve().parents[3] / "build" / "jvm" / JAR_NAME
    return jar if jar.is_file() else None


def writer_jars() -> list[str]:
    """The writer's jar for `spark.jars` / `--jars`, when built."""
    jar = writer_jar()
    return [str(jar)] if jar is not None else []


def connector_jars(version: str) -> list[str]:
    """The Kafka connector jars `make setup` fetched for this pyspark version."""
    folder = CACHE / f"spark-{version}" / "jars"
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not any(f"spark-sql-kafka-0-10_2.13-{version}.jar" in j for j in jars):
        raise MirrorError(
            f"no Spark Kafka connector for pyspark {version} in {folder}",
            hint="pyspark and deps/spark/pom.xml must name the same version; run `make setup`",
        )
    return jars


def check_java() -> None:
    if java_binary() is None:
        raise MirrorError(
            "no Java found (JAVA_HOME unset and no `java` on PATH)", hint="Spark needs a Java 17 or 21 runtime"
        )


def check_master(master: str, timeout: float = 5.0) -> None:
    """A standalone master that does not accept connections fails here, not after Spark's minute of retries."""
    if not master.startswith("spark://"):
        return
    for hostport in master[len("spark://") :].split(","):
        u = urlparse(f"//{hostport}")
        try:
            with socket.create_connection((u.hostname or "", u.port or 7077), timeout=timeout):
                return
        except OSError:
            continue
    raise MirrorError(
        f"Spark master {master} does not answer", hint="check --master and that the master runs (mirror dev up --spark)"
    )


def check_local(config: Config, flow: FlowConfig, master: str) -> None:
    """What must hold before a flow's Spark session is started: Java, the master, the source options."""
    check_java()
    check_master(master)
    java_kafka_options(flow.source, config.clusters[flow.source].client)  # a setting Spark's source cannot take


LOCAL = "local[*]"  # the master when none is given

TASK_ATTEMPTS = 4  # Spark's spark.task.maxFailures default on a cluster


def with_task_retries(master: str, attempts: int = TASK_ATTEMPTS) -> str:
    """`local` / `local[N]` / `local[*]` as `local[N,attempts]`: local mode gives a task one
    attempt whatever spark.task.maxFailures says, so one transient failure (a leader moving,
    a slow flush) would end the run where a cluster retries. Retries are safe: a retried task
    skips what the target already holds (`mirror.spark.task`). Other masters as given."""
    if master == "local":
        return f"local[1,{attempts}]"
    if master.startswith("local[") and master.endswith("]") and "," not in master:
        return f"{master[:-1]},{attempts}]"
    return master


UI_PORT = 4040  # Spark's own default; a busy port makes Spark try the next ones (spark.port.maxRetries)


def spark_session(
    master: str,
    app: str,
    conf: Mapping[str, str] | None = None,
    *,
    quiet: bool = True,
    submitted: bool = False,
    ui_port: int | None = UI_PORT,
    class_archive: bool = True,
) -> Any:
    """A SparkSession with the Kafka connector from the cache; executors run this Python.

    `submitted`: spark-submit started this driver and its command line already says the
    master, the jars and the executors' Python (`mirror.spark.submit`); none is set here,
    so the executors keep the package they were given instead of this interpreter's path.

    The Spark UI is on (`ui_port`; None turns it off): the jobs, stages, executors and the
    Structured Streaming tab are where a Spark engineer looks first. It listens where the
    driver binds (loopback for a local master or cluster).

    The driver JVM this starts maps the class-data archive when one is built
    (`mirror.spark.cds`; `class_archive=False`: not, as when building it).
    """
    import pyspark
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.appName(app)
        .config("spark.task.maxFailures", str(TASK_ATTEMPTS))
        .config("spark.redaction.regex", REDACT)  # the JAAS line and a client key never in a log or plan
        .config("spark.ui.enabled", "false" if ui_port is None else "true")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
    )
    if not submitted:
        builder = _direct(builder, master, connector_jars(pyspark.__version__) + writer_jars())
    if ui_port is not None:
        builder = builder.config("spark.ui.port", str(ui_port))
    conf = dict(conf or {})
    options = driver_options(conf) if class_archive and not submitted else None
    if options is not None:
        conf[DRIVER_OPTIONS] = options
    for k, v in conf.items():
        builder = builder.config(k, v)
    # A speculative copy of a task would produce the same records alongside the original:
    # duplicates, and each one's contiguity check failing on the other's records.
    builder = builder.config("spark.speculation", "false")
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _direct(builder: Any, master: str, jars: list[str]) -> Any:
    """What spark-submit would otherwise say: the master, the jars and the executors' Python."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        builder.master(with_task_retries(master))
        .config("spark.jars", ",".join(jars))
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    )
    host = (
        urlparse(master.replace("spark://", "//").split(",")[0]).hostname
        if master.startswith("spark://")
        else "127.0.0.1"
    )
    if host in ("127.0.0.1", "localhost"):
        # Local mode, or a cluster on this host: the driver listens on loopback only (the
        # host name may resolve to an address nothing routes to).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    return builder


def submitted_master() -> str:
    """The master spark-submit was given, read from its JVM before any SparkContext connects."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # joins spark-submit's gateway (PYSPARK_GATEWAY_PORT)
    return str(SparkConf().get("spark.master", LOCAL))


def start_session(master: str, app: str, conf: Mapping[str, str] | None = None, **options: Any) -> SessionStart:
    """`spark_session(master, app, conf, **options)` started on a daemon thread
    (`mirror.spark.startup`): the caller goes on with its checks and `get()`s the session
    when its first query needs it.

    pyspark is imported here, on the caller's thread, before the thread starts: imported on
    the thread it would share the interpreter with the caller's next imports, and the JVM,
    which the thread launches as soon as pyspark is in, would start that much later."""
    try:
        import pyspark.sql  # noqa: F401 - see above
    except ImportError as exc:
        raise UsageError("pyspark is not installed", hint="run `make setup` (it installs the `spark` extra)") from exc

    return SessionStart(
        partial(_started, partial(spark_session, master, app, conf, **options)),
        running=_session_running,
        guard=_spark_locks,
    )


def _started(start: Callable[[], Any]) -> Any:
    """`start()`'s session; pyspark's or py4j's error as one line (exit 1): theirs carry the
    JVM's trace, and `get()` raises it on the run's thread where `main()` shows it."""
    try:
        return start()
    except MirrorError:
        raise
    except Exception as exc:
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise MirrorError(f"the Spark session did not start: {first}") from exc


def _session_running() -> bool:
    """Whether this process already runs a SparkContext (`getOrCreate` would hand it back)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


@contextmanager
def _spark_locks() -> Iterator[None]:
    """pyspark's locks, in the order `SparkSession.builder.getOrCreate` takes them (both
    reentrant): held around `_session_running` and the session's start, no other thread
    creates or stops a SparkContext in between."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    with SparkSession.Builder._lock, SparkContext._lock:
        yield
