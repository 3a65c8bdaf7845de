"""Every Prometheus metric the project exposes, defined in this one module.

Names and labels marked FIXED are a contract with dashboards and alert rules
(docs/design.md, "Metric names"); everything else may grow. Each group of metrics is built
against an explicit `registry` so tests get a fresh `CollectorRegistry` and one process
can serve the mirror's counters, the canary's and the monitor's side by side.

Three kinds of metric live here:

* counters incremented on the hot path, batched (`MirrorMetrics` fed by
  `MetricsListener.on_acked`, `CanaryMetrics` fed by the prober);
* librdkafka client statistics, parsed when a client's `stats_cb` fires and turned into
  samples only when Prometheus scrapes (`ClientStatsCollector`);
* derived values (lag, status, checkpoint age) gathered in the background and rendered
  once per gather by `mirror.monitor.exporter`, which takes names and help text from the
  `*_family` helpers and constants below so they are still defined here.
"""

from __future__ import annotations

import errno
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from mirror.domain.acks import AckBatch, SourcePartition
from mirror.domain.gaps import GapReason, SourceGap
from mirror.errors import MirrorError, UsageError

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------- names (FIXED)

RECORDS_TOTAL = "mirror_records"  # prometheus_client appends _total to counters
BYTES_TOTAL = "mirror_bytes"
LAG_RECORDS = "mirror_replication_lag_records"
LAG_SECONDS = "mirror_replication_lag_seconds"
FLOW_STATUS = "mirror_flow_status"
CHECKPOINT_AGE = "mirror_group_checkpoint_age_seconds"
MONITOR_FLOW_UP = (
    "mirror_monitor_flow_up",
    "1 when the flow's series are in this scrape (its newest gather succeeded and is not stale).",
)
MONITOR_GATHER_AGE = ("mirror_monitor_gather_age_seconds", "Seconds since the served gather of the flow completed.")
CANARY_LATENCY = "mirror_canary_latency_seconds"
CANARY_SENT = "mirror_canary_sent"
CANARY_RECEIVED = "mirror_canary_received"
CANARY_LOST = "mirror_canary_lost"
CANARY_DUPLICATED = "mirror_canary_duplicated"
CANARY_MISSING = "mirror_canary_missing"  # never arrived: the one canary count that pages
TOPIC_CONFIG_DRIFT = "mirror_topic_config_drift"
SOURCE_SKIPPED = "mirror_source_records_skipped"  # {flow,topic,reason}: records the source lost before they were copied
UNEXPECTED_ERRORS = "mirror_unexpected_errors"  # {where}: failures of no known kind, caught by a loop that carries on

# Canary latencies run from milliseconds (healthy, same region) to minutes (a stopped
# mirror catching up); the buckets cover both so p99 stays meaningful in an incident.
CANARY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)


# ---------------------------------------------------------------------------- data path counters


_unexpected: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()
_unexpected_lock = threading.Lock()


def unexpected_errors(registry: CollectorRegistry) -> Counter:
    """Errors no handler knows (a bug, an unforeseen client failure): each is logged with its
    traceback by the loop that caught it and carried on from; `where` names that loop. Any
    increase deserves a look; the loop's own health shows in its other metrics.

    One counter per registry, shared: `mirror run`'s and the canary's metrics may be served
    from one registry, and a name can be registered only once in it.
    """
    with _unexpected_lock:
        counter = _unexpected.get(registry)
        if counter is None:
            counter = _unexpected[registry] = Counter(
                UNEXPECTED_ERRORS,
                "Errors of no known kind, logged with a traceback by the loop that caught them (where) "
                "and carried on from.",
                ["where"],
                registry=registry,
            )
        return counter


