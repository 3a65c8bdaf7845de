"""What a flow's status writes to the log: each change of state, and each change of cause."""

from __future__ import annotations

import logging

from mirror.engine.status import FlowState, FlowStatus


def test_a_new_cause_within_retrying_is_logged_and_new_details_alone_are_not(caplog) -> None:
    status = FlowStatus("f")
    caplog.set_level(logging.INFO, logger="mirror.engine.status")
    status.set(FlowState.RUNNING, "started")
    status.set(FlowState.RETRYING, "target dst is not keeping up; reading paused")
    status.set(FlowState.RETRYING, "target dst unreachable: 1/1 brokers are down")
    status.set(FlowState.RETRYING, "target dst unreachable: Connect to 127.0.0.1:9 failed (3 suppressed)")
    status.set(FlowState.RUNNING, "reading resumed")
    assert [r.getMessage() for r in caplog.records] == [
        "flow f: running (started)",
        "flow f: retrying (target dst is not keeping up; reading paused)",
        "flow f: retrying (target dst unreachable: 1/1 brokers are down)",
        "flow f: running (reading resumed)",
    ]
    assert status.reason == "reading resumed"
