"""The few lines a healthy flow logs: started, each rebalance, stopped.

They go to the `mirror.lifecycle` logger, which the CLI shows at the default level (the
rest of INFO needs `-v`): `podman logs` of a healthy replica says what it mirrors and
where, and a rebalance storm is visible without turning on every other line. Never per
record: one line per event, each naming the flow, its clusters and its partition count.
"""

from __future__ import annotations

import logging

from mirror.config import FlowConfig

LIFECYCLE_LOGGER = "mirror.lifecycle"
log = logging.getLogger(LIFECYCLE_LOGGER)


class FlowLifecycle:
    """One flow's (one worker's) start, rebalance and stop lines; counts given by the engine."""

    def __init__(self, flow: FlowConfig) -> None:
        self.flow = flow
        self.topics = 0  # matched source topics, as of the last refresh
        self._started = False
        self.stopping = False  # set by the worker's close: what it hands back is its stop, not a rebalance

    def matched(self, topics: int) -> None:
        self.topics = topics

    def assigned(self, added: int, total: int) -> None:
        if not self._started:
            self._started = True
            log.info(
                "flow %s: %s -> %s started: %d topics matched, %d partitions assigned",
                self.flow.name,
                self.flow.source,
                self.flow.target,
                self.topics,
                total,
            )
        elif added:
            self._rebalanced(f"+{added}", total)

    def revoked(self, removed: int, total: int) -> None:
        if removed and not self.stopping:
            self._rebalanced(f"-{removed}", total)

    def _rebalanced(self, change: str, total: int) -> None:
        log.info(
            "flow %s: %s -> %s rebalanced: %s partitions, %d assigned (%d topics matched)",
            self.flow.name,
            self.flow.source,
            self.flow.target,
            change,
            total,
            self.topics,
        )

    def stopped(self, failure: BaseException | None) -> None:
        how = f"failed: {failure}" if failure else "stopped (drained and committed)"
        log.info("flow %s: %s -> %s %s", self.flow.name, self.flow.source, self.flow.target, how)