class MirrorMetrics:
    """Counters of `mirror run`, incremented per acknowledged batch (never per record)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.unexpected = unexpected_errors(registry)  # where="checkpointer"
        self.records = Counter(
            RECORDS_TOTAL,
            "Records acknowledged by the target (topic = source topic).",
            ["flow", "topic"],
            registry=registry,
        )
        self.bytes = Counter(
            BYTES_TOTAL, "Key + value bytes acknowledged by the target.", ["flow", "topic"], registry=registry
        )
        self.last_ack = Gauge(
            "mirror_last_ack_timestamp_seconds",
            "Wall-clock time of the newest acknowledgement per source partition.",
            ["flow", "topic", "partition"],
            registry=registry,
        )
        self.acked_position = Gauge(
            "mirror_acked_position",
            "Next source offset not yet acknowledged by the target, as the running mirror sees it.",
            ["flow", "topic", "partition"],
            registry=registry,
        )
        self.skipped = Counter(
            SOURCE_SKIPPED,
            "Source records never mirrored: the source lost them before they were copied (reason: retention, "
            "recreated).",
            ["flow", "topic", "reason"],
            registry=registry,
        )


# The reasons `mirror_source_records_skipped_total` pages on (MirrorSourceRecordsSkipped):
# records lost before they were copied. Records before a flow's chosen start are not a loss.
PAGED_GAP_REASONS = (GapReason.RETENTION, GapReason.TRUNCATED, GapReason.RECREATED)


class MetricsListener:
    """`mirror.domain.acks.AckListener` that turns acknowledgements into counters.

    Cheap on purpose: no I/O, never vetoes a commit, and no label lookup per batch (a
    Spark micro-batch acknowledges every partition at once): each partition's gauges and
    each topic's counters are looked up once and kept, and the counters are incremented
    once per topic per call.
    """

    def __init__(self, metrics: MirrorMetrics, clock: Callable[[], float] | None = None) -> None:
        self._m = metrics
        self._clock = clock or time.time
        self._topics: dict[tuple[str, str], tuple[Any, Any]] = {}  # (flow, topic) -> records, bytes
        self._parts: dict[tuple[str, str, int], tuple[Any, Any]] = {}  # -> last_ack, acked_position

    def on_acked(self, batches: Sequence[AckBatch]) -> None:
        now = self._clock()
        sums: dict[tuple[str, str], list[int]] = {}
        for b in batches:
            if b.count or b.bytes:
                counts = sums.setdefault((b.flow, b.source_topic), [0, 0])
                counts[0] += b.count
                counts[1] += b.bytes
            gauges = self._parts.get((b.flow, b.source_topic, b.partition))
            if gauges is None:
                part = str(b.partition)
                gauges = self._parts[(b.flow, b.source_topic, b.partition)] = (
                    self._m.last_ack.labels(b.flow, b.source_topic, part),
                    self._m.acked_position.labels(b.flow, b.source_topic, part),
                )
            gauges[0].set(now)
            gauges[1].set(b.next_offset)
        for key, (count, nbytes) in sums.items():
            counters = self._topics.get(key)
            if counters is None:
                counters = self._topics[key] = (self._m.records.labels(*key), self._m.bytes.labels(*key))
                for reason in PAGED_GAP_REASONS:  # at 0: the page's metric is there, a gap is an increase
                    self._m.skipped.labels(*key, reason.value)
            if count:
                counters[0].inc(count)
            if nbytes:
                counters[1].inc(nbytes)

    def before_commit(self, flow: str, positions: Mapping[SourcePartition, int]) -> None:
        return None

    def on_gap(self, flow: str, gap: SourceGap) -> None:
        self._m.skipped.labels(flow, gap.topic, gap.reason.value).inc(gap.count)

    def on_reset(self, flow: str, partitions: Sequence[SourcePartition]) -> None:
        # Counters only grow (rate() handles that); the position gauges would now lie.
        for topic, partition in partitions:
            # A kept child removed from its metric would be set on unseen: look it up anew.
            self._parts.pop((flow, topic, partition), None)
            try:
                self._m.acked_position.remove(flow, topic, str(partition))
            except KeyError:
                pass

    def close(self) -> None:
        return None


# ---------------------------------------------------------------------------- spark


# A micro-batch lasts from well under a second (a trickle, one commit interval apart) to
# minutes (a backlog under maxOffsetsPerTrigger on a small cluster).
SPARK_BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class SparkMetrics:
    """Spark's own view of a `mirror spark run` query, from its StreamingQueryListener
    (`mirror.spark.progress`). Records and bytes are `MirrorMetrics`', as for `mirror run`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.batch_duration = Histogram(
            "mirror_spark_batch_duration_seconds",
            "Micro-batch duration: planning, the tasks, offset-map rows stored, the group committed.",
            ["flow"],
            buckets=SPARK_BATCH_BUCKETS,
            registry=registry,
        )
        self.input_rows = Counter(
            "mirror_spark_input_records",
            "Source records read by the query's micro-batches (replayed ones too).",
            ["flow"],
            registry=registry,
        )
        self.input_rate = Gauge(
            "mirror_spark_input_records_per_second",
            "Rate at which records arrived for the newest micro-batch (Spark's inputRowsPerSecond).",
            ["flow"],
            registry=registry,
        )
        self.processed_rate = Gauge(
            "mirror_spark_processed_records_per_second",
            "Rate at which the newest micro-batch mirrored records (Spark's processedRowsPerSecond).",
            ["flow"],
            registry=registry,
        )
        self.behind = Gauge(
            "mirror_spark_offsets_behind_latest",
            "Source end offset Spark saw minus the end of its newest micro-batch (read_committed).",
            ["flow", "topic", "partition"],
            registry=registry,
        )
        self._behind: dict[tuple[str, str, int], Any] = {}

    def behind_at(self, flow: str, topic: str, partition: int) -> Any:
        """A partition's `behind` gauge, looked up once: every batch's progress reports every partition."""
        child = self._behind.get((flow, topic, partition))
        if child is None:
            child = self._behind[(flow, topic, partition)] = self.behind.labels(flow, topic, str(partition))
        return child


