"""`mirror monitor`: lag, status and checkpoint ages computed when Prometheus scrapes.

Why a custom collector with a deadline: a cluster that stops answering must not hang
`/metrics` (Prometheus would then lose *every* series, including the ones saying the
other flows are fine). Each flow is gathered in a worker thread; a scrape waits for it
at most `deadline` seconds. A flow not done in time, or whose source cluster did not
answer, simply has no lag/status series in that scrape (Prometheus marks them stale)
and `mirror_monitor_errors_total{flow,reason}` goes up. A gather still running from an
earlier scrape is waited on again rather than started twice, so a dead cluster costs
one thread per flow, not one per scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from mirror import metrics as m
from mirror.config import Config, FlowConfig
from mirror.domain.burrow import Status
from mirror.domain.lag import FlowLag
from mirror.errors import ClusterUnavailable, MirrorError
from mirror.kafka import Admin
from mirror.monitor.gather import FlowProbe
from mirror.store import FullOffsetStore, open_optional

log = logging.getLogger(__name__)


class MonitorCollector(Collector):
    """Prometheus collector: one gather per flow per scrape, bounded by `deadline`."""

    def __init__(
        self,
        config: Config,
        flows: Sequence[FlowConfig] | None = None,
        *,
        metrics: m.MonitorMetrics,
        deadline: float = 8.0,
        store: FullOffsetStore | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.flows = list(flows if flows is not None else config.flows)
        self.metrics = metrics
        self.deadline = deadline
        self._lock = threading.Lock()
        self._admin_cache: dict[str, Admin] = {}

        def admins(name: str) -> Admin:
            with self._lock:
                if name not in self._admin_cache:
                    cluster = config.clusters[name]
                    self._admin_cache[name] = Admin(name, cluster.model_copy(update={"timeout": min(cluster.timeout, deadline)}))
                return self._admin_cache[name]

        self._probes = {f.name: FlowProbe(config, f, admins, store, clock, deadline) for f in self.flows}
        self._pool = ThreadPoolExecutor(max_workers=max(2, len(self.flows)), thread_name_prefix="mirror-monitor")
        self._inflight: dict[str, Future[FlowLag]] = {}
        self.last: dict[str, FlowLag] = {}  # newest result per flow (for logs and tests)

    def _timed_gather(self, probe: FlowProbe) -> FlowLag:
        started = time.monotonic()
        try:
            return probe.gather()
        except ClusterUnavailable:
            # Fresh clients for the next scrape: a librdkafka admin client that lived
            # through a broker restart can keep failing group requests long after the
            # broker is back (seen with 2.16), while a new one answers at once.
            with self._lock:
                self._admin_cache.pop(probe.flow.source, None)
                self._admin_cache.pop(probe.flow.target, None)
            probe.reset()
            raise
        finally:
            self.metrics.gather_seconds.labels(probe.flow.name).observe(time.monotonic() - started)

    def _submit(self, name: str) -> Future[FlowLag]:
        with self._lock:
            fut = self._inflight.get(name)
            if fut is None or fut.done():
                fut = self._inflight[name] = self._pool.submit(self._timed_gather, self._probes[name])
            return fut

    def gather_all(self) -> dict[str, FlowLag]:
        """Gather every flow within the deadline; failures are counted and left out."""
        futures = {name: self._submit(name) for name in self._probes}
        end = time.monotonic() + self.deadline
        results: dict[str, FlowLag] = {}
        for name, fut in futures.items():
            try:
                results[name] = fut.result(timeout=max(0.0, end - time.monotonic()))
            except FutureTimeout:
                self.metrics.errors.labels(name, "timeout").inc()
                log.warning("flow %s: lag not gathered within %.1fs; its series are left out of this scrape", name, self.deadline)
            except ClusterUnavailable as exc:
                self.metrics.errors.labels(name, "unreachable").inc()
                log.warning("flow %s: %s", name, exc)
            except MirrorError as exc:
                self.metrics.errors.labels(name, "error").inc()
                log.warning("flow %s: %s", name, exc)
            except Exception:  # unknown: logged with context and counted, never a broken scrape
                self.metrics.errors.labels(name, "unknown").inc()
                log.exception("flow %s: unexpected error gathering lag", name)
        for name, lag in results.items():
            if lag.errors:
                self.metrics.errors.labels(name, "partial").inc()
            self.last[name] = lag
        return results

    def describe(self) -> Iterable[Any]:
        # Without describe(), registering would call collect() and so touch the clusters.
        return self._families({})

    def collect(self) -> Iterable[Any]:
        return self._families(self.gather_all())

    @staticmethod
    def _families(results: dict[str, FlowLag]) -> list[Any]:
        rec, sec, status = m.lag_records_family(), m.lag_seconds_family(), m.flow_status_family()
        pstatus, tend = m.partition_status_family(), m.target_end_family()
        age, glag, risk = m.checkpoint_age_family(), m.group_lag_family(), m.group_unmirrored_family()
        up = GaugeMetricFamily("mirror_monitor_flow_up", "1 when the flow's lag was gathered in this scrape.", labels=["flow"])
        for name, lag in sorted(results.items()):
            up.add_metric([name], 1.0)
            status.add_metric([name], float(Status[lag.status]))
            for p in lag.partitions:
                labels = [name, p.source_topic, str(p.partition)]
                rec.add_metric(labels, float(p.lag_records))
                if p.lag_seconds is not None:
                    sec.add_metric(labels, p.lag_seconds)
                pstatus.add_metric(labels, float(Status[p.status]))
                if p.target_end is not None:
                    tend.add_metric(labels, float(p.target_end))
            for g in lag.groups:
                if g.checkpoint_age is not None:
                    age.add_metric([name, g.group], g.checkpoint_age)
                risk.add_metric([name, g.group], float(g.unmirrored))
                for side, rows in ((lag.source, g.source), (lag.target, g.target)):
                    for r in rows:
                        if r.lag is not None:
                            glag.add_metric([name, g.group, side, r.topic, str(r.partition)], float(r.lag))
        return [rec, sec, status, pstatus, tend, age, glag, risk, up]

    def close(self) -> None:
        # Wait for running gathers (each bounded by the cluster timeouts): closing a
        # librdkafka consumer while another thread reads from it crashes the process.
        self._pool.shutdown(wait=True, cancel_futures=True)
        for probe in self._probes.values():
            probe.close()


def build(config: Config, flows: Sequence[FlowConfig] | None = None, *, registry: CollectorRegistry, deadline: float = 8.0, store: FullOffsetStore | None = None) -> MonitorCollector:
    metrics = m.MonitorMetrics(None)
    collector = MonitorCollector(config, flows, metrics=metrics, deadline=deadline, store=store)
    registry.register(collector)
    metrics.register(registry)
    return collector


def run(config: Config, *, port: int, host: str, stop: threading.Event, deadline: float = 8.0, flows: Sequence[FlowConfig] | None = None) -> None:
    """Serve the monitor's /metrics until `stop` is set."""
    registry = CollectorRegistry()
    store = open_optional(config)
    collector = build(config, flows, registry=registry, deadline=deadline, store=store)
    server = m.serve(port, host, registry)
    log.info("monitor: %d flows on http://%s:%s/metrics", len(collector.flows), host, server.server_port)
    try:
        stop.wait()
    finally:
        server.shutdown()
        collector.close()
        if store is not None:
            store.close()
