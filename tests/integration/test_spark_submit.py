"""`mirror spark submit` on a real standalone cluster and real Kafka.

The cluster's worker shares nothing with the driver but the Spark installation: it runs in
its own directory with a PATH whose Python is a bare interpreter (no mirror, no
confluent-kafka) and PYSPARK_PYTHON pointing nowhere, so the flow can only work if the
executors run the package spark-submit shipped them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mirror.cli import main
from mirror.devenv.common import spawn_prefix
from mirror.devenv.spark import SparkDev
from tests.integration.test_spark import RECORDS, assert_exact, flow_yaml, load_data
from tests.support.kafkautil import end_offsets, group_offsets, wait_for

pytestmark = pytest.mark.slow

# Another installation of the driver's Python version (the Debian one, where there is one:
# not even the interpreter the driver's venv was made from), without the project's packages.
_NAME = f"python{sys.version_info.major}.{sys.version_info.minor}"
BARE_PYTHON = next(
    (p for p in (Path("/usr/bin") / _NAME, Path(sys.base_prefix) / "bin" / _NAME) if p.exists()),
    Path(sys.base_prefix) / "bin" / _NAME,
)


SUBMIT_TIMEOUT = (
    420  # a submitted flow's driver and executor JVMs start in ~30 s, several times that on a loaded machine
)


class ForeignWorkerSpark(SparkDev):
    """A standalone master and a worker whose executors cannot use the driver's Python:
    PATH starts with a shim that logs each start and runs the bare base interpreter."""

    def __init__(self, home: Path, base_port: int, shims: Path) -> None:
        super().__init__(home, base_port)
        self.shims = shims

    def env(self, role: str, home: Path) -> dict[str, str]:
        env = super().env(role, home)
        if role != "worker":
            return env
        for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYSPARK_DRIVER_PYTHON"):
            env.pop(var, None)
        env["PATH"] = f"{self.shims}:/usr/bin:/bin"
        env["PYSPARK_PYTHON"] = "/nonexistent/python3"  # a worker-wide setting that must not matter
        return env


@pytest.fixture(scope="module")
def foreign_cluster(tmp_path_factory: pytest.TempPathFactory):
    from tests.support.clusters import free_base_port

    home = tmp_path_factory.mktemp("spark-foreign")
    shims = home / "shims"
    shims.mkdir()
    starts = home / "python-starts.log"
    shim = shims / BARE_PYTHON.name
    shim.write_text(f'#!/bin/sh\necho "$PWD" >> {starts}\nexec {BARE_PYTHON} "$@"\n')
    shim.chmod(0o755)
    spark = ForeignWorkerSpark(home, free_base_port(0, extra_below=30), shims)
    spark.start()
    try:
        spark.wait_ready()
        yield spark, starts
    finally:
        spark.stop()


@pytest.fixture(scope="module")
def package_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One --package-dir for the module's submits: mirror.pex is built once (tens of seconds of
    pex) and reused while the sources are unchanged, as on a user's machine."""
    return tmp_path_factory.mktemp("spark-packages")


