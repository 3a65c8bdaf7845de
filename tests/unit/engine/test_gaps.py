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
from mirror.errors import MirrorError, SourceGapError
from mirror.kafka import OFFSET_BEGINNING, TopicPartition
from mirror.kafka.admin import Watermarks
from tests.unit.engine.expired_source import Heard as Listener
from tests.unit.engine.expired_source import run_idle_expired
from tests.unit.engine.fakes import P0, P1, TEXT, Msg


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


class UnsureSource:
    def __init__(self, low: int, high: int, ids: Any = None) -> None:
        self.low, self.high, self.ids = low, high, ids

    def watermarks(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        return {tp: Watermarks(self.low, self.high) for tp in parts}

    def topic_ids(self, topics: Any) -> dict[str, str]:
        if self.ids is None:
            raise MirrorError("the source did not answer")
        return {t: self.ids[t] for t in topics if t in self.ids}


class UnsureAdmins:
    def __init__(self, source: UnsureSource) -> None:
        self.source = source


class EagerConsumer:
    """librdkafka's eager side: P1 was assigned at 50 (a claim's progress, a resync's start)
    and has returned no record yet, so its position is unknown (-1001); assigned at -1001 it
    would start at the group's committed offset instead."""

    def __init__(self) -> None:
        self.assigned: list[tuple[str, int, int]] = []

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(*P0), TopicPartition(*P1)]

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in tps]

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in tps]

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        pass

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in tps]


def _both(source: UnsureSource, consumer: Any, *, eager: bool) -> tuple[SourceGaps, Listener]:
    flow = config.parse(TEXT, env={}).flows[0]
    ledger: Ledger[AssignedPartition] = Ledger(flow.name)
    for tp in (P0, P1):
        ledger.assign(tp, AssignedPartition(route(flow, *tp)))
    heard = Listener()
    gaps = SourceGaps(
        flow,
        consumer,
        admins=UnsureAdmins(source),  # type: ignore[arg-type]
        listeners=[heard],
        failures=Failures(flow.name, FlowStatus(flow.name), lambda: 0.0),
        ledger=ledger,
        eager=eager,
    )
    return gaps, heard


def test_an_eager_move_keeps_the_start_of_a_partition_that_returned_no_record_yet() -> None:
    """Eager assignor (roundrobin, the choice above ~5,000 partitions): P0's gap re-assigns
    the whole assignment "at current positions", but P1, started at 50 by the assign
    callback (exactly_once: the progress; its group still at 40 after a writer killed between
    its two commits) and not read yet, has no position: it goes back to the group's offset,
    and 40..49, already committed on the target, are copied again (a stale resync rewind:
    records skipped). The move must keep P1 where the worker started it."""
    consumer = EagerConsumer()
    gaps, _ = _both(UnsureSource(150, 200), consumer, eager=True)
    gaps.on_out_of_range(Msg(P0, 100))  # type: ignore[arg-type]
    assert ("orders", 0, 150) in consumer.assigned
    assert ("orders", 1, -1001) not in consumer.assigned, consumer.assigned


def test_a_position_past_the_end_with_the_topic_ids_unreadable_is_not_resumed_silently_at_the_end() -> None:
    """P0 was at 100 when its source topic was deleted and created again (the metadata
    refresh did not revoke it in between); the new topic holds 0..29. The topic-id look-up
    fails right then (a source admin timeout), so `_recreated` says no and the position is
    taken for an unclean truncation: resumed at 30 with no report, records 0..29 of the new
    topic are never mirrored and nothing (WARNING of a gap, counter, offset map) says so.
    Unsure which it is, the worker must not skip without a report."""
    consumer = EagerConsumer()
    gaps, heard = _both(UnsureSource(0, 30, ids=None), consumer, eager=False)
    gaps.on_out_of_range(Msg(P0, 100))  # type: ignore[arg-type]
    skipped_silently = consumer.assigned == [("orders", 0, 30)] and not heard.gaps
    assert not skipped_silently, (consumer.assigned, heard.gaps)


