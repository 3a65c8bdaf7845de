"""The run's Spark session start (`mirror.spark.session.start_session`), without a JVM."""

from __future__ import annotations

import sys

import pytest

from mirror.errors import ExitCode, MirrorError, UsageError
from mirror.spark import session


def start_error(monkeypatch, error: Exception) -> MirrorError:
    """What `get()` raises when the session's factory raises `error`."""

    def spark_session(*args, **kwargs):
        raise error

    monkeypatch.setattr(session, "spark_session", spark_session)
    starting = session.start_session("local[2]", "mirror-f1", ui_port=None)
    try:
        with pytest.raises(MirrorError) as info:
            starting.get()
    finally:
        starting.close()
    return info.value


def test_a_session_that_does_not_start_is_a_one_line_error_exit_1(monkeypatch):
    """pyspark's error when the driver JVM dies at start (a bad driver option, a broken class
    archive) is raised on the run's thread as one line, not a traceback with the JVM's."""
    error = start_error(
        monkeypatch,
        RuntimeError(
            "[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number.\n"
            "\tat org.apache.spark.deploy.SparkSubmit.main(SparkSubmit.scala)"
        ),
    )
    assert error.exit_code == ExitCode.FAILURE
    assert str(error) == (
        "the Spark session did not start: [JAVA_GATEWAY_EXITED] Java gateway process exited before "
        "sending its port number."
    )


def test_a_mirror_error_at_start_is_raised_as_it_is(monkeypatch):
    refused = MirrorError("no Spark Kafka connector for pyspark 9.9.9 in /x", hint="run `make setup`")
    assert start_error(monkeypatch, refused) is refused


def test_no_pyspark_is_one_line_before_any_thread_starts(monkeypatch):
    """`start_session` imports pyspark on the caller's thread (before the JVM's): without the
    `spark` extra that is a one-line usage error like `spark submit`'s, not a traceback."""
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)  # import pyspark.sql raises ImportError
    with pytest.raises(UsageError, match="pyspark is not installed") as info:
        session.start_session("local[2]", "mirror-f1", ui_port=None)
    assert info.value.exit_code == ExitCode.USAGE
