"""The statistics collector reads what real librdkafka clients report (their JSON, not a copy)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer
from prometheus_client import CollectorRegistry

from mirror.metrics import ClientStatsCollector
from tests.integration.test_lag_monitor import _topic
from tests.support.metrics import poll

pytestmark = pytest.mark.timeout(120)


def test_fetch_batch_inflight_rtt_from_real_clients(clusters, unique):
    src = clusters.bootstrap("src")
    topic = f"stats-{unique}"
    _topic(src, topic, 2)
    reg = CollectorRegistry()
    stats = ClientStatsCollector(reg)
    p = Producer(
        {
            "bootstrap.servers": src,
            "linger.ms": 20,
            "statistics.interval.ms": 200,
            "stats_cb": stats.stats_cb("f", "producer"),
        }
    )
    for i in range(5000):
        p.produce(topic, value=b"v" * 100, partition=i % 2)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0

    def producer_seen() -> bool:
        p.poll(0.2)
        return (reg.get_sample_value("mirror_client_batch_size_avg_bytes", {"flow": "f", "role": "producer"}) or 0) > 0

    c = Consumer(
        {
            "bootstrap.servers": src,
            "group.id": f"g-{unique}",
            "auto.offset.reset": "earliest",
            "statistics.interval.ms": 200,
            "stats_cb": stats.stats_cb("f", "consumer"),
        }
    )
    c.subscribe([topic])
    got = 0
    cl = {"flow": "f", "role": "consumer"}
    fetch: dict[str, float | None] = {}

    def consumer_seen() -> bool:
        """Every record read and fetch figures seen: taken as they are now (an idle consumer's
        figures go after a few statistics intervals)."""
        nonlocal got
        got += len(c.consume(1000, timeout=0.2))
        fetch.update(
            (name, reg.get_sample_value(f"mirror_client_fetch_size_{name}_bytes", cl)) for name in ("avg", "max")
        )
        return got >= 5000 and (fetch["avg"] or 0) > 0

    try:
        # the producer's window stats for batch size are per interval: produce until one is seen
        poll(
            lambda: producer_seen() or (p.produce(topic, value=b"v" * 100) or False),
            timeout=30,
            interval=0.05,
            what="producer batch stats",
        )
        poll(consumer_seen, timeout=60, interval=0, what="consumer fetch stats")
    finally:
        c.close()
    labels = {"flow": "f", "role": "producer"}
    assert (
        reg.get_sample_value("mirror_client_batch_size_max_bytes", labels)
        >= reg.get_sample_value("mirror_client_batch_size_avg_bytes", labels)
        > 0
    )
    assert reg.get_sample_value("mirror_client_rtt_avg_seconds", labels) > 0
    assert reg.get_sample_value("mirror_client_requests_in_flight", labels) >= 0
    assert reg.get_sample_value("mirror_client_retries_total", labels) == 0
    assert fetch["max"] is not None and fetch["avg"] is not None and fetch["max"] >= fetch["avg"] > 0
