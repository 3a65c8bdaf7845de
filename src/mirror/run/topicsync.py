"""Target topics that follow their sources: configs and partition counts, every `sync_topic_configs_interval`.

Target topics are created with their source's configs (`mirror.engine.targets.ensure_targets`);
without this loop a retention or cleanup-policy change on the source would never reach the
target, and a failover would land on a topic that keeps data for a different time or
compacts where the source did not. It runs beside the flow's worker, never in its record
loop: one comparison of the flow's topics per interval, a few admin requests.
"""

from __future__ import annotations

import logging
import threading

from mirror.config import Config, FlowConfig
from mirror.domain.topics import mirrorable_topics
from mirror.engine.targets import TopicSync, sync_topics
from mirror.errors import MirrorError
from mirror.kafka import Admin
from mirror.kafka.admin import FlowAdmins
from mirror.metrics import TopicSyncMetrics

log = logging.getLogger(__name__)


class TopicSyncer:
    """One flow's sync loop: `tick()` once, or `run(stop)` until the event is set."""

    def __init__(
        self,
        config: Config,
        flow: FlowConfig,
        metrics: TopicSyncMetrics | None = None,
        *,
        source: Admin | None = None,
        target: Admin | None = None,
    ) -> None:
        self.config = config
        self.flow = flow
        self.metrics = metrics  # when the process serves /metrics
        self.admins = FlowAdmins(config, flow, source=source, target=target)
        self.drift: dict[str, int] = {}  # source topic -> 1 while its target still differs
        self.last_error: str | None = None

    def tick(self) -> list[TopicSync]:
        mappings, _ = mirrorable_topics(self.config, self.flow, self.admins.source.topics())
        synced = sync_topics(self.admins.source, self.admins.target, mappings)
        failed = {s.source for s in synced if s.drifting}
        self.drift = {m.source: int(m.source in failed) for m in mappings}
        if self.metrics is not None:
            self.metrics.observe(self.flow.name, self.drift, synced)
        return synced

    def run(self, stop: threading.Event) -> None:
        """Tick every `sync_topic_configs_interval` until `stop` is set.

        Failures are logged and counted, never fatal.
        """
        interval = self.flow.sync_topic_configs_interval
        # The worker creates the flow's target topics on its first refresh; the first
        # comparison waits one interval rather than racing it.
        while not stop.wait(interval):
            try:
                self.tick()
                if self.last_error is not None:
                    log.warning("flow %s: target topics are being synced again", self.flow.name)
                self.last_error = None
            except MirrorError as exc:
                if str(exc) != self.last_error:
                    log.warning("flow %s: topic sync skipped (retrying every %gs): %s", self.flow.name, interval, exc)
                self.last_error = str(exc)
                self._count_failure()
            except Exception:
                log.exception("flow %s: topic sync failed unexpectedly", self.flow.name)
                self.last_error = "unexpected error"
                self._count_failure()

    def _count_failure(self) -> None:
        if self.metrics is not None:
            self.metrics.failures.labels(self.flow.name).inc()