def test_a_position_past_the_end_of_a_topic_whose_id_was_never_read_is_not_resumed_silently_at_the_end() -> None:
    """As above, but the ids were unreadable when P0 was assigned (`remember_ids` noted none)
    and readable now: with no earlier id to compare, `_recreated` says no, and the new topic's
    0..29 are skipped without a report."""
    source = UnsureSource(0, 30, ids=None)
    consumer = EagerConsumer()
    gaps, heard = _both(source, consumer, eager=False)
    assert gaps.remember_ids(["orders"]) == set()  # unreadable at assignment
    source.ids = {"orders": "id-2"}  # the new topic's
    gaps.on_out_of_range(Msg(P0, 100))  # type: ignore[arg-type]
    skipped_silently = consumer.assigned == [("orders", 0, 30)] and not heard.gaps
    assert not skipped_silently, (consumer.assigned, heard.gaps)


def test_a_gap_is_counted_once_not_again_by_every_worker_that_takes_the_partition_after_it() -> None:
    """Records 50..99 of P0 expired while the flow was stopped; nothing was written since.
    The first start reports the gap (50 records, the counter, the offset map) and moves P0
    to 100, but nothing past the gap is ever committed (no record is read, so no position):
    the group stays at 50, and every restart, and every worker a rebalance gives P0 to,
    reports the same 50 records again: mirror_source_records_skipped_total counts 50 per
    restart, and with on_source_gap: stop the flow never starts again."""
    heard = Listener()
    first = run_idle_expired([{P0: 50}], heard)
    assert [(g.first, g.last) for g in heard.gaps] == [(50, 99)]
    run_idle_expired(first.commits, heard)
    assert [(g.first, g.last) for g in heard.gaps] == [(50, 99)], "reported again after a restart"


def test_the_fences_ask_with_0_for_a_never_committed_partition_is_not_a_gap_on_restart() -> None:
    """After a freeze, `Fence._seek_committed` asks the group with a concrete 0 for a partition
    it never committed ("where a restart would start too"). With auto.offset.reset=earliest
    that was so; with `error`, a restart (or a new owner) before anything past 0 is committed
    (never, for an idle partition whose records all expired: LOW is its end) fetches 0, is
    out of range, and reports records 0..99, which this flow was never meant to copy (it
    starts never-committed partitions at the beginning, silently), as a RETENTION gap, again
    at every restart; with on_source_gap: stop the flow cannot start. (`rewind_group`'s 0,
    after a target topic is created again, leaves the same state: there the report is true
    of the new target, but made only if a restart comes before the first commit.)"""
    heard = Listener()
    run_idle_expired([{P0: 0}], heard)  # what the fence's ask left
    assert heard.gaps == [], [g.describe() for g in heard.gaps]


def test_a_gap_moves_the_commit_past_it_only_when_nothing_before_it_is_unacknowledged() -> None:
    """The gap's new position becomes the partition's next commit (`acked_next`) once it is
    recorded, unless a record read before the gap still waits for the producer (the read
    gate's pending records): committing past it then could lose it in a crash."""

    class Gate:
        def __init__(self, pending: list[Msg]) -> None:
            self.pending = pending

    gaps, _, heard, _ = _gaps(Source(150, 200))
    gaps.gate = Gate([Msg(P0, 99)])  # type: ignore[assignment]
    gaps.on_out_of_range(Msg(P0, 100))  # type: ignore[arg-type]
    assert [(g.first, g.last) for g in heard.gaps] == [(100, 149)]
    assert gaps._ledger.parts[P0].acked_next is None

    gaps, _, heard, _ = _gaps(Source(150, 200))
    gaps.gate = Gate([])  # type: ignore[assignment]
    gaps.on_out_of_range(Msg(P0, 100))  # type: ignore[arg-type]
    assert [(g.first, g.last) for g in heard.gaps] == [(100, 149)]
    assert gaps._ledger.parts[P0].acked_next == 150
