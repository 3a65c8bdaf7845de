"""Assembles a mirror process: the flows' workers and what listens to them.

This is the one place that decides which listeners a worker gets (the offset-map
recorder, the metrics counters), which side loops run next to it (group checkpointers,
target topic syncers) and what is served (/metrics), so the engine itself knows nothing of
stores or Prometheus.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from contextlib import ExitStack

from mirror.config import Config, FlowConfig
from mirror.domain.acks import AckListener
from mirror.engine.flow_threads import FlowThreads
from mirror.engine.worker import FlowState
from mirror.errors import AuthorizationFailed, ClusterUnavailable, MirrorError
from mirror.kafka import Admin
from mirror.kafka.canary_topic import ensure_canary_topic
from mirror.metrics import FlowStateCollector, RunMetrics, serve
from mirror.run.aclsync import AclSyncer
from mirror.run.checkpointer import GroupCheckpointer
from mirror.run.recorder import OffsetMapRecorder
from mirror.run.topicsync import TopicSyncer
from mirror.store import FullOffsetStore, open_store

log = logging.getLogger(__name__)

STATS_INTERVAL_MS = 15000  # librdkafka statistics for /metrics; cheap at this rate


def run_flows(
    config: Config,
    flows: Sequence[FlowConfig],
    *,
    stop: threading.Event,
    until_caught_up: bool = False,
    metrics_port: int | None = None,
    offset_store: bool = True,
) -> None:
    """Mirror `flows` until `stop` is set (or caught up); raises `MirrorError` on failure."""
    _check_literal_topics(config, flows)
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

        side_stop = threading.Event()  # checkpointers stop after the workers have drained
        checkpointers = _start_checkpointers(config, flows, store, run_metrics, side_stop)
        _ensure_canary_topics(config, flows)
        syncers = _start_topic_syncers(config, flows, run_metrics, side_stop)
        acl_syncers = _start_acl_syncers(config, flows, store, run_metrics, side_stop)

        runner = FlowThreads(
            config,
            flows,
            stop=stop,
            listeners=listeners,
            until_caught_up=until_caught_up,
            stats_cb=run_metrics.stats.on_stats if run_metrics else None,
            stats_interval_ms=STATS_INTERVAL_MS if run_metrics else 0,
        )
        if run_metrics is not None:
            FlowStateCollector(
                lambda: {w.flow.name: w.state.value for w in runner.workers},
                [s.value for s in FlowState],
                run_metrics.registry,
            )
        try:
            runner.run()
        finally:
            side_stop.set()
            for _, t in checkpointers:
                t.join(timeout=30)
            for _, t in [*syncers, *acl_syncers]:
                t.join(timeout=30)
        if until_caught_up:
            _final_ticks([cp for cp, _ in checkpointers], [sy for sy, _ in syncers])


def _start_checkpointers(
    config: Config,
    flows: Sequence[FlowConfig],
    store: FullOffsetStore | None,
    run_metrics: RunMetrics | None,
    side_stop: threading.Event,
) -> list[tuple[GroupCheckpointer, threading.Thread]]:
    """One thread per flow with groups, checkpointing them until `side_stop` (none without a store)."""
    out: list[tuple[GroupCheckpointer, threading.Thread]] = []
    if store is None:
        return out
    for flow in flows:
        if flow.groups:
            cp = GroupCheckpointer(config, flow, store, metrics=run_metrics.mirror if run_metrics else None)
            t = threading.Thread(target=cp.run, args=(side_stop,), name=f"checkpoint-{flow.name}", daemon=True)
            t.start()
            out.append((cp, t))
    return out


def _start_topic_syncers(
    config: Config, flows: Sequence[FlowConfig], run_metrics: RunMetrics | None, side_stop: threading.Event
) -> list[tuple[TopicSyncer, threading.Thread]]:
    """Target topics follow their sources (configs, partition increases) from a side
    thread per flow, never from the record loop."""
    out: list[tuple[TopicSyncer, threading.Thread]] = []
    for flow in flows:
        if flow.sync_topic_configs:
            syncer = TopicSyncer(config, flow, run_metrics.topic_sync if run_metrics else None)
            t = threading.Thread(target=syncer.run, args=(side_stop,), name=f"topicsync-{flow.name}", daemon=True)
            t.start()
            out.append((syncer, t))
    return out


def _start_acl_syncers(
    config: Config,
    flows: Sequence[FlowConfig],
    store: FullOffsetStore | None,
    run_metrics: RunMetrics | None,
    side_stop: threading.Event,
) -> list[tuple[AclSyncer, threading.Thread]]:
    """Target ACLs follow the source's for flows with `sync_acls` (none without a store: the
    sync's record of the ACLs it created lives there)."""
    out: list[tuple[AclSyncer, threading.Thread]] = []
    for flow in flows:
        if not flow.sync_acls:
            continue
        if store is None:
            log.warning(
                "flow %s: sync_acls needs the offset store (its record of the ACLs it made): not synced", flow.name
            )
            continue
        syncer = AclSyncer(config, flow, store, run_metrics.acl_sync if run_metrics else None)
        t = threading.Thread(target=syncer.run, args=(side_stop,), name=f"aclsync-{flow.name}", daemon=True)
        t.start()
        out.append((syncer, t))
    return out


def _final_ticks(checkpointers: Sequence[GroupCheckpointer], syncers: Sequence[TopicSyncer]) -> None:
    """One last checkpoint of every group against the final, fully committed state, so a
    migration that ends here leaves translations as fresh as they can be; and one last
    config sync, where a refusal for want of a grant fails the run (the daemon's loop only
    warns, and a run that ends here would leave the target differing unnoticed)."""
    for cp in checkpointers:
        cp.tick()
    for syncer in syncers:
        denied = [s for s in syncer.tick() if s.denied]
        if denied:
            raise AuthorizationFailed(denied[0].failed or "")  # the message carries its hint


def _check_literal_topics(config: Config, flows: Sequence[FlowConfig]) -> None:
    """A source topic the principal may not see stops the run: one named literally (or the
    canary topic), or a regex's whole prefix when no topic matches it.

    Listings leave such topics out, so without this the mirror would wait for them forever,
    as if they did not exist yet (or, with --until-caught-up, call nothing "caught up").
    """
    for flow in flows:
        try:
            admin = Admin(flow.source, config.clusters[flow.source])
            listed = admin.topics()
        except ClusterUnavailable as exc:
            log.debug("flow %s: topic visibility not checked: %s", flow.name, exc)  # the workers wait for the source
            continue
        admin.require_visible(flow.topics.include, listed, "Read", literal=[config.canary.topic])


def _ensure_canary_topics(config: Config, flows: Sequence[FlowConfig]) -> None:
    """Make the canary topic on each source before the first topic refresh, so the canary's
    route exists from the start. Not fatal: a source that forbids it only delays the route."""
    for source in sorted({f.source for f in flows}):
        try:
            count, created = ensure_canary_topic(Admin(source, config.clusters[source]), config.canary.topic)
        except AuthorizationFailed as exc:
            # Least privilege leaves Create on it to `mirror canary`, which makes it itself.
            log.info(
                "not making the canary topic %s on %s (`mirror canary` makes it): %s", config.canary.topic, source, exc
            )
            continue
        except MirrorError as exc:
            log.warning(
                "could not make the canary topic %s on %s (probes reach the target after a later topic refresh): %s",
                config.canary.topic,
                source,
                exc,
            )
            continue
        if created:
            log.info("created the canary topic %s on %s (%d partitions)", config.canary.topic, source, count)
