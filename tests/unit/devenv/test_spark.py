"""The dev Spark cluster's layout for N workers (no JVM started)."""

from __future__ import annotations

import pytest

from mirror.devenv.spark import MAX_WORKERS, SparkDev
from mirror.errors import DevClusterError


def test_workers_get_ports_below_the_base_and_worker_zero_keeps_the_one_worker_names(tmp_path):
    # The command lines and ports themselves (not a started cluster): the invariant is that every
    # worker's port sits below the base, where no Kafka port of the same base can be.
    dev = SparkDev(tmp_path, 20000, workers=3)
    assert dev.master_url == "spark://127.0.0.1:19970"
    assert [dev._command(r)[dev._command(r).index("--port") + 1] for r in ("worker", "worker-1", "worker-2")] == [
        "19972",
        "19974",
        "19976",
    ]
    assert (
        dev.work_dir("worker") == tmp_path / "spark" / "work"
        and dev.work_dir("worker-2") == tmp_path / "spark" / "work-2"
    )
    last = SparkDev(tmp_path, 20000, workers=MAX_WORKERS)
    assert max(last._ports(f"worker-{MAX_WORKERS - 1}")) < 20000  # every port below the base (Kafka's)


def test_more_workers_than_fit_below_the_base_port_is_one_clear_error(tmp_path):
    with pytest.raises(DevClusterError, match=f"1 to {MAX_WORKERS} workers"):
        SparkDev(tmp_path, 20000, workers=MAX_WORKERS + 1)


def test_stop_finds_every_worker_pid_file_however_many_were_asked_for(tmp_path):
    dev = SparkDev(tmp_path, 20000, workers=1)
    dev.dir.mkdir(parents=True)
    for role in ("master", "worker", "worker-1", "worker-2"):
        (dev.dir / f"{role}.pid").write_text("999999999")  # no such process: nothing to signal
    assert dev.stop() == []
    assert not list(dev.dir.glob("*.pid"))
