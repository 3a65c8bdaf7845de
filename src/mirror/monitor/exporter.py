"""`mirror monitor`: lag, status and checkpoint ages, gathered in the background, served at once.

Each flow is gathered by a thread of its own, on an interval: the next gather starts
`interval` seconds after the previous one ended, so a slow gather (thousands of partitions, a
cluster not answering) costs at most its share and never piles up. A gather is rendered to
Prometheus text when it completes; a scrape writes the newest completed gathers out as
they are, so it is as fast as copying a few megabytes, whatever the clusters do.

What a scrape leaves out (Prometheus then marks the series stale, as it does for a
monitor that cannot see):

* a flow whose newest gather failed (its source did not answer, an unexpected error):
  counted once per failed gather in `mirror_monitor_errors_total{flow,reason}`
  (`unreachable`, `error`, `unknown`);
* a flow whose newest gather is older than `stale_after` (3 x interval + scrape timeout by
  default: the gathers stopped completing): counted per scrape, `reason="stale"`;
* before the first gather of a flow completed, a scrape waits for it up to the scrape
  timeout; not done by then: left out, `reason="timeout"`.

`mirror_monitor_gather_age_seconds{flow}` says how old the served gather is. A dead
cluster never hangs /metrics, costs one thread per flow (the gather is bounded by the
cluster timeouts, themselves at most the scrape timeout), and `close()` stops the threads
cleanly (each finishes its gather first: closing a librdkafka client another thread uses
crashes the process).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.utils import floatToGoString

from mirror import metrics as m
from mirror.config import Config, FlowConfig
from mirror.domain.lag import FlowLag
from mirror.domain.lag_status import Status
from mirror.errors import ClusterUnavailable, MirrorError
from mirror.kafka import Admin
from mirror.monitor.gather import FlowProbe
from mirror.store import FullOffsetStore, open_optional

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(value: float) -> str:
    return floatToGoString(value)


# The families a gather renders, in exposition order, from the `*_family` definitions in
# mirror.metrics (names and help text live there).
_FAMILIES = [
    m.lag_records_family(),
    m.lag_seconds_family(),
    m.flow_status_family(),
    m.partition_status_family(),
    m.target_end_family(),
    m.checkpoint_age_family(),
    m.group_lag_family(),
    m.group_unmirrored_family(),
]
FLOW_UP, GATHER_AGE = m.MONITOR_FLOW_UP[0], m.MONITOR_GATHER_AGE[0]


def _header(name: str, doc: str, kind: str = "gauge") -> str:
    return f"# HELP {name} {doc.replace(chr(92), chr(92) * 2).replace(chr(10), chr(92) + 'n')}\n# TYPE {name} {kind}\n"


def render(lag: FlowLag) -> dict[str, str]:
    """One gather as Prometheus text: family name -> its sample lines for this flow.

    Written directly rather than through prometheus_client's families: building and
    formatting family objects for tens of thousands of samples is slow enough to matter,
    and a gather does it once instead of every scrape.
    """
    f = _esc(lag.flow)
    rec, sec, pst, tend = [], [], [], []
    for p in lag.partitions:
        labels = f'{{flow="{f}",topic="{_esc(p.source_topic)}",partition="{p.partition}"}} '
        rec.append(f"mirror_replication_lag_records{labels}{_num(p.lag_records)}\n")
        if p.lag_seconds is not None:
            sec.append(f"mirror_replication_lag_seconds{labels}{_num(p.lag_seconds)}\n")
        pst.append(f"mirror_partition_status{labels}{_num(Status[p.status])}\n")
        if p.target_end is not None:
            tend.append(f"mirror_target_end_offset{labels}{_num(p.target_end)}\n")
    age, glag, risk = [], [], []
    for g in lag.groups:
        gl = f'flow="{f}",group="{_esc(g.group)}"'
        if g.checkpoint_age is not None:
            age.append(f"{m.CHECKPOINT_AGE}{{{gl}}} {_num(g.checkpoint_age)}\n")
        risk.append(f"mirror_group_unmirrored_records{{{gl}}} {_num(g.unmirrored)}\n")
        for side, rows in ((lag.source, g.source), (lag.target, g.target)):
            for r in rows:
                if r.lag is not None:
                    glag.append(
                        f'mirror_group_lag_records{{{gl},cluster="{_esc(side)}",'
                        f'topic="{_esc(r.topic)}",partition="{r.partition}"}} {_num(r.lag)}\n'
                    )
    lines = {
        m.LAG_RECORDS: rec,
        m.LAG_SECONDS: sec,
        m.FLOW_STATUS: [f'{m.FLOW_STATUS}{{flow="{f}"}} {_num(Status[lag.status])}\n'],
        "mirror_partition_status": pst,
        "mirror_target_end_offset": tend,
        m.CHECKPOINT_AGE: age,
        "mirror_group_lag_records": glag,
        "mirror_group_unmirrored_records": risk,
    }
    return {name: "".join(v) for name, v in lines.items()}


@dataclass(frozen=True)
class Gathered:
    """The newest completed gather of a flow: its lag (None: the gather failed) and text."""

    lag: FlowLag | None
    done: float  # monotonic seconds when it completed
    text: dict[str, str]


def pick(
    gathered: dict[str, Gathered], flows: list[str], now: float, stale_after: float
) -> tuple[dict[str, Gathered], dict[str, str]]:
    """Which gathers a scrape at `now` serves, and why the others are left out.

    Returns (served, flow -> reason): `timeout` for a flow not gathered yet, `stale` for a
    gather completed more than `stale_after` seconds ago. A failed gather is left out
    without a reason here: it was counted when it failed.
    """
    served: dict[str, Gathered] = {}
    left_out: dict[str, str] = {}
    for name in flows:
        g = gathered.get(name)
        if g is None:
            left_out[name] = "timeout"
        elif g.lag is None:
            continue
        elif now - g.done > stale_after:
            left_out[name] = "stale"
        else:
            served[name] = g
    return served, left_out


def text(served: dict[str, Gathered], now: float) -> str:
    """The flows' part of /metrics: each family's header once, then every served flow's lines."""
    parts: list[str] = []
    names = sorted(served)
    for fam in _FAMILIES:
        parts.append(_header(fam.name, fam.documentation))
        parts.extend(served[n].text.get(fam.name, "") for n in names)
    parts.append(_header(*m.MONITOR_FLOW_UP))
    parts.extend(f'{FLOW_UP}{{flow="{_esc(n)}"}} 1.0\n' for n in names)
    parts.append(_header(*m.MONITOR_GATHER_AGE))
    parts.extend(f'{GATHER_AGE}{{flow="{_esc(n)}"}} {_num(round(now - served[n].done, 3))}\n' for n in names)
    return "".join(parts)


