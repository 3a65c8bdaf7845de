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

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

ARCHIVE_ENV = "MIRROR_SPARK_CLASS_ARCHIVE"  # a folder for the archive other than build/jvm (may be shared)
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")  # an archive that does not match: start without it, silently
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
DEFAULT_OPTIONS = "spark.driver.defaultJavaOptions"  # an administrator's, given before DRIVER_OPTIONS
BUILD_TIMEOUT = 600.0  # seconds for the building JVM to write the archive and exit


def java_binary() -> Path | None:
    """The `java` Spark runs: $JAVA_HOME's, else the one on PATH (None: none)."""
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else shutil.which("java")
    return Path(java) if java and Path(java).exists() else None


def archive_key(java_home: Path, libjvm_stat: tuple[int, int], jars: Path, jars_mtime_ns: int) -> str:
    """What an archive was built from, as a short hash: the JVM build (its libjvm's size and
    time) and pyspark's jars folder (a reinstall rewrites it)."""
    text = f"{java_home}|{libjvm_stat[0]}|{libjvm_stat[1]}|{jars}|{jars_mtime_ns}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def archive_path() -> Path | None:
    """Where the archive for this Java and this pyspark is (whether built or not); None when
    there is no Java or pyspark to key it on."""
    java = java_binary()
    if java is None:
        return None
    home = java.resolve().parent.parent
    libjvm = home / "lib" / "server" / "libjvm.so"
    try:
        import pyspark

        jars = Path(pyspark.__file__).parent / "jars"
        st = libjvm.stat()
        key = archive_key(home, (st.st_size, st.st_mtime_ns), jars, jars.stat().st_mtime_ns)
    except (ImportError, OSError):
        return None
    folder = os.environ.get(ARCHIVE_ENV)
    base = Path(folder) if folder else Path(__file__).resolve().parents[3] / "build" / "jvm"
    return base / f"driver-classes-{key}.jsa"


def with_java_options(options: str | None, extra: list[str]) -> str:
    """`extra` JVM options before the ones already given (a later option wins in the JVM, so
    the user's own `spark.driver.extraJavaOptions` keep the last word)."""
    return " ".join([*extra, *([options] if options else [])])


# A driver's own class-data sharing choice (required, off, its own archive, its own dump): ours
# beside it could only break it (-Xshare:on fails on an archive that does not match, and a
# dynamic dump cannot start from our dynamic archive).
_SHARING = re.compile(r"-Xshare:|SharedArchiveFile|ArchiveClassesAtExit|UseSharedSpaces|AutoCreateSharedArchive")


def sets_sharing(options: str | None) -> bool:
    """Whether driver JVM `options` already say how the JVM shares class data."""
    return bool(options and _SHARING.search(options))


def spark_defaults() -> dict[str, str]:
    """The spark-defaults.conf the driver's spark-submit reads ($SPARK_CONF_DIR, else
    $SPARK_HOME/conf, else pyspark's own conf); {} when there is none."""
    folder = os.environ.get("SPARK_CONF_DIR")
    if not folder:
        home = os.environ.get("SPARK_HOME")
        if not home:
            import pyspark

            home = str(Path(pyspark.__file__).parent)
        folder = str(Path(home) / "conf")
    try:
        text = (Path(folder) / "spark-defaults.conf").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return _properties(text)


def _properties(text: str) -> dict[str, str]:
    """A Java properties file's keys and values (trimmed, as Spark reads them; continued lines
    joined, escapes other than a line's end left as written)."""
    found = {}
    for line in re.sub(r"\\\n[ \t\f]*", "", text).splitlines():
        line = line.lstrip(" \t\f")
        if not line or line[0] in "#!":
            continue
        entry = re.match(r"([^=:\s]*)[ \t\f]*[=:]?(.*)", line)
        if entry is not None:
            found[entry.group(1)] = entry.group(2).strip()
    return found


def driver_options(conf: Mapping[str, str]) -> str | None:
    """The `spark.driver.extraJavaOptions` a driver started with the settings `conf` is given
    to map the archive (None: as they are). A `--conf` of the key replaces spark-defaults.conf's
    value, so that one is kept after ours; a driver whose options (or its administrator's
    `spark.driver.defaultJavaOptions`) already choose its class-data sharing gets none of ours."""
    defaults = spark_defaults()
    theirs, admins = (conf.get(key, defaults.get(key)) for key in (DRIVER_OPTIONS, DEFAULT_OPTIONS))
    if sets_sharing(theirs) or sets_sharing(admins):
        return None
    archive = use_options()
    return with_java_options(theirs, archive) if archive else None


def use_options() -> list[str]:
    """The driver JVM's options to map the archive, when it is built; else none."""
    path = archive_path()
    if path is None or not path.is_file():
        return []
    log.debug("the driver JVM maps the class-data archive %s", path)
    return [f"-XX:SharedArchiveFile={path}", *QUIET]


# ---------------------------------------------------------------- building it (`make setup`)


def _exercise(options: str) -> None:
    """Start a session with the driver `options` and do what a run's start does; the JVM is
    stopped and awaited (it writes an archive as it exits)."""
    from mirror.spark.session import LOCAL, spark_session

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