# ---------------------------------------------------------------------------- topic sync


class TopicSyncMetrics:
    """What `mirror.run.topicsync.TopicSyncer` reports: drift that remains, changes made, failures."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.drift = Gauge(
            TOPIC_CONFIG_DRIFT,
            "1 while a target topic's copied configs or partition count differ from its source's "
            "and the mirror cannot change it (authorization, a broker policy); 0 when in line (topic = source topic).",
            ["flow", "topic"],
            registry=registry,
        )
        self.changes = Counter(
            "mirror_topic_sync_changes",
            "Target topic changes made to follow the source (a config set or reset, a partition increase).",
            ["flow"],
            registry=registry,
        )
        self.failures = Counter(
            "mirror_topic_sync_failures",
            "Target topics the mirror could not bring in line, and sync rounds that failed.",
            ["flow"],
            registry=registry,
        )
        self._topics: dict[str, set[str]] = {}

    def observe(self, flow: str, drift: Mapping[str, int], synced: Sequence[Any]) -> None:
        for topic in self._topics.get(flow, set()) - set(drift):
            self.drift.remove(flow, topic)  # no longer mirrored: the series ends
        self._topics[flow] = set(drift)
        for topic, value in drift.items():
            self.drift.labels(flow, topic).set(value)
        changes = sum(len(s.applied) + (s.grown is not None) for s in synced)
        if changes:
            self.changes.labels(flow).inc(changes)
        failed = sum(1 for s in synced if s.drifting)
        if failed:
            self.failures.labels(flow).inc(failed)


# ---------------------------------------------------------------------------- config reload


class ReloadMetrics:
    """`mirror run`'s config reloads (SIGHUP), named like Prometheus's own
    `prometheus_config_last_reload_successful`: alert on the gauge, not on the log."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.successful = Gauge(
            "mirror_config_reload_successful",
            "1 if the last config reload (or the load at start) was applied, 0 if it was refused.",
            registry=registry,
        )
        self.last_success = Gauge(
            "mirror_config_reload_last_success_timestamp_seconds",
            "Unix time of the last config reload applied (the load at start counts as one).",
            registry=registry,
        )
        self.failures = Counter(
            "mirror_config_reload_failures",
            "Config reloads refused (the file did not load or validate); the running flows carried on.",
            registry=registry,
        )

    def succeeded(self, now: float) -> None:
        self.successful.set(1)
        self.last_success.set(now)

    def failed(self) -> None:
        self.successful.set(0)
        self.failures.inc()


