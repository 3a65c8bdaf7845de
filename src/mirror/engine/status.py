"""`FlowStatus`: what a flow worker is doing, as operators see it (logs, `mirror status`)."""

from __future__ import annotations

import logging
from enum import Enum

log = logging.getLogger(__name__)


class FlowState(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    RETRYING = "retrying"  # a cluster does not answer; mirroring resumes by itself
    CAUGHT_UP = "caught_up"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


class FlowStatus:
    """The state of one flow and why. Every unit of the worker may set it. A change of state is
    one log line, and so is a change of cause within a state (the reason's text before its first
    ':'): a flow paused because its target was slow, whose target then went away, says so. The
    details after the ':' (librdkafka's varying error text) alone log nothing."""

    def __init__(self, flow: str) -> None:
        self.flow = flow
        self.state = FlowState.STARTING
        self.reason = ""

    def set(self, state: FlowState, reason: str) -> None:
        if state != self.state or reason != self.reason:
            if state != self.state or _cause(reason) != _cause(self.reason):
                log.info("flow %s: %s (%s)", self.flow, state.value, reason)
            self.state, self.reason = state, reason


def _cause(reason: str) -> str:
    return reason.split(":", 1)[0]
