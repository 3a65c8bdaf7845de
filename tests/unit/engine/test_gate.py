"""ReadGate: reading resumes only when nothing holds it paused, and never for a stopped partition."""

from __future__ import annotations

from mirror import config
from mirror.domain.ledger import Ledger
from mirror.domain.route import route
from mirror.engine.gate import ReadGate
from mirror.engine.partition import AssignedPartition
from mirror.engine.status import FlowState, FlowStatus
from mirror.kafka import TopicPartition
from tests.unit.engine.fakes import P0, P1, TEXT, Msg


class Consumer:
    def __init__(self) -> None:
        self.assigned = [P0, P1]
        self.paused: set[tuple[str, int]] = set()
        self.seeks: list[tuple[str, int, int]] = []

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(*tp) for tp in self.assigned]

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in tps}

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in tps}

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))


def gate() -> tuple[ReadGate, Consumer, Ledger[AssignedPartition], FlowStatus]:
    flow = config.parse(TEXT, env={}).flows[0]
    ledger: Ledger[AssignedPartition] = Ledger(flow.name)
    for tp in (P0, P1):
        ledger.assign(tp, AssignedPartition(route(flow, *tp)))
    consumer, status = Consumer(), FlowStatus(flow.name)
    return ReadGate(flow.name, flow.target, consumer, ledger, status), consumer, ledger, status


def test_deferred_records_pause_reading_until_they_are_taken_and_reading_resumes_where_it_was_handed_over():
    g, c, _, status = gate()
    g.defer([Msg(P0, 5), Msg(P0, 6)])
    assert g.paused and c.paused == {P0, P1} and status.state is FlowState.RETRYING
    assert [m.offset() for m in g.take_pending()] == [5, 6] and not g.pending
    g.resume()
    # librdkafka dropped what it prefetched: fetching restarts after the last record handed over
    assert not g.paused and not c.paused and sorted(c.seeks) == [("orders", 0, 7), ("orders", 1, 7)]


def test_a_hold_or_a_fence_keeps_reading_paused_until_both_are_over():
    g, c, _, _ = gate()
    g.hold_back(True)
    g.shut("fenced")
    g.resume()
    assert g.paused
    g.hold_back(False)
    assert g.paused  # still fenced
    g.open()
    assert not g.paused and not c.paused


def test_a_partition_stopped_by_a_refused_record_stays_paused_when_reading_resumes():
    g, c, ledger, _ = gate()
    ledger.parts[P1].failed_at = 3
    g.pause()
    g.resume()
    assert c.paused == {P1}


def test_dropped_pending_records_taint_their_partitions_only():
    g, _, ledger, _ = gate()
    g.defer([Msg(P0, 5), Msg(P1, 9)])
    g.drop_pending({P0})
    assert [m.tp for m in g.pending] == [P1]
    assert ledger.parts[P0].tainted and not ledger.parts[P1].tainted