# ---------------------------------------------------------------------------- ACL sync


class AclSyncMetrics:
    """What `mirror.run.aclsync.AclSyncer` reports (flows with `sync_acls`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.in_sync = Gauge(
            "mirror_acl_sync_in_sync",
            "Source ACLs the flow copies that the target holds, as of the last sync round.",
            ["flow"],
            registry=registry,
        )
        self.rounds = Counter(
            "mirror_acl_sync_rounds",
            "ACL sync rounds that finished (both clusters compared).",
            ["flow"],
            registry=registry,
        )
        self.created = Counter(
            "mirror_acl_sync_created", "ACLs the sync copied to the target.", ["flow"], registry=registry
        )
        self.removed = Counter(
            "mirror_acl_sync_removed",
            "ACLs the sync removed from the target because the source no longer has them.",
            ["flow"],
            registry=registry,
        )
        self.refused = Counter(
            "mirror_acl_sync_refused",
            "ACL sync rounds a cluster refused for want of a grant (Describe or Alter on the cluster).",
            ["flow"],
            registry=registry,
        )
        self.failures = Counter(
            "mirror_acl_sync_failures", "ACL sync rounds that failed for any other reason.", ["flow"], registry=registry
        )

    def observe(self, flow: str, plan: Any) -> None:
        """One finished round (`mirror.domain.acl_sync.AclPlan`, applied)."""
        self.rounds.labels(flow).inc()
        self.in_sync.labels(flow).set(plan.in_sync + len(plan.create))
        if plan.create:
            self.created.labels(flow).inc(len(plan.create))
        if plan.remove:
            self.removed.labels(flow).inc(len(plan.remove))


# ---------------------------------------------------------------------------- canary


class CanaryMetrics:
    """Counters and the latency histogram of the canary prober (all FIXED but `late`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.unexpected = unexpected_errors(registry)  # where="canary_round" or "canary_read"
        self.latency = Histogram(
            CANARY_LATENCY,
            "Canary probe latency: produce on the source to read on the target.",
            ["flow"],
            buckets=CANARY_BUCKETS,
            registry=registry,
        )
        self.sent = Counter(
            CANARY_SENT, "Canary probes acknowledged by the source cluster.", ["flow"], registry=registry
        )
        self.received = Counter(
            CANARY_RECEIVED, "Canary probes read on the target (first copy of each).", ["flow"], registry=registry
        )
        self.lost = Counter(
            CANARY_LOST,
            "Canary probes not seen within max_latency, or overtaken by a later one: late (see "
            "_late_total) or missing (see _missing_total). Probes sent before the flow's route existed "
            "are never counted.",
            ["flow"],
            registry=registry,
        )
        self.duplicated = Counter(
            CANARY_DUPLICATED, "Canary probes read on the target more than once.", ["flow"], registry=registry
        )
        self.late = Counter(
            "mirror_canary_late",
            "Canary probes that arrived after max_latency (each was counted lost first): slow, not lost.",
            ["flow"],
            registry=registry,
        )
        self.missing = Counter(
            CANARY_MISSING,
            "Canary probes that never arrived: overtaken by a later probe of their partition and still "
            "absent after max_latency (loss).",
            ["flow"],
            registry=registry,
        )
        self.send_errors = Counter(
            "mirror_canary_send_errors",
            "Canary probes the source cluster refused (not expected on the target).",
            ["flow"],
            registry=registry,
        )
        self.outstanding = Gauge(
            "mirror_canary_outstanding",
            "Probes sent and neither received nor declared lost yet.",
            ["flow"],
            registry=registry,
        )
        self.max_latency = Gauge(
            "mirror_canary_max_latency_seconds",
            "The configured canary.max_latency (alert rules compare p99 with it).",
            ["flow"],
            registry=registry,
        )
        self.runs = Counter(
            "mirror_canary_runs",
            "Sequence restarts (prober start, canary topic recreated).",
            ["flow"],
            registry=registry,
        )


# ---------------------------------------------------------------------------- derived (scrape time)


def lag_records_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        LAG_RECORDS,
        "Source end offset (read_committed) minus the next source offset not yet acknowledged by the target.",
        labels=["flow", "topic", "partition"],
    )


