"""Metric definitions, the ack listener and the librdkafka statistics collector (no network
except the loopback HTTP server that serves /metrics)."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from mirror.domain.acks import AckBatch
from mirror.errors import ExitCode, MirrorError, UsageError
from mirror.metrics import (
    MAX_KEPT_INTERVALS,
    CanaryMetrics,
    ClientStatsCollector,
    MetricsListener,
    MirrorMetrics,
    RunMetrics,
    parse_stats,
    serve,
)


def _stats(rxbytes: int, fetches: int, *, txretries: int = 0) -> dict:
    broker = {
        "name": "127.0.0.1:9092/1",
        "nodeid": 1,
        "waitresp_cnt": 2,
        "outbuf_cnt": 1,
        "txretries": txretries,
        "rtt": {"avg": 1500, "max": 9000, "cnt": 10},
        "rxbytes": rxbytes,
        "req": {"Fetch": fetches, "Produce": 0},
    }
    bootstrap = {
        "name": "127.0.0.1:9092/bootstrap",
        "nodeid": -1,
        "waitresp_cnt": 99,
        "rtt": {"avg": 1, "max": 1, "cnt": 1},
    }
    return {
        "name": "rdkafka#consumer-1",
        "type": "consumer",
        "txmsgs": 0,
        "rxmsgs": 500,
        "txretries": txretries,
        "brokers": {broker["name"]: broker, bootstrap["name"]: bootstrap},
        "topics": {
            "a": {"batchsize": {"avg": 1000, "max": 4000, "cnt": 3}, "batchcnt": {"avg": 10, "max": 40, "cnt": 3}},
            "b": {"batchsize": {"avg": 2000, "max": 8000, "cnt": 1}, "batchcnt": {"avg": 20, "max": 20, "cnt": 1}},
        },
    }


def test_parse_stats_takes_the_tuning_figures():
    first = parse_stats(json.dumps(_stats(10_000, 10)))
    assert first.fetch_size_avg is None  # needs two documents: fetch size is a rate
    s = parse_stats(json.dumps(_stats(30_000, 20, txretries=3)), first)
    assert s.fetch_size_avg == 2000.0 and s.fetch_size_max == 2000.0
    assert s.in_flight == 2 and s.queued == 1  # the bootstrap entry is not a second broker
    assert s.retries == 3
    assert s.rtt_avg == 0.0015 and s.rtt_max == 0.009
    assert s.batch_size_avg == (1000 * 3 + 2000 * 1) / 4 and s.batch_size_max == 8000
    assert s.batch_count_avg == (10 * 3 + 20 * 1) / 4


def test_stats_collector_serves_latest_document_per_client_and_ignores_garbage():
    reg = CollectorRegistry()
    col = ClientStatsCollector(reg)
    cb = col.stats_cb("f", "consumer")
    cb(json.dumps(_stats(0, 0)))
    cb(json.dumps(_stats(8_000, 4)))
    col.on_stats("f", "producer", "{not json")
    assert reg.get_sample_value("mirror_client_fetch_size_avg_bytes", {"flow": "f", "role": "consumer"}) == 2000
    assert reg.get_sample_value("mirror_client_requests_in_flight", {"flow": "f", "role": "consumer"}) == 2
    assert reg.get_sample_value("mirror_client_rtt_avg_seconds", {"flow": "f", "role": "consumer"}) == 0.0015
    assert reg.get_sample_value("mirror_client_retries_total", {"flow": "f", "role": "consumer"}) == 0
    assert reg.get_sample_value("mirror_client_requests_in_flight", {"flow": "f", "role": "producer"}) is None


def test_metrics_listener_counts_acknowledged_records_and_bytes():
    reg = CollectorRegistry()
    listener = MetricsListener(MirrorMetrics(reg), clock=lambda: 1234.0)
    listener.on_acked(
        [
            AckBatch("f", "orders", 0, "nyc.orders", 0, 100, count=100, bytes=6400),
            AckBatch("f", "orders", 1, "nyc.orders", 10, 60, count=50, bytes=3200),
            AckBatch("f", "users", 0, "nyc.users", 5, 6, count=1, bytes=10),
        ]
    )
    listener.before_commit("f", {("orders", 0): 100})
    assert reg.get_sample_value("mirror_records_total", {"flow": "f", "topic": "orders"}) == 150
    assert reg.get_sample_value("mirror_bytes_total", {"flow": "f", "topic": "orders"}) == 9600
    assert reg.get_sample_value("mirror_records_total", {"flow": "f", "topic": "users"}) == 1
    assert reg.get_sample_value("mirror_acked_position", {"flow": "f", "topic": "orders", "partition": "1"}) == 60
    assert (
        reg.get_sample_value("mirror_last_ack_timestamp_seconds", {"flow": "f", "topic": "users", "partition": "0"})
        == 1234.0
    )
    listener.on_reset("f", [("orders", 1)])
    assert reg.get_sample_value("mirror_acked_position", {"flow": "f", "topic": "orders", "partition": "1"}) is None
    # Acknowledged again after the reset: the position is exported again, the counters carry on.
    listener.on_acked([AckBatch("f", "orders", 1, "nyc.orders", 0, 7, count=7, bytes=70)])
    assert reg.get_sample_value("mirror_acked_position", {"flow": "f", "topic": "orders", "partition": "1"}) == 7
    assert reg.get_sample_value("mirror_records_total", {"flow": "f", "topic": "orders"}) == 157
    listener.close()


def test_fixed_names_and_serve_on_loopback():
    run = RunMetrics.create()
    canary = CanaryMetrics(run.registry)
    run.listener.on_acked([AckBatch("f", "t", 0, "src.t", 0, 3, count=3, bytes=30)])
    canary.latency.labels("f").observe(0.02)
    for c in (canary.sent, canary.received, canary.lost, canary.duplicated):
        c.labels("f").inc()
    server = serve(0, "127.0.0.1", run.registry)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
    names = {s.name for fam in text_string_to_metric_families(body) for s in fam.samples}
    for fixed in (
        "mirror_records_total",
        "mirror_bytes_total",
        "mirror_canary_latency_seconds_bucket",
        "mirror_canary_sent_total",
        "mirror_canary_received_total",
        "mirror_canary_lost_total",
        "mirror_canary_duplicated_total",
    ):
        assert fixed in names, fixed


def test_an_interval_without_fetches_or_batches_keeps_the_last_figures():
    """An idle interval (a long-polling fetch still out, nothing produced) has no window
    figures; the gauges keep the last seen instead of vanishing from the next scrape."""
    first = parse_stats(json.dumps(_stats(10_000, 10)))
    busy = parse_stats(json.dumps(_stats(30_000, 20)), first)
    idle_doc = _stats(30_000, 20)
    idle_doc["topics"] = {"a": {"batchsize": {"cnt": 0}, "batchcnt": {"cnt": 0}}}
    for b in idle_doc["brokers"].values():
        b["rtt"] = {"cnt": 0}
    idle = parse_stats(json.dumps(idle_doc), busy)
    assert (idle.fetch_size_avg, idle.fetch_size_max) == (busy.fetch_size_avg, busy.fetch_size_max) == (2000.0, 2000.0)
    assert (idle.batch_size_avg, idle.batch_size_max, idle.batch_count_avg) == (
        busy.batch_size_avg,
        busy.batch_size_max,
        busy.batch_count_avg,
    )
    assert (idle.rtt_avg, idle.rtt_max) == (busy.rtt_avg, busy.rtt_max) == (0.0015, 0.009)
    # and the next busy interval is measured from the idle document's counters
    again = parse_stats(json.dumps(_stats(31_000, 21)), idle)
    assert again.fetch_size_avg == 1000.0


def test_figures_are_kept_for_a_few_idle_intervals_only():
    """Kept for good, a producer's rtt would show the last healthy figure through a whole
    target outage (review-today D5): after MAX_KEPT_INTERVALS idle ones, the gauge goes."""
    first = parse_stats(json.dumps(_stats(10_000, 10)))
    s = parse_stats(json.dumps(_stats(30_000, 20)), first)
    idle_doc = _stats(30_000, 20)
    for b in idle_doc["brokers"].values():
        b["rtt"] = {"cnt": 0}
    for _ in range(MAX_KEPT_INTERVALS):
        s = parse_stats(json.dumps(idle_doc), s)
        assert s.rtt_avg == 0.0015 and s.fetch_size_avg == 2000.0
    s = parse_stats(json.dumps(idle_doc), s)
    assert s.rtt_avg is None and s.fetch_size_avg is None
    assert s.batch_size_avg is not None  # its window had figures all along


def test_a_metrics_port_in_use_is_one_line_naming_it_and_exit_1():
    """A worker's port (P + i with --workers) taken by another server: one line, not a
    traceback; exit 1, which the supervisor restarts with its back-off (the port may free)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MirrorError) as failed:
            serve(port, "127.0.0.1", CollectorRegistry())
    assert failed.value.exit_code == ExitCode.FAILURE
    assert f"127.0.0.1:{port}" in str(failed.value) and "\n" not in str(failed.value)


