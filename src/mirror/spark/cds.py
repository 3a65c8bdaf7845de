"""The driver JVM's class-data archive: Spark's classes mapped at start instead of loaded.

Before a first query runs, a driver JVM loads and verifies some 13,000 classes from pyspark's
jars (spark-submit, the SparkContext, the SQL session's configuration and function registry,
the Kafka source's analysis): seconds of CPU that the plain PySpark job pays too and that
decide when the first record lands. A dynamic AppCDS archive (the JDK's class-data sharing)
holds those classes already parsed and verified, and a JVM started with it maps them instead.

It is built once per checkout, Java runtime and pyspark install (`make setup` runs `python -m
mirror.spark.cds`): a session started with `-XX:ArchiveClassesAtExit` does what a run's start
does, and its JVM writes the archive as it exits. The name says which Java and which pyspark
jars it was built from (`archive_path`); the JVM checks the same again and starts without the
archive when it does not match (`-Xlog` keeps that quiet). A truncated archive crashes the JVM
that maps it, so one is never written in place: it is written beside, tried by a JVM that must
map it (`-Xshare:on`), and only then renamed to its name. A run without the archive (not
built, other Java, a container) starts as it always did, only slower.

Only the driver's JVM started by `mirror spark run` (and `mirror audit`) uses it; under
spark-submit the driver JVM is already running, and executors on a cluster start their own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from mirror.spark.class_archive import (
    ARCHIVE_ENV,
    BUILD_TIMEOUT,
    DEFAULT_OPTIONS,
    DRIVER_OPTIONS,
    QUIET,
    archive_key,
    archive_path,
    driver_options,
    java_binary,
    sets_sharing,
    spark_defaults,
    use_options,
    with_java_options,
)
from mirror.spark.session import LOCAL, spark_session

# The lookup half lives in mirror.spark.class_archive; its names stay importable from here.
__all__ = [
    "ARCHIVE_ENV",
    "BUILD_TIMEOUT",
    "DEFAULT_OPTIONS",
    "DRIVER_OPTIONS",
    "QUIET",
    "archive_key",
    "archive_path",
    "build",
    "driver_options",
    "java_binary",
    "main",
    "sets_sharing",
    "spark_defaults",
    "use_options",
    "with_java_options",
]

# ---------------------------------------------------------------- building it (`make setup`)


def _exercise(options: str) -> None:
    """Start a session with the driver `options` and do what a run's start does; the JVM is
    stopped and awaited (it writes an archive as it exits)."""
    spark = spark_session(LOCAL, "mirror-class-archive", {DRIVER_OPTIONS: options}, ui_port=0, class_archive=False)
    proc = spark.sparkContext._gateway.proc  # the JVM pyspark launched
    try:
        spark.range(1000).selectExpr("id % 3 AS k").groupBy("k").count().collect()
        reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
        reader.option("assign", '{"t": [0]}').load().selectExpr("key", "value", "timestamp").schema  # noqa: B018
    finally:
        spark.stop()
        proc.stdin.close()  # pyspark's gateway exits at the end of its stdin
        proc.wait(timeout=BUILD_TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"the driver JVM exited with status {proc.returncode}")


def build(path: Path) -> None:
    """Write the archive at `path`: dumped beside it, tried, then renamed (never in place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        _exercise(with_java_options(None, [f"-XX:ArchiveClassesAtExit={tmp}", *QUIET]))
        if not tmp.is_file():
            raise RuntimeError("the driver JVM wrote no archive")
        _trial(tmp, path.with_name(f"{path.stem}.hs_err.log"))
        _sync(tmp)  # a crash after the rename must not leave a truncated archive, which crashes the JVM
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    if os.environ.get(ARCHIVE_ENV):
        return  # a folder other installs may share: theirs are mapped still
    for old in path.parent.glob("driver-classes-*.jsa"):
        if old != path:
            old.unlink(missing_ok=True)  # this checkout's for another Java or pyspark: never mapped again


def _trial(tmp: Path, report: Path) -> None:
    """A JVM that must map the archive at `tmp` (or fail): a broken archive is never installed.
    One that crashes on it writes its error report to `report`, not into its cwd (the checkout)."""
    report.unlink(missing_ok=True)  # so that one there afterwards is this trial's
    try:
        subprocess.run(
            [sys.executable, "-m", "mirror.spark.cds", "--try", str(tmp), str(report)],
            check=True,
            timeout=BUILD_TIMEOUT,
            stdout=subprocess.DEVNULL,
        )
    except subprocess.CalledProcessError as exc:
        where = f"; the JVM's crash report: {report}" if report.is_file() else ""
        raise RuntimeError(f"the trial JVM could not map the archive (exit {exc.returncode}){where}") from exc


_TMP = re.compile(r"driver-classes-.+\.jsa\.(\d+)\.tmp")


def _remove_killed_builds(folder: Path) -> None:
    """The archives of builds killed mid-way (their own clean-up never ran), ~150 MB each: a
    temporary names its builder's pid, and one whose builder still runs may be being written
    or tried."""
    for tmp in folder.glob("driver-classes-*.jsa.*.tmp"):
        named = _TMP.fullmatch(tmp.name)
        if named is not None and not _alive(int(named.group(1))):
            tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--try"]:
        _exercise(f"-XX:SharedArchiveFile={args[1]} -Xshare:on -XX:ErrorFile={args[2]}")
        return 0
    path = archive_path()
    if path is None:
        print("mirror.spark.cds: no Java or no pyspark: no class-data archive", file=sys.stderr)
        return 0
    if not os.environ.get(ARCHIVE_ENV):
        # Not in a folder other installs may share: there a temporary's pid may be another
        # host's or another container's.
        _remove_killed_builds(path.parent)
    if path.is_file():
        return 0
    print(f"building the Spark driver's class-data archive {path}", file=sys.stderr)
    try:
        build(path)
    except Exception as exc:  # noqa: BLE001 - pyspark's, py4j's, ours: only start-up time depends on it
        # setup goes on, and runs start without it.
        print(f"mirror.spark.cds: no class-data archive: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