def lag_seconds_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        LAG_SECONDS,
        "Age of the oldest source record not yet mirrored; 0 when caught up.",
        labels=["flow", "topic", "partition"],
    )


def flow_status_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        FLOW_STATUS, "Flow status, worst partition: 0 OK, 1 WARN, 2 ERR, 3 STOP, 4 STALL.", labels=["flow"]
    )


def partition_status_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "mirror_partition_status",
        "Partition status: 0 OK, 1 WARN, 2 ERR, 3 STOP, 4 STALL.",
        labels=["flow", "topic", "partition"],
    )


def checkpoint_age_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        CHECKPOINT_AGE, "Age of the newest stored checkpoint of a consumer group.", labels=["flow", "group"]
    )


def group_lag_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "mirror_group_lag_records",
        "Records a flow's consumer group has not read yet, on the source and on the target cluster.",
        labels=["flow", "group", "cluster", "topic", "partition"],
    )


def group_unmirrored_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "mirror_group_unmirrored_records",
        "Records a group has not read on the source that have not reached the target either (at risk in "
        "a failover now).",
        labels=["flow", "group"],
    )


def target_end_family() -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "mirror_target_end_offset",
        "End offset of the mirrored partition on the target.",
        labels=["flow", "topic", "partition"],
    )


# Why a flow's gather or scrape failed (`mirror_monitor_errors_total{reason}`).
MONITOR_ERROR_REASONS = ("unreachable", "error", "unknown", "partial", "stale", "timeout")


