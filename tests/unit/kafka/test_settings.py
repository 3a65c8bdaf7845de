"""The mirror's client settings."""

from __future__ import annotations

import threading

from mirror import config
from mirror.engine.worker import FlowWorker
from mirror.kafka.settings import metadata_refresh_ms

TEXT = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: ["orders"]}, refresh_interval: %s%s}
"""


def _consumer_settings(refresh: str, extra: str = "") -> dict:
    cfg = config.parse(TEXT % (refresh, extra), env={})
    worker = FlowWorker(cfg, cfg.flows[0], stop=threading.Event())
    consumer, _ = worker._settings()  # what the worker hands its consumer, without a cluster to open it on
    return consumer


def test_the_consumer_sees_new_partitions_as_soon_as_the_flow_sees_new_topics():
    """The flow's refresh grows the target when a source topic grows; the source consumer must
    learn of the new partitions as soon (librdkafka's own refresh is 5 minutes away), or their
    records wait that long to be assigned and copied."""
    assert _consumer_settings("30s")["topic.metadata.refresh.interval.ms"] == 30_000
    assert _consumer_settings("1s")["topic.metadata.refresh.interval.ms"] == 1_000
    # Never slower than librdkafka's default, never below a second; the flow's own setting wins.
    assert _consumer_settings("1h")["topic.metadata.refresh.interval.ms"] == 300_000
    assert metadata_refresh_ms(0.1) == 1_000
    assert (
        _consumer_settings("30s", ", consumer: {topic.metadata.refresh.interval.ms: 7000}")[
            "topic.metadata.refresh.interval.ms"
        ]
        == 7000
    )
