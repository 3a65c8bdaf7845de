"""`SourceGaps`: a position out of range is reported once and moved past, or stops the flow."""

from __future__ import annotations

from typing import Any

from mirror import config
from mirror.domain.gaps import GapReason, SourceGap
from mirror.domain.ledger import Ledger
from mirror.domain.route import route
from mirror.engine.assignment import AssignedPartition
from mirror.engine.failures import Failures
from mirror.engine.gaps import SourceGaps
from mirror.engine.status import FlowStatus
from mirror.errors import SourceGapError
from mirror.kafka import OFFSET_BEGINNING, TopicPartition
from mirror.kafka.admin import Watermarks
from tests.unit.engine.fakes import P0, TEXT, Msg


class Source:
    def __init__(self, low: int, high: int) -> None:
        self.low, self.high, self.ids = low, high, {"orders": "id-1"}

    def watermarks(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        return {tp: Watermarks(self.low, self.high) for tp in parts}

    def topic_ids(self, topics: Any) -> dict[str, str]:
        return {t: self.ids[t] for t in topics if t in self.ids}


class Admins:
    def __init__(self, source: Source) -> None:
        self.source = source


class Consumer:
    """Records the assignment changes a move makes."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, int, int]]]] = []

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        self.calls.append(("unassign", [(t.topic, t.partition, t.offset) for t in tps]))

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        self.calls.append(("assign", [(t.topic, t.partition, t.offset) for t in tps]))


class Heard:
    def __init__(self) -> None:
        self.gaps: list[SourceGap] = []

    def on_gap(self, flow: str, gap: SourceGap) -> None:
        self.gaps.append(gap)


def _gaps(source: Source, policy: str = "skip") -> tuple[SourceGaps, Consumer, Heard, Failures]:
    flow = config.parse(TEXT, env={}).flows[0].model_copy(update={"on_source_gap": policy})
    ledger: Ledger[AssignedPartition] = Ledger(flow.name)
    ledger.assign(P0, AssignedPartition(route(flow, *P0)))
    consumer, heard = Consumer(), Heard()
    failures = Failures(flow.name, FlowStatus(flow.name), lambda: 0.0)
    gaps = SourceGaps(
        flow,
        consumer,
        admins=Admins(source),
        listeners=[heard],
        failures=failures,
        ledger=ledger,
        eager=False,  # type: ignore[arg-type]
    )
    return gaps, consumer, heard, failures


def test_a_position_before_the_log_start_is_reported_once_and_moved_to_it(caplog) -> None:
    gaps, consumer, heard, failures = _gaps(Source(150, 200))
    gaps.on_out_of_range(Msg(P0, 100))  # type: ignore[arg-type]
    assert heard.gaps == [SourceGap("orders", 0, 100, 149, GapReason.RETENTION)]
    assert consumer.calls[-1] == ("assign", [("orders", 0, 150)])
    assert failures.failure is None
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert lines == [
        "flow p: orders[0]: source records 100..149 (50) were never mirrored: deleted at the source before "
        "they were copied (retention or delete-records); mirroring on from offset 150"
    ]


def test_on_source_gap_stop_fails_the_flow_naming_the_gap_and_leaves_the_partition_where_it_is() -> None:
    gaps, consumer, heard, failures = _gaps(Source(150, 200), policy="stop")
    gaps.on_out_of_range(Msg(P0, 100))  # type: ignore[arg-type]
    assert isinstance(failures.failure, SourceGapError) and failures.failure.exit_code == 4
    assert "orders[0]: source records 100..149 (50) were never mirrored" in str(failures.failure)
    assert consumer.calls == [] and heard.gaps == []


def test_a_truncated_log_resumes_where_the_source_writes_next_and_skips_nothing() -> None:
    gaps, consumer, heard, failures = _gaps(Source(0, 80))
    gaps.on_out_of_range(Msg(P0, 100))  # type: ignore[arg-type]
    assert consumer.calls[-1] == ("assign", [("orders", 0, 80)])
    assert heard.gaps == [] and failures.failure is None


def test_a_re_created_topic_resumes_at_its_beginning() -> None:
    source = Source(0, 30)
    gaps, consumer, heard, _ = _gaps(source)
    assert gaps.remember_ids(["orders"]) == set()
    source.ids["orders"] = "id-2"
    gaps.on_out_of_range(Msg(P0, 100))  # type: ignore[arg-type]
    assert consumer.calls[-1] == ("assign", [("orders", 0, 0)])
    assert [g.reason for g in heard.gaps] == [GapReason.RECREATED]


def test_a_partition_never_committed_starts_at_the_beginning_without_a_report() -> None:
    gaps, consumer, heard, _ = _gaps(Source(0, 30))
    gaps.on_out_of_range(Msg(P0, -1001))  # type: ignore[arg-type]
    assert consumer.calls[-1] == ("assign", [("orders", 0, OFFSET_BEGINNING)])
    assert heard.gaps == []
