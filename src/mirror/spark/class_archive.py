"""Where the driver JVM's class-data archive is, and the JVM options that map it.

The archive itself and how it is built: `mirror.spark.cds`. This half is what a session
(`mirror.spark.session`) needs as it starts a driver JVM, kept apart so that the builder can
start a session without the two importing each other.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("mirror.spark.cds")

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