class MonitorMetrics:
    """Counters of the exporter itself: how its gathers and scrapes went.

    Written after the flows' series, so a scrape's error counts already include that
    scrape's own (stale, timeout).
    """

    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.errors = Counter(
            "mirror_monitor_errors",
            "Failed gathers of a flow (unreachable, error, unknown; partial: some figures missing) and "
            "scrapes that left it out (stale, timeout).",
            ["flow", "reason"],
            registry=registry,
        )
        self.gather_seconds = Histogram(
            "mirror_monitor_gather_seconds",
            "Time to gather one flow's lag.",
            ["flow"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(self.errors)
        registry.register(self.gather_seconds)

    def watch(self, flow: str) -> None:
        """Export the flow's error counters at 0 now: a series born at 1 hides its first
        failures from `increase()` (MirrorMonitorBlind) and leaves its panel empty."""
        for reason in MONITOR_ERROR_REASONS:
            self.errors.labels(flow, reason)


# ---------------------------------------------------------------------------- librdkafka statistics


@dataclass
class ClientStats:
    """The tuning figures of one client, from one librdkafka statistics JSON.

    librdkafka's windowed stats (rtt, batchsize) cover one `statistics.interval.ms` (a few
    intervals with none keep the previous figures);
    fetch size is not reported as such, so it is derived from the brokers' `rxbytes`
    and Fetch request counts between two consecutive statistics (hence `_prev`).
    """

    fetch_size_avg: float | None = None  # bytes per fetch response, over the last interval
    fetch_size_max: float | None = None  # the largest per-broker average in that interval
    batch_size_avg: float | None = None  # producer message set size in bytes
    batch_size_max: float | None = None
    batch_count_avg: float | None = None  # records per producer batch
    in_flight: int = 0  # requests sent, awaiting a response
    queued: int = 0  # requests waiting to be sent
    retries: int = 0  # cumulative request retries
    rtt_avg: float | None = None  # seconds
    rtt_max: float | None = None
    tx_messages: int = 0
    rx_messages: int = 0
    _prev: dict[str, tuple[int, int]] = field(default_factory=dict)  # broker -> (rxbytes, fetch requests)
    _kept: dict[str, int] = field(default_factory=dict)  # window figure -> idle intervals it was kept through


def parse_stats(raw: str | Mapping[str, Any], prev: ClientStats | None = None) -> ClientStats:
    """One librdkafka statistics document -> `ClientStats` (pure)."""
    doc: Mapping[str, Any] = json.loads(raw) if isinstance(raw, str) else raw
    out = ClientStats()
    prev_counts = prev._prev if prev else {}
    rtt_avgs: list[float] = []
    rtt_maxs: list[float] = []
    fetch_avgs: list[float] = []
    total_bytes = total_fetches = 0
    retries = 0
    for name, b in (doc.get("brokers") or {}).items():
        if b.get("nodeid", -1) < 0:
            continue  # bootstrap and logical (coordinator) entries duplicate a real broker
        out.in_flight += int(b.get("waitresp_cnt", 0))
        out.queued += int(b.get("outbuf_cnt", 0))
        retries += int(b.get("txretries", 0))
        rtt = b.get("rtt") or {}
        if rtt.get("cnt", 0) > 0:
            rtt_avgs.append(rtt.get("avg", 0) / 1e6)  # librdkafka reports microseconds
            rtt_maxs.append(rtt.get("max", 0) / 1e6)
        rxbytes = int(b.get("rxbytes", 0))
        fetches = int((b.get("req") or {}).get("Fetch", 0))
        out._prev[name] = (rxbytes, fetches)
        if name in prev_counts:
            dbytes, dfetch = rxbytes - prev_counts[name][0], fetches - prev_counts[name][1]
            if dfetch > 0 and dbytes >= 0:
                fetch_avgs.append(dbytes / dfetch)
                total_bytes += dbytes
                total_fetches += dfetch
    out.retries = max(retries, int(doc.get("txretries", 0)))
    if rtt_avgs:
        out.rtt_avg = sum(rtt_avgs) / len(rtt_avgs)
        out.rtt_max = max(rtt_maxs)
    if total_fetches:
        out.fetch_size_avg = total_bytes / total_fetches
        out.fetch_size_max = max(fetch_avgs)
    sizes, counts, maxima = [], [], []
    for t in (doc.get("topics") or {}).values():
        bs, bc = t.get("batchsize") or {}, t.get("batchcnt") or {}
        if bs.get("cnt", 0) > 0:
            sizes.append((bs.get("avg", 0), bs["cnt"]))
            maxima.append(bs.get("max", 0))
        if bc.get("cnt", 0) > 0:
            counts.append((bc.get("avg", 0), bc["cnt"]))
    if sizes:
        n = sum(c for _, c in sizes)
        out.batch_size_avg = sum(a * c for a, c in sizes) / n
        out.batch_size_max = float(max(maxima))
    if counts:
        n = sum(c for _, c in counts)
        out.batch_count_avg = sum(a * c for a, c in counts) / n
    out.tx_messages = int(doc.get("txmsgs", 0))
    out.rx_messages = int(doc.get("rxmsgs", 0))
    if prev is not None:
        _keep_last_window(out, prev)
    return out


# How many idle statistics intervals a window figure outlives: enough for a consumer whose
# long-polling fetch outlasts an interval, not a whole outage (a stale rtt would mislead).
MAX_KEPT_INTERVALS = 3

_WINDOW_FIELDS = (
    "fetch_size_avg",
    "fetch_size_max",
    "batch_size_avg",
    "batch_size_max",
    "batch_count_avg",
    "rtt_avg",
    "rtt_max",
)


def _keep_last_window(out: ClientStats, prev: ClientStats) -> None:
    """An interval in which no fetch returned, nothing was produced or no request was answered
    (a consumer long-polling an idle topic) has no window figures: keep the last seen for up to
    MAX_KEPT_INTERVALS, so a tuning gauge does not flicker out of every other scrape."""
    for name in _WINDOW_FIELDS:
        kept = prev._kept.get(name, 0) + 1
        if getattr(out, name) is None and getattr(prev, name) is not None and kept <= MAX_KEPT_INTERVALS:
            setattr(out, name, getattr(prev, name))
            out._kept[name] = kept


class ClientStatsCollector(Collector):
    """librdkafka statistics of the engine's clients, turned into samples at scrape time.

    The engine sets `statistics.interval.ms` on its clients and passes their `stats_cb`
    JSON to `on_stats(flow, role, json)`; only the newest document per (flow, role) is
    kept, so a scrape shows the latest interval and costs nothing on the data path.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._lock = threading.Lock()
        self._stats: dict[tuple[str, str], ClientStats] = {}
        if registry is not None:
            registry.register(self)

    def on_stats(self, flow: str, role: str, raw: str) -> None:
        key = (flow, role)
        try:
            with self._lock:
                self._stats[key] = parse_stats(raw, self._stats.get(key))
        except (
            ValueError,
            TypeError,
            AttributeError,
        ) as exc:  # a malformed document must not break the client's poll loop
            log.warning("cannot parse librdkafka statistics of flow %s %s: %s", flow, role, exc)

    def stats_cb(self, flow: str, role: str) -> Callable[[str], None]:
        """A `stats_cb` for a confluent-kafka client config (one argument: the JSON)."""
        return lambda raw: self.on_stats(flow, role, raw)

    def describe(self) -> Iterable[Any]:
        return self._families({})

    def collect(self) -> Iterable[Any]:
        with self._lock:
            snapshot = dict(self._stats)
        return self._families(snapshot)

    @staticmethod
    def _families(stats: Mapping[tuple[str, str], ClientStats]) -> list[Any]:
        labels = ["flow", "role"]
        g = {
            "fetch_size_avg": GaugeMetricFamily(
                "mirror_client_fetch_size_avg_bytes",
                "Average fetch response size over the last statistics interval (kept through a few idle ones).",
                labels=labels,
            ),
            "fetch_size_max": GaugeMetricFamily(
                "mirror_client_fetch_size_max_bytes",
                "Largest per-broker average fetch response size over the last statistics interval "
                "(kept through a few idle ones).",
                labels=labels,
            ),
            "batch_size_avg": GaugeMetricFamily(
                "mirror_client_batch_size_avg_bytes",
                "Average producer batch size over the last statistics interval (kept through a few idle ones).",
                labels=labels,
            ),
            "batch_size_max": GaugeMetricFamily(
                "mirror_client_batch_size_max_bytes",
                "Largest producer batch over the last statistics interval (kept through a few idle ones).",
                labels=labels,
            ),
            "batch_count_avg": GaugeMetricFamily(
                "mirror_client_batch_records_avg",
                "Average records per producer batch over the last statistics interval (kept through a few idle ones).",
                labels=labels,
            ),
            "in_flight": GaugeMetricFamily(
                "mirror_client_requests_in_flight", "Requests sent to brokers and awaiting a response.", labels=labels
            ),
            "queued": GaugeMetricFamily(
                "mirror_client_requests_queued", "Requests waiting to be sent to brokers.", labels=labels
            ),
            "rtt_avg": GaugeMetricFamily(
                "mirror_client_rtt_avg_seconds",
                "Average broker round-trip time over the last statistics interval (kept through a few idle ones).",
                labels=labels,
            ),
            "rtt_max": GaugeMetricFamily(
                "mirror_client_rtt_max_seconds",
                "Largest broker round-trip time over the last statistics interval (kept through a few idle ones).",
                labels=labels,
            ),
        }
        retries = CounterMetricFamily("mirror_client_retries", "Requests the client retried.", labels=labels)
        for (flow, role), s in sorted(stats.items()):
            for attr, fam in g.items():
                value = getattr(s, attr)
                if value is not None:
                    fam.add_metric([flow, role], float(value))
            retries.add_metric([flow, role], float(s.retries))
        return [*g.values(), retries]


class FlowStateCollector(Collector):
    """`mirror_flow_state{flow,state}`: 1 for the state each flow of this process is in, 0 for the others.

    Read from the workers at scrape time. It is the daemon's own view (running, retrying
    while a cluster is away, failed, …); `mirror_flow_status` is the monitor's judgement
    from outside.
    """

    def __init__(
        self, states: Callable[[], Mapping[str, str]], all_states: Sequence[str], registry: CollectorRegistry
    ) -> None:
        self._states = states
        self._all = list(all_states)
        registry.register(self)

    def collect(self) -> Iterable[GaugeMetricFamily]:
        g = GaugeMetricFamily(
            "mirror_flow_state",
            "The state each flow of this mirror process is in (1) or not (0).",
            labels=["flow", "state"],
        )
        for flow, current in self._states().items():
            for state in self._all:
                g.add_metric([flow, state], 1.0 if state == current else 0.0)
        yield g


class ThrottleCollector(Collector):
    """A flow's read cap and the time it held reading back, read from the workers at scrape time.

    `mirror_flow_max_bytes_per_second{flow}` and `mirror_flow_max_records_per_second{flow}`:
    the flow's cap (absent when none; each of `--workers N` reads a N-th of it);
    `mirror_flow_throttled_seconds_total{flow}`: seconds this process did not read because
    of the cap (a rate of 1 means it was held back all the time).
    """

    def __init__(
        self,
        throttles: Callable[[], Mapping[str, tuple[float | None, float | None, float]]],
        registry: CollectorRegistry,
    ) -> None:
        self._throttles = throttles  # flow -> (max bytes/s, max records/s, throttled seconds)
        registry.register(self)

    def collect(self) -> Iterable[Any]:
        caps = {
            "bytes": GaugeMetricFamily(
                "mirror_flow_max_bytes_per_second", "The flow's cap on source bytes read per second.", labels=["flow"]
            ),
            "records": GaugeMetricFamily(
                "mirror_flow_max_records_per_second",
                "The flow's cap on source records read per second.",
                labels=["flow"],
            ),
        }
        throttled = CounterMetricFamily(
            "mirror_flow_throttled_seconds",
            "Seconds the flow's worker held reading back to keep within its cap.",
            labels=["flow"],
        )
        for flow, (max_bytes, max_records, seconds) in sorted(self._throttles().items()):
            if max_bytes is not None:
                caps["bytes"].add_metric([flow], float(max_bytes))
            if max_records is not None:
                caps["records"].add_metric([flow], float(max_records))
            throttled.add_metric([flow], seconds)
        yield from caps.values()
        yield throttled


# ---------------------------------------------------------------------------- serving


def cannot_serve(host: str, port: int, exc: OSError) -> MirrorError:
    """A metrics port that cannot be bound. In use (perhaps for now: another process's): exit 1,
    so `--workers` restarts that worker with its back-off rather than dropping it. Anything
    else (a host not on this machine, a name that does not resolve) is the config's: exit 2."""
    if exc.errno == errno.EADDRINUSE:
        return MirrorError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror}",
            hint="choose another port (a --workers N pool serves on it plus 0..N-1)",
        )
    return UsageError(
        f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}", hint="check metrics.host in the config"
    )


