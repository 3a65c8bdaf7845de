"""`mirror audit`'s start: a driver JVM that refuses its options (real spark-submit, real JVM; no cluster)."""

from __future__ import annotations

import pytest

from mirror.cli import main
from mirror.errors import ExitCode, MirrorError


@pytest.fixture
def audit_args(tmp_path, monkeypatch) -> list[str]:
    # A stack size the JVM refuses, where an administrator's driver options are: the driver
    # JVM spark-submit starts exits at once (an unknown option would not do: Spark adds
    # -XX:+IgnoreUnrecognizedVMOptions).
    (tmp_path / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -Xss1k\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        "clusters:\n  a: {bootstrap: '127.0.0.1:1'}\n  b: {bootstrap: '127.0.0.1:2'}\n"
        "flows:\n  - {name: f1, source: a, target: b, topics: {include: ['x']}}\n"
    )
    return ["audit", "-c", str(cfg), "--flow", "f1"]


def test_a_driver_jvm_that_does_not_start_is_one_line_and_exit_1(audit_args, capsys):
    """pyspark's error when its gateway JVM exits at start carries the JVM's trace: the command
    says in one line what did not start, as `mirror spark run` does."""
    code = main(audit_args)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert code == ExitCode.FAILURE, err
    assert lines == [
        "Error: the Spark session did not start: [JAVA_GATEWAY_EXITED] Java gateway process exited "
        "before sending its port number."
    ], err
    assert "Traceback" not in err


def test_with_debug_the_jvms_failure_is_raised_with_its_cause(audit_args):
    with pytest.raises(MirrorError, match="the Spark session did not start") as info:
        main(["--debug", *audit_args])
    assert "JAVA_GATEWAY_EXITED" in str(info.value.__cause__)
