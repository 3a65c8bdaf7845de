"""An unclean leader election truncating the source log below what the worker copied, as
the worker meets it: librdkafka's `_AUTO_OFFSET_RESET` error event (auto.offset.reset=error)
naming the position it wanted, on the worker's in-memory ports.

Not a cluster test: the dev and test clusters are one combined KRaft broker each
(mirror.devenv.kafka), and an unclean election needs a second replica that falls out of the
ISR and then leads; the worker's side of it (the event, the log's bounds, the move) is what
is tested here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mirror.kafka import KafkaError, Message
from mirror.kafka.admin import Watermarks
from tests.unit.engine import fakes
from tests.unit.engine.expired_source import Heard
from tests.unit.engine.fakes import P0, FakeAdmin, FakeConsumer, batch


class TruncatedAdmin(FakeAdmin):
    """The source's log of orders[0] ends at 6 after the election (its start: 0)."""

    def watermarks(self, parts: Iterable[tuple[str, int]], committed_only: bool = True) -> dict[Any, Watermarks]:
        return {tp: Watermarks(0, 6) for tp in parts}


def _out_of_range(position: int) -> Message:
    """The event librdkafka hands the consumer when a fetch at `position` is out of range and
    auto.offset.reset is error."""
    return Message(
        topic=P0[0],
        partition=P0[1],
        offset=position,
        error=KafkaError(
            KafkaError._AUTO_OFFSET_RESET,
            f"fetch failed due to requested offset not available on the broker: Broker: Offset out of range "
            f"(broker 1) at offset {position}",
        ),
    )


def test_a_log_truncated_below_the_copied_records_resumes_where_the_source_writes_next(caplog) -> None:
    heard = Heard()
    script = [batch(P0, range(10)), [_out_of_range(10)], batch(P0, range(6, 9))]
    worker, consumer, target = fakes.make(script, listeners=[heard])
    admins = {"nyc": TruncatedAdmin({"orders": 2}), "sf": FakeAdmin({"nyc.orders": 2})}
    worker._make_admin = lambda name, cluster: admins[name]
    worker.run()
    assert isinstance(consumer, FakeConsumer) and consumer.closed and not consumer.unsafe, consumer.unsafe
    # The copies of 6..9 the old leader held stay on the target; the new leader's 6..8 follow.
    assert target.stored[P0] == [*range(10), 6, 7, 8]
    assert heard.gaps == []  # nothing skipped: no gap, no count
    assert consumer.calls[-2:] == ["incremental_unassign", "incremental_assign"]
    assert consumer.last_commit(P0) == 9
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "flow p: orders[0]: the source log ends at 6, below the 4 records already copied up to 9 (truncated by an "
        "unclean leader election?); the target keeps those copies, and mirroring resumes at 6, where the source "
        "writes next"
    ]
