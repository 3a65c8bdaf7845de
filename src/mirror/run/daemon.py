"""Assembles a mirror process: the flows' workers and what listens to them.

This is the one place that decides which listeners a worker gets (the offset-map
recorder, the metrics counters), which side loops run next to it (group checkpointers,
target topic syncers, see `mirror.run.flowset`) and what is served (/metrics), so the
engine itself knows nothing of stores or Prometheus. A reload request (SIGHUP) is served
here, on the main thread, between waits on the flows (`mirror.run.reload`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from mirror.config import Config, FlowConfig
from mirror.domain.acks import AckListener
from mirror.engine.worker import FlowState
from mirror.metrics import FlowStateCollector, ReloadMetrics, RunMetrics, ThrottleCollector, serve
from mirror.run import gcpolicy
from mirror.run.flowset import FlowSet
from mirror.run.recorder import OffsetMapRecorder
from mirror.run.reload import Reloader
from mirror.store import open_store

log = logging.getLogger(__name__)

STATS_INTERVAL_MS = 15000  # librdkafka statistics for /metrics; cheap at this rate
WATCH_INTERVAL = 0.2  # how soon a stop, a reload request or a failed flow is noticed


def run_flows(
    config: Config,
    flows: Sequence[FlowConfig],
    *,
    stop: threading.Event,
    until_caught_up: bool = False,
    metrics_port: int | None = None,
    offset_store: bool = True,
    reload: threading.Event | None = None,
    config_path: str | Path | None = None,
    names: Sequence[str] = (),
    pool_size: int = 1,
) -> None:
    """Mirror `flows` until `stop` is set (or caught up); raises `MirrorError` on failure.

    With `reload` and `config_path`: each time `reload` is set, `config_path` is read again
    and its flows (`names` of them, if given) replace the running ones (`Reloader`).
    """
    with ExitStack() as stack:
        store = None
        if offset_store:
            store = open_store(config.offset_store)
            stack.callback(store.close)
        else:
            log.warning(
                "offset store off: no offset map, no checkpoints; failover cannot translate offsets for this run"
            )

        run_metrics = None
        if metrics_port is not None:
            run_metrics = RunMetrics.create()
            server = serve(metrics_port, config.metrics.host, run_metrics.registry)
            stack.callback(server.shutdown)

        def listeners(flow: FlowConfig) -> list[AckListener]:
            out: list[AckListener] = []
            if store is not None:
                out.append(OffsetMapRecorder(store, flow.name, registry=run_metrics.registry if run_metrics else None))
            if run_metrics is not None:
                out.append(run_metrics.listener)
            return out

        flowset = FlowSet(
            store=store,
            run_metrics=run_metrics,
            listeners=listeners,
            until_caught_up=until_caught_up,
            stats_cb=run_metrics.stats.on_stats if run_metrics else None,
            stats_interval_ms=STATS_INTERVAL_MS if run_metrics else 0,
            cap_share=pool_size,  # `--workers N`: each worker reads a N-th of a flow's cap
        )
        flowset.check(config, flows)
        if run_metrics is not None:
            _collect_flows(flowset, run_metrics)
        reloader = None
        if reload is not None and config_path is not None:
            reloader = Reloader(
                config_path,
                config,
                names,
                flowset,
                metrics=ReloadMetrics(run_metrics.registry) if run_metrics else None,
            )
        collection = stack.enter_context(gcpolicy.CollectionSchedule())
        try:
            flowset.start(config, flows)
            while not stop.is_set():
                collection.tick()
                if reloader is not None and reload is not None and reload.is_set():
                    reload.clear()
                    reloader.reload()
                if not flowset.watch(WATCH_INTERVAL):
                    break  # every flow caught up (--until-caught-up)
        finally:
            flowset.stop_all()
        if until_caught_up:
            for running in flowset.finished:
                running.final_ticks()


def _collect_flows(flowset: FlowSet, run_metrics: RunMetrics) -> None:
    """Each running flow's state and read cap, computed at scrape time from the flow set
    (flows a reload added or changed included)."""
    FlowStateCollector(
        lambda: {w.flow.name: w.state.value for w in flowset.workers},
        [s.value for s in FlowState],
        run_metrics.registry,
    )
    ThrottleCollector(
        lambda: {
            w.flow.name: (w.throttle.max_bytes, w.throttle.max_records, w.throttle.throttled_seconds())
            for w in flowset.workers
        },
        run_metrics.registry,
    )