def test_a_metrics_host_not_on_this_machine_is_a_usage_error():
    """Not a port in use for now but a config mistake: exit 2, which the supervisor does not
    restart for ever (review-last E3)."""
    with pytest.raises(UsageError) as failed:
        serve(0, "192.0.2.1", CollectorRegistry())  # TEST-NET-1: never an address of this machine
    assert failed.value.exit_code == ExitCode.USAGE and "192.0.2.1" in str(failed.value)


def test_a_topic_s_skipped_counters_start_at_zero_once_it_is_mirrored() -> None:
    """mirror_source_records_skipped_total pages (MirrorSourceRecordsSkipped): a mirrored
    topic exports it at 0 for every paging reason, so the rule's metric is there on a healthy
    stack and the first gap is an increase, not the birth of a series."""
    reg = CollectorRegistry()
    listener = MetricsListener(MirrorMetrics(reg))
    listener.on_acked([AckBatch("f", "orders", 0, "nyc.orders", 0, 3, count=3, bytes=30)])
    zeros = {
        s.labels["reason"]
        for fam in reg.collect()
        for s in fam.samples
        if s.name == "mirror_source_records_skipped_total" and s.labels["topic"] == "orders" and s.value == 0
    }
    assert zeros == {"retention", "truncated", "recreated"}
