"""`start_from` and the read cap on the Spark engine (local mode, the session's shared Spark)."""

from __future__ import annotations

import time

import pytest

from mirror.config import load
from tests.integration.test_flow_controls import flow_yaml, numbers, produce
from tests.support.kafkautil import create_topic, group_offsets, read_topic

pytestmark = pytest.mark.slow


def test_spark_start_from_a_relative_time_and_a_records_cap(clusters, write_config, unique, spark_local):
    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t = f"sp-recent-{unique}"
    create_topic(src, t, 2)
    now = int(time.time() * 1000)
    produce(src, t, range(0, 400), 2, ts=now - 3 * 3_600_000)  # before the start: never mirrored
    produce(src, t, range(400, 6400), 2)  # copied, at no more than 1,000 records a second
    cfg = write_config(flow_yaml(unique, t, "    start_from: -1h\n    max_records_per_second: 1000\n"))
    config = load(cfg)
    t0 = time.monotonic()
    job = run_flow(config, config.flow(f"f-{unique}"), until_caught_up=True, spark=spark_local)
    took = time.monotonic() - t0
    assert job.records == 6000
    assert numbers(read_topic(dst, f"src.{t}", 2)) == list(range(400, 6400))
    assert group_offsets(src, f"mirror-{unique}", t, 2) == {0: 3200, 1: 3200}
    # The cap holds on average: 6,000 records, one second of them as burst, take 5 s at least.
    assert took >= 5.0, f"{job.records} records in {took:.1f}s"
