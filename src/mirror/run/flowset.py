"""`FlowSet`: the flows of a `mirror run` process, each with its own stop, started and stopped alone.

A flow is a `FlowWorker` thread plus its side loops (group checkpointer, target topic syncer,
topic deleter), all stopped by the flow's own events. So a reload can drain and stop one flow
(its worker commits what the target acknowledged, then its side loops end) while every other
flow's worker goes on reading: nothing the others hold in flight is dropped or sent twice.
One flow failing for good stops them all, as at start (the process exits 1 and is restarted
whole, as it would be if the failure came first).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from mirror.config import Config, FlowConfig
from mirror.domain.acks import AckListener
from mirror.engine.worker import FlowWorker
from mirror.errors import AuthorizationFailed, ClusterUnavailable, MirrorError
from mirror.kafka import Admin
from mirror.kafka.canary_topic import ensure_canary_topic
from mirror.kafka.clients import check_settings
from mirror.kafka.settings import CONSUMER_DEFAULTS, PRODUCER_DEFAULTS
from mirror.metrics import RunMetrics
from mirror.run.aclsync import AclSyncer
from mirror.run.checkpointer import GroupCheckpointer
from mirror.run.topicdeletes import TopicDeleter
from mirror.run.topicsync import TopicSyncer
from mirror.store import FullOffsetStore
from mirror.store.base import CreatedTopicStore

log = logging.getLogger(__name__)

SIDE_JOIN_TIMEOUT = 30.0  # a side loop mid-request when its flow stops: not waited for longer


class RunningFlow:
    """One flow's worker thread and side loops, with the events that stop them."""

    def __init__(self, worker: FlowWorker, sides: Sequence[tuple[str, Any]]) -> None:
        self.worker = worker
        self.name = worker.flow.name
        self.stop = worker.stop
        self.side_stop = threading.Event()  # set once the worker has drained and committed
        self.sides = list(sides)  # (kind, loop with run(stop) and tick())
        self.error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        self.thread = threading.Thread(target=self._run, name=f"flow-{self.name}", daemon=True)

    def start(self) -> None:
        self.thread.start()
        for kind, loop in self.sides:
            t = threading.Thread(target=loop.run, args=(self.side_stop,), name=f"{kind}-{self.name}", daemon=True)
            t.start()
            self._threads.append(t)

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:  # reported by FlowSet.watch on the main thread
            if not isinstance(exc, MirrorError):
                log.exception("flow %s crashed", self.name)
            self.error = exc

    def join(self) -> None:
        """Wait for the worker (drained and committed), then end the side loops."""
        self.thread.join()
        self.side_stop.set()
        for t in self._threads:
            t.join(timeout=SIDE_JOIN_TIMEOUT)

    def final_ticks(self) -> None:
        """One last round of each side loop against the final, committed state (--until-caught-up).

        A checkpoint as fresh as it can be for a migration that ends here; and a last config
        sync, where a refusal for want of a grant fails the run (the loop only warns, and a
        run that ends here would leave the target differing unnoticed)."""
        for kind, loop in self.sides:
            if kind == "checkpoint":
                loop.tick()
        for kind, loop in self.sides:
            if kind == "topicsync":
                denied = [s for s in loop.tick() if s.denied]
                if denied:
                    raise AuthorizationFailed(denied[0].failed or "")  # the message carries its hint