class MonitorCollector:
    """Gathers every flow in the background (one thread each) and renders /metrics from the newest gathers."""

    def __init__(
        self,
        config: Config,
        flows: Sequence[FlowConfig] | None = None,
        *,
        metrics: m.MonitorMetrics,
        registry: CollectorRegistry,
        deadline: float = 8.0,
        interval: float = 15.0,
        stale_after: float | None = None,
        store: FullOffsetStore | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.flows = list(flows if flows is not None else config.flows)
        self.metrics = metrics
        self.registry = registry  # the exporter's own metrics, written after the flows' series
        self.deadline = deadline
        self.interval = interval
        self.stale_after = stale_after if stale_after is not None else 3 * interval + deadline
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._admin_cache: dict[str, Admin] = {}

        def admins(name: str) -> Admin:
            with self._lock:
                if name not in self._admin_cache:
                    cluster = config.clusters[name]
                    self._admin_cache[name] = Admin(
                        name, cluster.model_copy(update={"timeout": min(cluster.timeout, deadline)})
                    )
                return self._admin_cache[name]

        self._probes = {f.name: FlowProbe(config, f, admins, store, clock, deadline) for f in self.flows}
        for name in self._probes:
            metrics.watch(name)
        self._gathered: dict[str, Gathered] = {}
        self._threads: list[threading.Thread] = []
        self.last: dict[str, FlowLag] = {}  # newest successful gather per flow (for logs and tests)

    # -- gathering (one thread per flow)
    def start(self) -> None:
        if self._threads:
            return
        for name in self._probes:
            t = threading.Thread(target=self._loop, args=(name,), name=f"mirror-monitor-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def _loop(self, name: str) -> None:
        probe = self._probes[name]
        while not self._stop.is_set():
            lag = self._gather_once(probe)
            text = render(lag) if lag is not None else {}
            with self._done:
                self._gathered[name] = Gathered(lag, time.monotonic(), text)
                if lag is not None:
                    self.last[name] = lag
                self._done.notify_all()
            self._stop.wait(self.interval)

    def _gather_once(self, probe: FlowProbe) -> FlowLag | None:
        name = probe.flow.name
        started = time.monotonic()
        try:
            lag = probe.gather()
        except ClusterUnavailable as exc:
            # Fresh clients for the next gather: a librdkafka admin client that lived
            # through a broker restart can keep failing group requests long after the
            # broker is back (librdkafka 2.16), while a new one answers at once.
            with self._lock:
                self._admin_cache.pop(probe.flow.source, None)
                self._admin_cache.pop(probe.flow.target, None)
            probe.reset()
            self.metrics.errors.labels(name, "unreachable").inc()
            log.warning("flow %s: %s", name, exc)
            return None
        except MirrorError as exc:
            self.metrics.errors.labels(name, "error").inc()
            log.warning("flow %s: %s", name, exc)
            return None
        except Exception:  # unknown: logged with context and counted, never a dead thread
            self.metrics.errors.labels(name, "unknown").inc()
            log.exception("flow %s: unexpected error gathering lag", name)
            return None
        finally:
            self.metrics.gather_seconds.labels(name).observe(time.monotonic() - started)
        if lag.errors:
            self.metrics.errors.labels(name, "partial").inc()
        return lag

    # -- serving
    def served(self) -> dict[str, Gathered]:
        """The gathers a scrape serves now (see `pick`); before a flow's first gather
        completed, waits for it up to the scrape timeout."""
        end = time.monotonic() + self.deadline
        with self._done:
            while (
                not self._stop.is_set()
                and any(n not in self._gathered for n in self._probes)
                and (left := end - time.monotonic()) > 0
            ):
                self._done.wait(left)
            gathered = dict(self._gathered)
        out, left_out = pick(gathered, list(self._probes), time.monotonic(), self.stale_after)
        for name, reason in left_out.items():
            self.metrics.errors.labels(name, reason).inc()
            log.warning(
                "flow %s: %s; its series are left out of this scrape",
                name,
                f"no lag gathered within {self.deadline:g}s"
                if reason == "timeout"
                else f"newest lag gathered more than {self.stale_after:g}s ago",
            )
        return out

    def exposition(self) -> bytes:
        """The whole /metrics text: the flows' series, then the exporter's own metrics."""
        served = self.served()
        return text(served, time.monotonic()).encode() + generate_latest(self.registry)

    def close(self) -> None:
        self._stop.set()
        with self._done:
            self._done.notify_all()
        for t in self._threads:
            t.join()
        for probe in self._probes.values():
            probe.close()


class _Handler(BaseHTTPRequestHandler):
    collector: MonitorCollector

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        try:
            body = self.collector.exposition()
        except Exception:  # never a broken connection: a 500 Prometheus records as a failed scrape
            log.exception("monitor: rendering /metrics failed")
            self.send_error(500)
            return
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


def serve(collector: MonitorCollector, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serve the collector's /metrics (any path, as prometheus_client does) in a daemon
    thread; `server.server_port` is the bound port, `server.shutdown()` stops it."""
    handler = type("Handler", (_Handler,), {"collector": collector})
    try:
        server = ThreadingHTTPServer((host, port), handler)
    except OSError as exc:
        raise m.cannot_serve(host, port, exc) from exc
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="mirror-monitor-http", daemon=True).start()
    return server


def build(
    config: Config,
    flows: Sequence[FlowConfig] | None = None,
    *,
    registry: CollectorRegistry | None = None,
    deadline: float = 8.0,
    interval: float = 15.0,
    store: FullOffsetStore | None = None,
    stale_after: float | None = None,
) -> MonitorCollector:
    """The collector, gathering already (its first gathers start now)."""
    registry = registry if registry is not None else CollectorRegistry()
    metrics = m.MonitorMetrics(registry)
    collector = MonitorCollector(
        config,
        flows,
        metrics=metrics,
        registry=registry,
        deadline=deadline,
        interval=interval,
        store=store,
        stale_after=stale_after,
    )
    collector.start()
    return collector


def run(
    config: Config,
    *,
    port: int,
    host: str,
    stop: threading.Event,
    deadline: float = 8.0,
    interval: float = 15.0,
    flows: Sequence[FlowConfig] | None = None,
) -> None:
    """Gather every flow and serve /metrics until `stop` is set."""
    store = open_optional(config)
    collector = build(config, flows, deadline=deadline, interval=interval, store=store)
    server = serve(collector, port, host)
    log.info(
        "monitor: %d flows on http://%s:%s/metrics, gathered every %gs",
        len(collector.flows),
        host,
        server.server_port,
        interval,
    )
    try:
        stop.wait()
    finally:
        server.shutdown()
        server.server_close()
        collector.close()
        if store is not None:
            store.close()
