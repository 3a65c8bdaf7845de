"""The executors' Kafka clients made ready while the driver plans a query's first batch.

Between a query's `start()` and its first record, Spark plans batch 0 on the driver (offsets,
the plan, the offset log, our `foreachBatch`), and only then does the JVM writer's job reach
the executors, whose first tasks load the writer's and the Kafka clients' classes, create the
cached producer and fetch the target topics' metadata before the first send. None of that needs
the batch: `io.mirror.spark.Warmup` does it in a small job of its own, started as the query
is, so the executors do it while the driver plans (a second core's work instead of the first
batch's).

It is a head start and nothing more: it produces nothing, the query never waits for it, and
whatever goes wrong with it is logged and forgotten (the first batch then creates its clients
itself, as it would without it). It ends with the query: its job group is cancelled and its
thread awaited (briefly: its tasks only construct clients).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import reduce
from typing import Any

from mirror.spark.jvm import JvmWriter, batch_plan
from mirror.spark.task import TaskPlan

log = logging.getLogger(__name__)

WARMUP_CLASS = "io.mirror.spark.Warmup"
CLOSE_TIMEOUT = 10.0  # seconds to await the job at the query's end; it is a daemon thread past that


class Warmup:
    """One running warm-up job (py4j handle on `io.mirror.spark.Warmup`)."""

    def __init__(self, flow: str, handle: Any) -> None:
        self.flow = flow
        self._handle = handle

    @classmethod
    def start(cls, spark: Any, writer: JvmWriter, plan: TaskPlan, topics: Iterable[str]) -> Warmup | None:
        """Start warming the executors for `plan`'s batches over the source `topics` (their
        target topics' producers); None when the JVM writer is not used (nothing to warm) or
        the job could not be started (logged)."""
        if not writer.usable(spark._jvm) or writer.settings is None:
            return None
        try:
            spec = batch_plan(plan, writer.settings, topics, ())
            handle = reduce(getattr, WARMUP_CLASS.split("."), spark._jvm).start(spark._jsparkSession, spec)
        except Exception as exc:  # noqa: BLE001 - py4j's errors; a warm-up never fails the run
            log.info("flow %s: the executors' warm-up did not start (%s); the first batch warms them", writer.flow, exc)
            return None
        return cls(writer.flow, handle)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Cancel what has not run, wait for the job to end, say how it went (DEBUG; INFO if it failed)."""
        try:
            self._handle.cancel()
            ended = bool(self._handle.waitFor(int(timeout * 1000)))
            outcome = self._handle.outcome()
        except Exception as exc:  # noqa: BLE001 - the JVM may be stopping: nothing of this run depends on it
            log.debug("flow %s: the executors' warm-up: no answer at the end (%s)", self.flow, exc)
            return
        if not ended:
            log.info("flow %s: the executors' warm-up still ran %.0f s after its cancellation", self.flow, timeout)
        elif outcome:
            log.info("flow %s: the executors' warm-up did not complete (%s)", self.flow, outcome)
        else:
            log.debug("flow %s: the executors' warm-up ran", self.flow)
