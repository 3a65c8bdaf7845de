"""The package `mirror spark submit` ships to Spark: a PEX of mirror and its dependencies.

Spark runs a Python application's tasks in a Python on each executor, which must import
`mirror` and its binary dependencies (confluent-kafka, pydantic-core, the Cassandra driver):
`--py-files` cannot carry compiled extensions, so the package is a PEX (one of the ways in
Spark's "Python Package Management"). Executors run `./mirror.pex` as their Python: it needs
a CPython of the driver's minor version on the executor's PATH, never this checkout or the
driver's interpreter path.

pyspark itself is left out (it is 480 MB with its jars): every Spark installation puts its
own `pyspark.zip` and py4j on the Python workers' PYTHONPATH, which the PEX inherits
(`--inherit-path=fallback`), so the executors' pyspark always matches their Spark.

The PEX is built from the packages installed in this venv (`--venv-repository`: nothing is
downloaded) into a folder named by a hash of its content, and reused while that is unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import mirror
from mirror.errors import MirrorError

log = logging.getLogger(__name__)

PEX_NAME = "mirror.pex"
APP_NAME = "mirror_spark_app.py"  # spark-submit's primary resource must be a .py file
FORMAT = "1"  # bumped when the package's layout changes, so old folders are not reused
KEEP = 3  # package folders kept: the newest, plus a few a running application may still use
# Not packaged: Spark provides them (see the module docstring).
PROVIDED = {"pyspark", "py4j"}
# The extras of mirror whose dependencies executors need (the Spark adapter's, less pyspark).
EXTRAS = {"spark"}
BUILD_TIMEOUT = 600.0

_APP = '''"""The application `mirror spark submit` hands to spark-submit; it runs inside mirror.pex."""

from mirror.cli.spark_app import main

raise SystemExit(main())
'''


@dataclass(frozen=True)
class Package:
    """A built package: the PEX and the .py file spark-submit starts."""

    folder: Path

    @property
    def pex(self) -> Path:
        return self.folder / PEX_NAME

    @property
    def app(self) -> Path:
        return self.folder / APP_NAME


def requirements() -> list[str]:
    """mirror's runtime requirements (and its Spark extra's), less what Spark provides."""
    out = []
    for req in importlib.metadata.requires("mirror") or []:
        spec, _, marker = req.partition(";")
        extra = re.search(r"""extra\s*==\s*['"]([^'"]+)['"]""", marker)
        if marker.strip() and not (extra and extra.group(1) in EXTRAS):
            continue
        name = re.match(r"[A-Za-z0-9._-]+", spec.strip())
        if name and _canonical(name.group(0)) not in PROVIDED:
            out.append(spec.strip())
    return sorted(set(out))


def source_dir() -> Path:
    """The `mirror` package's folder (the checkout's src/mirror, or an installed copy)."""
    return Path(mirror.__file__).parent


def content_key(sources: Path, reqs: list[str]) -> str:
    """A hash of what goes into the package: mirror's source files, the versions installed
    here, the interpreter and the builder's format. Equal keys mean an equal package."""
    h = hashlib.sha256()
    h.update(
        f"{FORMAT}\0{sys.implementation.name}\0{sys.version_info[:2]}\0{platform.machine()}\0{sys.platform}\0".encode()
    )
    for req in reqs:
        h.update(f"req\0{req}\0".encode())
    # A set: the same distribution can be found twice (an egg-info in the working directory).
    for dist in sorted(
        {f"{_canonical(d.metadata['Name'] or '')}=={d.version}" for d in importlib.metadata.distributions()}
    ):
        h.update(f"dist\0{dist}\0".encode())
    for path in sorted(
        p for p in sources.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    ):
        h.update(f"file\0{path.relative_to(sources).as_posix()}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:20]


def ensure_package(root: Path) -> Package:
    """The package for this checkout and venv under `root`: reused when its key matches,
    built (about ten seconds) otherwise. Built aside and renamed into place, so a concurrent
    build or a crash never leaves a half-written package where spark-submit would find it."""
    reqs = requirements()
    sources = source_dir()
    key = content_key(sources, reqs)
    package = Package(root / f"mirror-{key}")
    if package.pex.is_file() and package.app.is_file():
        log.info("reusing the Spark package %s", package.folder)
        package.folder.touch()  # the newest-used survive pruning
        return package
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        _build(staging, sources, reqs)
        staging.chmod(0o755)  # mkdtemp's 0700 would hide it from a Spark worker of another user
        staging.rename(package.folder)
    except OSError:
        if not package.pex.is_file():  # not a concurrent build that won the rename
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("built the Spark package %s", package.folder)
    _prune(root, keep=package.folder)
    return package


def _build(staging: Path, sources: Path, reqs: list[str]) -> None:
    if importlib.util.find_spec("pex") is None:
        raise MirrorError(
            "pex is not installed in this environment", hint="run `make setup` (the `spark` extra installs it)"
        )
    if sys.prefix == sys.base_prefix:
        raise MirrorError(
            "`mirror spark submit` packages the venv it runs in, and this Python is not a venv",
            hint="run it from the project's .venv (make setup)",
        )
    src = staging / "src"
    shutil.copytree(sources, src / "mirror", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    cmd = [
        sys.executable,
        "-m",
        "pex",
        *reqs,
        "--venv-repository",
        sys.prefix,
        "-D",
        str(src),
        "--inherit-path=fallback",
        "--no-emit-warnings",
        "-o",
        str(staging / PEX_NAME),
    ]
    log.info("building the Spark package: %s", " ".join(cmd))
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise MirrorError(f"building {PEX_NAME} took more than {BUILD_TIMEOUT:g}s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise MirrorError(f"building {PEX_NAME} failed: {last}", hint="run with --debug -v to see pex's output")
    shutil.rmtree(src)
    (staging / APP_NAME).write_text(_APP)


def _prune(root: Path, keep: Path) -> None:
    """Remove all but the KEEP most recently used package folders."""
    folders = sorted((p for p in root.glob("mirror-*") if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in folders[KEEP:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
