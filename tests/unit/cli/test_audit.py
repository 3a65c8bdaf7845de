"""`mirror audit`'s start: a driver JVM that refuses its options (real spark-submit, real JVM; no cluster)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mirror.errors import ExitCode


@pytest.fixture
def audit_args(tmp_path) -> tuple[list[str], dict[str, str]]:
    """`mirror audit`'s arguments and environment. Run in a process of its own: a pytest process
    that already runs a SparkContext (the integration tests' shared session) would hand that
    one back instead of starting a JVM."""
    # A stack size the JVM refuses, where an administrator's driver options are: the driver
    # JVM spark-submit starts exits at once (an unknown option would not do: Spark adds
    # -XX:+IgnoreUnrecognizedVMOptions).
    (tmp_path / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -Xss1k\n")
    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        "clusters:\n  a: {bootstrap: '127.0.0.1:1'}\n  b: {bootstrap: '127.0.0.1:2'}\n"
        "flows:\n  - {name: f1, source: a, target: b, topics: {include: ['x']}}\n"
    )
    return ["audit", "-c", str(cfg), "--flow", "f1"], {**os.environ, "SPARK_CONF_DIR": str(tmp_path)}


def _mirror(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirror", *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_driver_jvm_that_does_not_start_is_one_line_and_exit_1(audit_args):
    """pyspark's error when its gateway JVM exits at start carries the JVM's trace: the command
    says in one line what did not start, as `mirror spark run` does."""
    args, env = audit_args
    done = _mirror(args, env)
    assert done.returncode == ExitCode.FAILURE, done.stderr
    # The JVM's own two lines come first (its stderr is the terminal's); then ours, alone.
    assert done.stderr.strip().splitlines()[-1] == (
        "Error: the Spark session did not start: [JAVA_GATEWAY_EXITED] Java gateway process exited "
        "before sending its port number."
    ), done.stderr
    assert "Traceback" not in done.stderr


def test_with_debug_the_jvms_failure_is_raised_with_its_cause(audit_args):
    args, env = audit_args
    done = _mirror(["--debug", *args], env)
    assert done.returncode != 0 and "Traceback" in done.stderr
    assert "the Spark session did not start" in done.stderr and "JAVA_GATEWAY_EXITED" in done.stderr