def submit(config: Path, flow: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`mirror spark submit` as a user runs it: a child process, from another directory.
    Its output also goes to a file beside the config, to read while it runs."""
    log = config.with_suffix(f".submit.{time.monotonic_ns()}.log")
    with open(log, "w") as out:
        done = subprocess.run(
            [
                *spawn_prefix(),
                sys.executable,
                "-m",
                "mirror",
                "spark",
                "submit",
                "-c",
                str(config),
                "--flow",
                flow,
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=out,
            text=True,
            timeout=SUBMIT_TIMEOUT,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
    done.stderr = log.read_text()
    return done


def output(done: subprocess.CompletedProcess[str]) -> str:
    """The end of a run's output: the driver's (spark-submit's stdout) after the JVMs' log."""
    return done.stderr[-3000:] + "\n--- stdout ---\n" + done.stdout[-3000:]


def test_bare_python_cannot_run_mirror():
    """The premise of the foreign worker: its Python has neither mirror nor its dependencies."""
    for module in ("mirror", "confluent_kafka"):
        probe = subprocess.run(
            [str(BARE_PYTHON), "-I", "-c", f"import {module}"], capture_output=True, text=True, cwd="/"
        )
        assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr


@pytest.mark.timeout(2 * SUBMIT_TIMEOUT + 120)
def test_submit_mirrors_exactly_with_executors_on_a_foreign_python(
    clusters, write_config, unique, tmp_path, foreign_cluster, package_dir
):
    spark, starts = foreign_cluster
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topics = load_data(src, unique, records=RECORDS // 8)
    # A producer setting the JVM writer has no Java name for: the batches go to the executors'
    # Python tasks, which must run from the shipped package (the JVM writer under spark-submit:
    # the SIGTERM test below).
    yaml = flow_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db").replace(
        "    refresh_interval:", "    producer: {queue.buffering.backpressure.threshold: 1}\n    refresh_interval:"
    )
    config = write_config(yaml)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    packages = package_dir

    dry = submit(
        config,
        f"f-{unique}",
        "--master",
        spark.master_url,
        "--until-caught-up",
        "--package-dir",
        str(packages),
        "--dry-run",
        cwd=elsewhere,
    )
    assert dry.returncode == 0, output(dry)
    (line,) = dry.stdout.splitlines()
    (package,) = packages.glob("mirror-*")
    assert (
        f"--files {package}/mirror.pex" in line
        and "--conf spark.pyspark.python=./mirror.pex" in line
        and "spark-sql-kafka-0-10" in line
    )

    t0 = time.monotonic()
    done = submit(
        config,
        f"f-{unique}",
        "--master",
        spark.master_url,
        "--until-caught-up",
        "--package-dir",
        str(packages),
        cwd=elsewhere,
    )
    took = time.monotonic() - t0
    assert done.returncode == 0, output(done)
    # spark-submit hands the Python driver's stdout and stderr on as its own stdout.
    assert f"flow f-{unique}: " in done.stdout and "records mirrored on Spark" in done.stdout, done.stdout
    assert "batches by the JVM writer: 0," in done.stdout, done.stdout
    assert [p.name for p in packages.glob("mirror-*")] == [package.name]  # the dry run's package, reused
    print(
        f"\nspark-submit on a foreign worker: {RECORDS // 8 * 3 // 2} records produced, mirrored in {took:.1f}s "
        "including the driver's start"
    )
    assert_exact(src, dst, unique, topics)

    # The executors' Pythons were the bare interpreter, started in the worker's application
    # folder (where spark-submit's --files put the package), never in the driver's folders.
    work = spark.dir / "work"
    started = starts.read_text().splitlines()
    assert started and all(Path(d).is_relative_to(work) for d in started), started
    app_dirs = {Path(d).relative_to(work).parts[0] for d in started}
    assert all((work / a).glob("*/mirror.pex") for a in app_dirs)


def test_submit_to_a_master_that_does_not_answer_fails_in_one_line(clusters, write_config, unique, tmp_path):
    config = write_config(flow_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db"))
    done = submit(
        config,
        f"f-{unique}",
        "--master",
        "spark://127.0.0.1:9",
        "--package-dir",
        str(tmp_path / "packages"),
        cwd=tmp_path,
    )
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 1 and lines == [
        "Error: Spark master spark://127.0.0.1:9 does not answer (check --master and that the master runs (mirror dev "
        "up --spark))"
    ]


def test_cluster_deploy_mode_is_refused_on_standalone_as_spark_itself_refuses_it(
    clusters, write_config, unique, tmp_path, foreign_cluster, capsys
):
    spark, _ = foreign_cluster
    config = write_config(flow_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db"))
    capsys.readouterr()
    rc = main(
        [
            "spark",
            "submit",
            "-c",
            str(config),
            "--flow",
            f"f-{unique}",
            "--master",
            spark.master_url,
            "--deploy-mode",
            "cluster",
            "--package-dir",
            str(tmp_path / "packages"),
        ]
    )
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and "--deploy-mode cluster" in lines[0] and "for yarn and k8s://" in lines[0]
    assert not (tmp_path / "packages").exists()  # refused before anything was built
    # The premise, on the real master: spark-submit itself turns a Python application away.
    app = tmp_path / "app.py"
    app.write_text("print('never run')\n")
    from mirror.spark.submit import spark_submit_path

    raw = subprocess.run(
        [str(spark_submit_path()), "--master", spark.master_url, "--deploy-mode", "cluster", str(app)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert (
        raw.returncode != 0
        and "Cluster deploy mode is currently not supported for python applications on standalone clusters"
        in raw.stderr + raw.stdout
    )
    assert "never run" not in raw.stdout


@pytest.mark.timeout(2 * SUBMIT_TIMEOUT + 120)
def test_sigterm_stops_a_submitted_flow_and_a_later_run_mirrors_the_rest_exactly(
    clusters, write_config, unique, tmp_path, foreign_cluster, package_dir
):
    """SIGTERM to `mirror spark submit` reaches the Python driver, which stops its query and
    its session and exits 0 (and spark-submit with it); a later run mirrors the rest exactly."""
    spark, _ = foreign_cluster
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topics = load_data(src, unique, records=RECORDS // 20)
    plain = f"sp-{unique}-plain"
    config = write_config(flow_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db"))
    packages = package_dir
    log = tmp_path / "submit.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *spawn_prefix(),
                sys.executable,
                "-m",
                "mirror",
                "spark",
                "submit",
                "-c",
                str(config),
                "--flow",
                f"f-{unique}",
                "--master",
                spark.master_url,
                "--package-dir",
                str(packages),
                "--max-records-per-batch",
                "200",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:

            def committing() -> bool:
                assert proc.poll() is None, log.read_text()[-4000:]
                return any(o > 0 for o in group_offsets(src, f"mirror-{unique}", plain, 3).values())

            wait_for(committing, SUBMIT_TIMEOUT, "the submitted flow to commit a batch")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(180) == 0, log.read_text()[-4000:]
        finally:
            if proc.poll() is None:  # SIGTERM, not SIGKILL: spark-submit, in its own session, goes too
                proc.terminate()
                proc.wait(180)
    assert f"flow f-{unique}: " in log.read_text() and "records mirrored on Spark" in log.read_text()
    assert sum(group_offsets(src, f"mirror-{unique}", plain, 3).values()) < sum(end_offsets(src, plain, 3).values()), (
        "stopped too late to test a resume"
    )
    again = submit(
        config,
        f"f-{unique}",
        "--master",
        spark.master_url,
        "--until-caught-up",
        "--package-dir",
        str(packages),
        cwd=tmp_path,
    )
    assert again.returncode == 0, output(again)
    # The resumed run's batches start where the stopped one committed: the JVM writer (shipped
    # with --jars) produced them.
    assert "batches by the JVM writer: 0," not in again.stdout, again.stdout
    assert_exact(src, dst, unique, topics)
