"""Review of the source-gap, start_from and read-cap data paths: cases where a partition is
moved, started or held other than the contracts (docs/design.md) say."""

from __future__ import annotations

from typing import Any

import pytest

from mirror import config
from mirror.domain.gaps import SourceGap
from mirror.domain.ledger import Ledger
from mirror.domain.route import route
from mirror.domain.throttle import MAX_DEBT_SECONDS, Throttle
from mirror.engine.assignment import AssignedPartition
from mirror.engine.failures import Failures
from mirror.engine.gaps import SourceGaps
from mirror.engine.status import FlowStatus
from mirror.errors import MirrorError
from mirror.kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
from mirror.kafka.admin import Watermarks
from tests.unit.engine.eos_fakes import StartingConsumer, make_eos
from tests.unit.engine.fakes import P0, P1, TEXT, FakeAdmin, Msg, batch

LOW = 100  # the source log of every partition starts here: 0..99 expired before the flow existed


class Heard:
    def __init__(self) -> None:
        self.gaps: list[SourceGap] = []

    def on_gap(self, flow: str, gap: SourceGap) -> None:
        self.gaps.append(gap)

    # the rest of AckListener: nothing to hear
    def on_acked(self, batches: Any) -> None:
        pass

    def before_commit(self, flow: str, positions: Any) -> None:
        pass

    def on_reset(self, flow: str, partitions: Any) -> None:
        pass

    def close(self) -> None:
        pass


