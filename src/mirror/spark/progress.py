"""Spark's progress of a flow's query, as Prometheus metrics: a `StreamingQueryListener`.

`mirror spark run --metrics-port` serves the metrics `mirror run` serves (records, bytes,
acknowledged positions: fed per batch by `SparkFlow`; `mirror_flow_state`: the run's
`FlowStatus`, set here as the query starts and ends and by the run itself), so
the dashboard and alert rules read both engines alike, plus what only Spark knows: each
micro-batch's duration, input and processing rates, and how far the query's newest batch
ends behind the source. Lag and the flow's status stay `mirror monitor`'s: it judges any
engine from outside, from the group this query commits.

Spark calls a listener on its own thread, once per batch (never per record); a listener's
failure must not end the query, so every callback logs and carries on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from mirror.engine.status import FlowState, FlowStatus
from mirror.metrics import FlowStateCollector, SparkMetrics

log = logging.getLogger(__name__)


def observe_progress(metrics: SparkMetrics, flow: str, progress: Mapping[str, Any]) -> None:
    """One `StreamingQueryProgress` (its JSON form) into `metrics`."""
    if progress.get("batchDuration") is not None:
        metrics.batch_duration.labels(flow).observe(float(progress["batchDuration"]) / 1000)
    rows = int(progress.get("numInputRows") or 0)
    if rows:
        metrics.input_rows.labels(flow).inc(rows)
    for gauge, key in ((metrics.input_rate, "inputRowsPerSecond"), (metrics.processed_rate, "processedRowsPerSecond")):
        value = progress.get(key)
        if isinstance(value, int | float):  # absent (or NaN, as JSON null) on a batch without input
            gauge.labels(flow).set(float(value))
    for source in progress.get("sources") or []:
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        for (topic, partition), offset in end.items():
            if (topic, partition) in latest:
                metrics.behind_at(flow, topic, partition).set(max(0, latest[(topic, partition)] - offset))


def _offsets(raw: Any) -> dict[tuple[str, int], int]:
    doc = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(doc, Mapping):
        return {}
    return {(t, int(p)): int(o) for t, parts in doc.items() if isinstance(parts, Mapping) for p, o in parts.items()}


class FlowProgress(StreamingQueryListener):
    """Listens to the query named `query_name` (one flow's); other queries of the session are ignored.

    The flow's state is `status`, shared with the run: the query's start and end set running,
    stopped or failed here; the run sets retrying (the offset store failing), stopping and
    caught_up, the states `mirror run` reports too."""

    def __init__(self, flow: str, query_name: str, metrics: SparkMetrics, registry: Any, status: FlowStatus) -> None:
        self.flow = flow
        self.query_name = query_name
        self.metrics = metrics
        self.status = status
        self._ids: set[str] = set()
        FlowStateCollector(lambda: {self.flow: self.status.state.value}, [s.value for s in FlowState], registry)

    def onQueryStarted(self, event: Any) -> None:
        if event.name == self.query_name:
            self._ids.add(str(event.id))
            self.status.set(FlowState.RUNNING, "the Spark query started")

    def onQueryProgress(self, event: Any) -> None:
        try:
            progress = json.loads(event.progress.json)
            if progress.get("name") == self.query_name:
                observe_progress(self.metrics, self.flow, progress)
        except Exception:  # noqa: BLE001 - a metrics failure must never fail the query
            log.exception("flow %s: cannot read the query's progress", self.flow)

    def onQueryIdle(self, event: Any) -> None:
        return None

    def onQueryTerminated(self, event: Any) -> None:
        if str(event.id) in self._ids:
            # A query restarted for new topics is running again a moment later (onQueryStarted).
            if event.exception:
                self.status.set(FlowState.FAILED, str(event.exception).strip().split("\n", 1)[0])
            else:
                self.status.set(FlowState.STOPPED, "the Spark query stopped")


def listen(spark: Any, flow: str, query_name: str, registry: Any, status: FlowStatus) -> FlowProgress:
    """Register a `FlowProgress` for the flow's query on `spark`; remove it with `spark.streams.removeListener`."""
    listener = FlowProgress(flow, query_name, SparkMetrics(registry), registry, status)
    spark.streams.addListener(listener)
    return listener
