"""FlowWorker: opening, and what it releases when opening fails."""

from __future__ import annotations

import pytest

from mirror.errors import FatalProduceError
from tests.unit.engine.fakes import FakeProducer, Target, make


def test_a_failure_while_opening_closes_the_consumer_already_made():
    class Broken(FakeProducer):
        def __init__(self, target: Target, capacity: int) -> None:
            raise FatalProduceError("orders", 0, 0, "no producer")

    worker, consumer, _ = make([], producer_cls=Broken)
    with pytest.raises(FatalProduceError):
        worker.run()
    assert consumer.closed and consumer.commits == []
