"""A flow's start, rebalance and stop lines: one per event, none for a stop's hand-back."""

from __future__ import annotations

import logging

from mirror import config as cfg
from mirror.engine.lifecycle import LIFECYCLE_LOGGER, FlowLifecycle

FLOW = cfg.FlowConfig(name="f", source="nyc", target="sf", topics=cfg.TopicsConfig(include=["orders"]))


def test_start_once_then_a_line_per_rebalance_and_none_for_the_stop_hand_back(caplog) -> None:
    caplog.set_level(logging.INFO, logger=LIFECYCLE_LOGGER)
    life = FlowLifecycle(FLOW)
    life.matched(2)
    life.assigned(3, 3)
    life.assigned(0, 3)  # a cooperative rebalance that brought nothing new
    life.assigned(1, 4)
    life.revoked(2, 2)
    life.stopping = True
    life.revoked(2, 0)
    life.stopped(None)
    assert [r.getMessage() for r in caplog.records] == [
        "flow f: nyc -> sf started: 2 topics matched, 3 partitions assigned",
        "flow f: nyc -> sf rebalanced: +1 partitions, 4 assigned (2 topics matched)",
        "flow f: nyc -> sf rebalanced: -2 partitions, 2 assigned (2 topics matched)",
        "flow f: nyc -> sf stopped (drained and committed)",
    ]


def test_the_cli_shows_lifecycle_lines_at_the_default_level() -> None:
    from mirror.cli import setup_logging

    setup_logging(verbose=0, debug=False)
    assert logging.getLogger(LIFECYCLE_LOGGER).isEnabledFor(logging.INFO)
    assert not logging.getLogger("mirror.engine.worker").isEnabledFor(logging.INFO)