class ExpiredHeadAdmin(FakeAdmin):
    """A source whose partitions hold LOW..LOW+10 (everything before expired long ago)."""

    def watermarks(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        return {tp: Watermarks(LOW, LOW + 10) for tp in parts}


class ExpiredHeadConsumer(StartingConsumer):
    """As librdkafka with auto.offset.reset=error: a partition started at a concrete offset
    below the log start answers with an out-of-range error event instead of records;
    OFFSET_BEGINNING starts at the log start."""

    def _start(self, tps: list[TopicPartition]) -> None:
        super()._start(tps)
        for tp in tps:
            if tp.offset == OFFSET_BEGINNING:
                self.position_of[(tp.topic, tp.partition)] = LOW

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        msgs = super().consume(num_messages, timeout)
        out = []
        for tp in self.assigned:
            at = self.position_of.get(tp)
            if at is not None and 0 <= at < LOW:
                out.append(Msg(tp, at, KafkaError(KafkaError._AUTO_OFFSET_RESET, "offset out of range")))
        return out + [m for m in msgs if m.error() is not None or m.offset() >= LOW]


def _read(tp: tuple[str, int], upto: int) -> Any:
    def step(consumer: Any) -> list[Msg]:
        return batch(tp, range(max(LOW, consumer.position_of.get(tp, LOW)), upto))

    return step


def test_exactly_once_first_start_of_a_never_committed_partition_reports_no_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new exactly_once flow over a topic whose first records expired long ago (any topic
    older than its retention). Never committed, a partition starts "from the beginning" as
    in at-least-once (OFFSET_BEGINNING, no report). The claim starts it at a concrete 0
    (claims.py `_starts_of`: max(0, OFFSET_BEGINNING)); with auto.offset.reset=error that is
    out of range, reported as records 0..99 "never mirrored" (counter, offset map), and with
    on_source_gap: stop the flow cannot start (exit 4)."""
    heard = Heard()
    worker, consumer, target = make_eos(
        monkeypatch,
        [[], _read(P0, LOW + 10), _read(P1, LOW + 10)],
        consumer_cls=ExpiredHeadConsumer,
        admin_cls=ExpiredHeadAdmin,
        listeners=(heard,),
    )
    worker.run()
    assert heard.gaps == [], [g.describe() for g in heard.gaps]


class Source:
    def __init__(self, low: int, high: int, ids: Any = None) -> None:
        self.low, self.high, self.ids = low, high, ids

    def watermarks(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        return {tp: Watermarks(self.low, self.high) for tp in parts}

    def topic_ids(self, topics: Any) -> dict[str, str]:
        if self.ids is None:
            raise MirrorError("the source did not answer")
        return {t: self.ids[t] for t in topics if t in self.ids}


class Admins:
    def __init__(self, source: Source) -> None:
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


def _gaps(source: Source, consumer: Any, *, eager: bool) -> tuple[SourceGaps, Heard]:
    flow = config.parse(TEXT, env={}).flows[0]
    ledger: Ledger[AssignedPartition] = Ledger(flow.name)
    for tp in (P0, P1):
        ledger.assign(tp, AssignedPartition(route(flow, *tp)))
    heard = Heard()
    gaps = SourceGaps(
        flow,
        consumer,
        admins=Admins(source),  # type: ignore[arg-type]
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
    gaps, _ = _gaps(Source(150, 200), consumer, eager=True)
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
    gaps, heard = _gaps(Source(0, 30, ids=None), consumer, eager=False)
    gaps.on_out_of_range(Msg(P0, 100))  # type: ignore[arg-type]
    skipped_silently = consumer.assigned == [("orders", 0, 30)] and not heard.gaps
    assert not skipped_silently, (consumer.assigned, heard.gaps)


def test_a_position_past_the_end_of_a_topic_whose_id_was_never_read_is_not_resumed_silently_at_the_end() -> None:
    """As above, but the ids were unreadable when P0 was assigned (`remember_ids` noted none)
    and readable now: with no earlier id to compare, `_recreated` says no, and the new topic's
    0..29 are skipped without a report."""
    source = Source(0, 30, ids=None)
    consumer = EagerConsumer()
    gaps, heard = _gaps(source, consumer, eager=False)
    assert gaps.remember_ids(["orders"]) == set()  # unreadable at assignment
    source.ids = {"orders": "id-2"}  # the new topic's
    gaps.on_out_of_range(Msg(P0, 100))  # type: ignore[arg-type]
    skipped_silently = consumer.assigned == [("orders", 0, 30)] and not heard.gaps
    assert not skipped_silently, (consumer.assigned, heard.gaps)


class Tick:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _held_for(throttle: Throttle, clock: Tick, step: float = 0.1, limit: float = 600.0) -> float:
    """Seconds until the worker may read again (the loop asks `allowed` every 0.1 s)."""
    start = clock.now
    while throttle.allowed(2000) == 0 and clock.now - start < limit:
        clock.now += step
    return clock.now - start


def test_a_reload_that_lowers_the_cap_never_holds_reading_longer_than_the_debt_limit() -> None:
    """domain/throttle.py: a read never waits more than MAX_DEBT_SECONDS (30 s), because the
    worker does not call consume while it waits and librdkafka takes a consumer that polls
    less often than max.poll.interval.ms (60 s at least) out of its group (its partitions go
    to another worker while this one still produces: duplicates). A record larger than 30 s
    of the cap (a 4 MiB record under 64 KiB/s) leaves 30 s of debt; a SIGHUP reload lowering
    the cap to 8 KiB/s keeps the debt in bytes (`TokenBucket.set_rate`): reading is held 240 s."""
    clock = Tick()
    throttle = Throttle(64 * 1024, None, clock=clock)
    assert throttle.allowed(2000) >= 1
    throttle.took(1, 4 * 2**20)  # one 4 MiB record: the debt is capped at 30 s' worth
    throttle.set_caps(8 * 1024, None)  # the reload
    assert _held_for(throttle, clock) <= MAX_DEBT_SECONDS + 1


class IdleExpiredConsumer(ExpiredHeadConsumer):
    """P0 was committed at 50 before the flow stopped; since then everything up to LOW
    expired and nothing was written (an idle partition: LOW is also its end). librdkafka
    starts an unassigned-offset partition at the group's committed offset."""

    def _start(self, tps: list[TopicPartition]) -> None:
        super()._start(tps)
        for tp in tps:
            key = (tp.topic, tp.partition)
            if tp.offset == -1001 and self.last_commit(key) is not None:
                self.position_of[key] = self.last_commit(key)  # type: ignore[assignment]

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        super().incremental_assign(tps)
        self._start(tps)

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        # librdkafka's position is the offset after the last record returned: none here
        # (see eos_steps.AppPositionConsumer), whatever offset the partition was assigned at.
        got = {tp: max(o) + 1 for tp, o in self.records.items() if o}
        return [TopicPartition(tp.topic, tp.partition, got.get((tp.topic, tp.partition), -1001)) for tp in tps]


class IdleExpiredAdmin(ExpiredHeadAdmin):
    def watermarks(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        return {tp: Watermarks(LOW, LOW) for tp in parts}


def _restart(commits: list[dict[tuple[str, int], int]], heard: Heard) -> IdleExpiredConsumer:
    import threading

    from mirror.engine.worker import FlowWorker
    from tests.unit.engine.fakes import Clock, FakeProducer, Target

    cfg = config.parse(TEXT, env={})
    stop, target = threading.Event(), Target()
    consumer = IdleExpiredConsumer([P0], [[], [], []], stop, target)
    consumer.commits = list(commits)
    admins = {"nyc": {"orders": 1}, "sf": {"nyc.orders": 1}}
    worker = FlowWorker(
        cfg,
        cfg.flows[0],
        stop=stop,
        listeners=[heard],
        clock=Clock(),
        consumer_factory=lambda name, cluster, settings: consumer,
        producer_factory=lambda name, cluster, settings: FakeProducer(target, 100_000),
        admin_factory=lambda name, cluster: IdleExpiredAdmin(admins[name]),
    )
    worker.run()
    return consumer


def test_a_gap_is_counted_once_not_again_by_every_worker_that_takes_the_partition_after_it() -> None:
    """Records 50..99 of P0 expired while the flow was stopped; nothing was written since.
    The first start reports the gap (50 records, the counter, the offset map) and moves P0
    to 100, but nothing past the gap is ever committed (no record is read, so no position):
    the group stays at 50, and every restart, and every worker a rebalance gives P0 to,
    reports the same 50 records again: mirror_source_records_skipped_total counts 50 per
    restart, and with on_source_gap: stop the flow never starts again."""
    heard = Heard()
    first = _restart([{P0: 50}], heard)
    assert [(g.first, g.last) for g in heard.gaps] == [(50, 99)]
    _restart(first.commits, heard)
    assert [(g.first, g.last) for g in heard.gaps] == [(50, 99)], "reported again after a restart"


def test_start_from_latest_does_not_move_a_partition_whose_group_offsets_expired() -> None:
    """docs/design.md: "A partition the group committed is never moved." A `start_from: latest`
    flow mirrored P0 up to 49 (the target holds 0..49) and was stopped for longer than the
    source's offsets.retention.minutes (7 days by default: an empty group's offsets are then
    deleted). Back, the group has no offset, `StartPoints.choose` takes P0 for new, and the
    start it commits (the end, 100) skips 50..99, written while the mirror was stopped:
    never mirrored, and no WARNING, counter or offset-map row says so."""
    import threading

    from mirror.engine.worker import FlowWorker
    from tests.unit.engine.fakes import Clock, FakeConsumer, FakeProducer, Target

    class Source(FakeAdmin):
        def end_offsets(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], int]:
            return {tp: 100 for tp in parts}

        def offsets_for_times(self, parts: Any, at_ms: int) -> dict[tuple[str, int], int]:
            return {tp: -1 for tp in parts}

    cfg = config.parse(TEXT.replace("commit_interval: 1s", "commit_interval: 1s, start_from: latest"), env={})
    stop, target = threading.Event(), Target()
    target.stored[P0] = list(range(50))  # the earlier run's copies, acknowledged
    consumer = FakeConsumer([P0], [[]], stop, target)  # no committed offset: expired
    admins = {"nyc": {"orders": 1}, "sf": {"nyc.orders": 1}}
    worker = FlowWorker(
        cfg,
        cfg.flows[0],
        stop=stop,
        clock=Clock(),
        consumer_factory=lambda name, cluster, settings: consumer,
        producer_factory=lambda name, cluster, settings: FakeProducer(target, 100_000),
        admin_factory=lambda name, cluster: Source(admins[name]),
    )
    worker.run()
    committed = consumer.last_commit(P0)
    assert committed is None or committed <= 50, f"committed {committed}: 50..{committed - 1} never mirrored"


def test_a_group_offset_of_0_left_by_the_fence_for_a_never_committed_partition_is_not_a_gap_on_restart() -> None:
    """After a freeze, `Fence._seek_committed` asks the group with a concrete 0 for a partition
    it never committed ("where a restart would start too"). With auto.offset.reset=earliest
    that was so; with `error`, a restart (or a new owner) before anything past 0 is committed
    (never, for an idle partition whose records all expired: LOW is its end) fetches 0, is
    out of range, and reports records 0..99, which this flow was never meant to copy (it
    starts never-committed partitions at the beginning, silently), as a RETENTION gap, again
    at every restart; with on_source_gap: stop the flow cannot start. (`rewind_group`'s 0,
    after a target topic is created again, leaves the same state: there the report is true
    of the new target, but made only if a restart comes before the first commit.)"""
    heard = Heard()
    _restart([{P0: 0}], heard)  # what the fence's ask left
    assert heard.gaps == [], [g.describe() for g in heard.gaps]