class FlowSet:
    """The running flows by name: `start`, `stop`, and `watch` for the first failure."""

    def __init__(
        self,
        *,
        store: FullOffsetStore | None,
        run_metrics: RunMetrics | None,
        listeners: Callable[[FlowConfig], list[AckListener]],
        **worker_args: Any,
    ) -> None:
        self._store = store
        self._metrics = run_metrics
        self._listeners = listeners
        self._worker_args = worker_args
        self.flows: dict[str, RunningFlow] = {}
        self.finished: list[RunningFlow] = []  # stopped with the whole set, for final_ticks
        # One per flow name, kept across restarts: a flow restarted by a reload may start while
        # its old deleter still finishes a request (joined for SIDE_JOIN_TIMEOUT only); the new
        # one's rounds wait for the old one's, which deletes nothing once its stop is set.
        self._delete_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()  # `workers` is read by the metrics server's thread

    @property
    def workers(self) -> list[FlowWorker]:
        with self._lock:
            return [f.worker for f in self.flows.values()]

    def check(self, config: Config, flows: Sequence[FlowConfig]) -> None:
        check_client_settings(config, flows)
        check_literal_topics(config, flows)

    def start(self, config: Config, flows: Sequence[FlowConfig]) -> None:
        ensure_canary_topics(config, flows)
        for flow in flows:
            running = RunningFlow(
                FlowWorker(config, flow, stop=threading.Event(), listeners=self._listeners(flow), **self._worker_args),
                self._sides(config, flow),
            )
            with self._lock:
                self.flows[flow.name] = running
            running.start()
            log.info("flow %s started", flow.name)

    def _sides(self, config: Config, flow: FlowConfig) -> list[tuple[str, Any]]:
        m = self._metrics
        sides: list[tuple[str, Any]] = []
        if self._store is not None and flow.groups:
            sides.append(("checkpoint", GroupCheckpointer(config, flow, self._store, metrics=m.mirror if m else None)))
        # Target topics follow their sources from a side thread, never from the record loop.
        if flow.sync_topic_configs:
            sides.append(("topicsync", TopicSyncer(config, flow, m.topic_sync if m else None)))
        if flow.sync_acls:
            if self._store is not None:
                sides.append(("aclsync", AclSyncer(config, flow, self._store, m.acl_sync if m else None)))
            else:
                log.warning(
                    "flow %s: sync_acls needs the offset store (its record of the ACLs it made): not synced", flow.name
                )
        if flow.sync_topic_deletes:
            if isinstance(self._store, CreatedTopicStore):
                lock = self._delete_locks.setdefault(flow.name, threading.Lock())
                sides.append(("topicdeletes", TopicDeleter(config, flow, self._store, lock=lock)))
            else:
                log.warning(
                    "flow %s: sync_topic_deletes is off for this run: no offset store records which topics it created",
                    flow.name,
                )
        return sides

    def stop(self, names: Sequence[str]) -> None:
        """Drain, commit and stop these flows (all at once), and forget them."""
        with self._lock:
            stopping = [self.flows.pop(n) for n in names if n in self.flows]
        for f in stopping:
            f.stop.set()
        for f in stopping:
            f.join()
            log.info("flow %s stopped (drained and committed)", f.name)
        failed = [f.error for f in stopping if f.error is not None]
        if failed:
            raise failed[0]

    def stop_all(self) -> None:
        with self._lock:
            running = list(self.flows.values())
            self.flows.clear()
        for f in running:
            f.stop.set()
        for f in running:
            f.join()
        self.finished.extend(running)

    def watch(self, timeout: float) -> bool:
        """Wait up to `timeout`; False once no flow runs any more. Raises the first flow's failure."""
        with self._lock:
            running = list(self.flows.values())
        for f in running:
            f.thread.join(timeout=timeout / max(1, len(running)))
            if f.error is not None:
                raise f.error
        return any(f.thread.is_alive() for f in running)


def check_client_settings(config: Config, flows: Sequence[FlowConfig]) -> None:
    """A cluster `client:` setting or a flow `consumer:`/`producer:` setting librdkafka refuses
    raises `ConfigError` here, before any flow stops or any request is sent: a worker would
    otherwise meet it only in `open()`, after a reload had stopped the flow it replaces.
    Judged by an admin client, which is a producer to librdkafka: the checks it makes only of
    a consumer's settings taken together (fetch sizes) still wait for the worker's `open()`."""
    for flow in flows:
        check_settings(flow.source, config.clusters[flow.source], {**CONSUMER_DEFAULTS, **flow.consumer})
        check_settings(flow.target, config.clusters[flow.target], {**PRODUCER_DEFAULTS, **flow.producer})


def check_literal_topics(config: Config, flows: Sequence[FlowConfig]) -> None:
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


def ensure_canary_topics(config: Config, flows: Sequence[FlowConfig]) -> None:
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