def serve(port: int, host: str = "127.0.0.1", registry: CollectorRegistry | None = None) -> WSGIServer:
    """Serve `registry` on http://host:port/metrics in a daemon thread.

    Returns the server: `server.server_port` is the bound port (useful with port 0) and
    `server.shutdown()` stops it. The default host is loopback; `metrics.host` in the
    config (0.0.0.0 in containers) is what the CLI passes.
    """
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry if registry is not None else REGISTRY)
    except OSError as exc:
        raise cannot_serve(host, port, exc) from exc
    log.info("serving metrics on http://%s:%s/metrics", host, server.server_port)
    return server


@dataclass
class RunMetrics:
    """What `mirror run` needs: one registry with the data path counters and client stats."""

    registry: CollectorRegistry
    mirror: MirrorMetrics
    stats: ClientStatsCollector
    listener: MetricsListener
    topic_sync: TopicSyncMetrics
    acl_sync: AclSyncMetrics = field(init=False)

    def __post_init__(self) -> None:
        self.acl_sync = AclSyncMetrics(self.registry)

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None) -> RunMetrics:
        reg = registry if registry is not None else CollectorRegistry()
        m = MirrorMetrics(reg)
        return cls(reg, m, ClientStatsCollector(reg), MetricsListener(m), TopicSyncMetrics(reg))
