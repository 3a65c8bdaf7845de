"""A task's replay check and the offset map it feeds,
driven through `mirror_partition` with in-memory fakes of our own ports (Admin, read_headers,
make_producer) standing for one target partition. No Spark, no Kafka.

Each test states an invariant from docs/design.md or docs/spark.md (the
fakes follow the task's read-back: `read_range` with timestamps, keys and values).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

import mirror.spark.task as task
from mirror.config import SqliteStoreConfig
from mirror.domain.acks import AckBatch
from mirror.domain.offsetmap import translate
from mirror.domain.route import route
from mirror.errors import FatalProduceError
from mirror.kafka.admin import Watermarks
from mirror.kafka.reader import TailRecord
from mirror.run.recorder import OffsetMapRecorder
from mirror.spark.task import TaskPlan, mirror_partition
from mirror.store import open_store
from tests.unit.spark.fakes import Delivered, task_plan

TOPIC = "orders"


@dataclass
class TargetPartition:
    """One target partition: (key, value, timestamp, headers) per offset, from `low` on."""

    records: list[tuple[Any, Any, int, Any]] = field(default_factory=list)
    low: int = 0
    offset_minus_one_reports: bool = False  # DUPLICATE_SEQUENCE_NUMBER "success": no offset

    @property
    def high(self) -> int:
        return len(self.records)


def install(monkeypatch: pytest.MonkeyPatch, target: TargetPartition) -> None:
    class FakeAdmin:
        def __init__(self, *_a: Any, **_k: Any) -> None:
            pass

        def watermarks(self, parts: Any, committed_only: bool = True) -> dict[Any, Watermarks]:
            return {tp: Watermarks(target.low, target.high) for tp in parts}

    def fake_read_range(
        _name: Any, _cluster: Any, _topic: str, _p: int, start: int, end: int, timeout: float = 0.0, until: Any = None
    ) -> list[Any]:
        out = []
        for o in range(max(start, target.low), end):
            key, value, ts, headers = target.records[o]
            out.append(TailRecord(o, ts, key, value, list(headers or [])))
            if until is not None and until(out[-1]):
                break
        return out

    def fake_read_headers(
        _name: Any, _cluster: Any, _topic: str, _p: int, start: int, end: int, timeout: float = 0.0
    ) -> list[Any]:
        return [(r.offset, r.headers) for r in fake_read_range(_name, _cluster, _topic, _p, start, end, timeout)]

    class FakeProducer:
        def __init__(self) -> None:
            self.pending: list[tuple[int, Any]] = []

        def produce(
            self,
            _topic: str,
            value: Any,
            key: Any,
            *,
            partition: int,
            timestamp: int,
            headers: Any,
            on_delivery: Any = None,
        ) -> None:
            target.records.append((key, value, timestamp, headers))
            self.pending.append((len(target.records) - 1, on_delivery))

        def flush(self, _timeout: float = 0) -> int:
            for offset, cb in self.pending:
                if cb is not None:
                    cb(None, Delivered(-1 if target.offset_minus_one_reports else offset))
            self.pending.clear()
            return 0

        def poll(self, _timeout: float = 0) -> int:
            return 0

    monkeypatch.setattr(task, "_CLIENTS", {})  # a task keeps its clients per worker process
    monkeypatch.setattr(task, "Admin", FakeAdmin)
    monkeypatch.setattr(task, "read_headers", fake_read_headers, raising=False)
    monkeypatch.setattr(task, "read_range", fake_read_range, raising=False)
    monkeypatch.setattr(task, "make_producer", lambda *_a, **_k: FakeProducer())


def plan() -> TaskPlan:
    return task_plan()


def rows(offsets: range | list[int], tag: str = "v", ts0: int = 1_600_000_000_000) -> list[tuple[Any, ...]]:
    """Source rows as the job selects them: (topic, partition, offset, ts, key, value, headers)."""
    return [(TOPIC, 0, o, ts0 + o, b"k%d" % o, b"%s%d" % (tag.encode(), o), None) for o in offsets]


def run_task(p: TaskPlan, batch: list[tuple[Any, ...]]) -> task.TaskResult:
    (result,) = list(mirror_partition(p, batch))
    return result


def test_a_recreated_source_topic_is_not_skipped_because_old_copies_carry_higher_offsets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The source topic was deleted and created again (or the source cluster rebuilt after a
    disaster and filled by failback): its offsets start at 0 again, while the target's last
    copies name offsets up to 999 of the old incarnation. `mirror run` re-reads from the
    earliest offset (auto.offset.reset) and mirrors the new records; the Spark task finds
    held=999 and skips them all: silent loss, and the group commits past them."""
    target = TargetPartition()
    install(monkeypatch, target)
    p = plan()
    run_task(p, rows(range(1000), tag="old"))  # the old incarnation, mirrored
    assert target.high == 1000

    new = rows(range(100), tag="new", ts0=1_700_000_000_000)  # new records, same offsets
    result = run_task(p, new)
    copies = [r for r in target.records[1000:]]
    assert [r[1] for r in copies] == [r[5] for r in new], (
        f"new records never reached the target (skipped={result.skipped})"
    )


def test_rows_rederived_from_a_replay_never_translate_past_a_copy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Invariant 2: translation errs towards re-reading, never skipping.

    A first batch [0, 1000) of a partition was produced whole, then the driver died before
    the rows were stored and the group committed (no --checkpoint: the default). The restart
    plans a smaller batch for this partition ([0, 600): maxOffsetsPerTrigger is split over
    the partitions by backlog). The task reads only the target's last 600 records (copies of
    400..999), skips everything, and the only row stored is (400 -> 400). A group at source
    position 100 then translates to target 400: 300 records skipped at failover."""
    target = TargetPartition()
    install(monkeypatch, target)
    p = plan()
    run_task(p, rows(range(1000)))  # the killed attempt: on the target, no row stored, nothing committed

    store = open_store(SqliteStoreConfig(path=str(tmp_path / "o.db")))
    recorder = OffsetMapRecorder(store, "f", registry=None)
    for batch in (range(0, 600), range(600, 1000), range(1000, 1200)):
        r = run_task(p, rows(batch))
        recorder.on_acked(
            [
                AckBatch(
                    "f",
                    r.topic,
                    r.partition,
                    r.target_topic,
                    r.first_offset,
                    r.next_offset,
                    count=r.produced + r.skipped,
                    syncs=r.syncs,
                )
            ]
        )
        recorder.flush()
    assert target.high == 1200  # no duplicates: the replay itself is right

    syncs = store.syncs("f", TOPIC, 0)
    tip = store.tip("f", TOPIC, 0)
    for position in (0, 100, 399):
        got = translate(syncs, position, target.high, tip=tip).target_offset
        assert got <= position, (
            f"source position {position} translates to {got}: {got - position} records skipped (rows {syncs})"
        )
    store.close()


def test_a_report_without_offset_never_becomes_an_offset_map_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DUPLICATE_SEQUENCE_NUMBER "success" carries offset -1 (the native engine places such
    a segment at a lower bound, `_ack_unplaced`). For a one-record batch both reports are -1,
    t1 - t0 == n - 1 holds, and the task returns the pair (source, -1) as a delta change."""
    target = TargetPartition(offset_minus_one_reports=True)
    install(monkeypatch, target)
    result = run_task(plan(), rows([7]))
    assert all(t >= 0 for _s, t in result.syncs), result.syncs


def test_route_of_the_fake_matches_the_flow() -> None:
    # guard for the fixtures above: the copies carry this route's provenance
    r = route(plan().flow, TOPIC, 0)
    assert r.origin == b"src/orders/0/" and r.target_topic == "src.orders"


def test_a_target_copy_naming_an_offset_past_the_source_end_is_never_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The source topic was recreated and refilled with the same content (same keys, values,
    timestamps: a deterministic loader). The copies match, but the target's last copy names
    offset 99 while the source now ends at 50: they cannot be copies of these records."""
    target = TargetPartition()
    install(monkeypatch, target)
    run_task(plan(), rows(range(100)))
    p = replace(plan(), source_ends={(TOPIC, 0): 50})
    result = run_task(p, rows(range(50)))
    assert result.skipped == 0 and result.produced == 50 and target.high == 150
    assert result.warning is not None and "ends at 50" in result.warning


def test_a_replay_whose_first_copies_are_gone_from_the_target_copies_the_batch_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The target's log start is past the copies of the batch's first records. Retention may
    have taken them, or the mirror deleted to the end and copies in flight landed after (then
    the first records never landed): the target cannot tell, so the batch is copied again
    (duplicates, never a loss), and its pairs are the new copies'."""
    target = TargetPartition()
    install(monkeypatch, target)
    run_task(plan(), rows(range(100)))
    target.low = 40
    result = run_task(plan(), rows(range(100)))
    assert (result.produced, result.skipped, result.placed) == (100, 0, True)
    assert result.syncs[0] == (0, 100) and target.high == 200


def test_a_replay_of_an_earlier_batch_skips_it_and_gives_its_exact_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The group was rewound over records the target holds (copies at target offset
    source + 5: five foreign records came first): a batch of 10..19 while the target's last
    copy is of 99 is skipped whole, with the pair of its first record."""
    target = TargetPartition(records=[(b"x", b"x", 0, None)] * 5)
    install(monkeypatch, target)
    run_task(plan(), rows(range(100)))
    result = run_task(plan(), rows(range(10, 20)))
    assert (result.produced, result.skipped, result.placed) == (0, 10, True)
    assert result.syncs == [(10, 15)]
    assert target.high == 105


def test_a_producer_that_timed_out_is_purged_and_never_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A target that never acknowledges: the task fails (Spark retries it), and the producer
    is purged before that, so nothing it still queues lands after the retry's copies."""
    made: list[Any] = []

    class StuckProducer:
        def __init__(self) -> None:
            self.queued = 0
            self.purged = False
            made.append(self)

        def produce(self, *_a: Any, **_k: Any) -> None:
            self.queued += 1

        def flush(self, _timeout: float = 0) -> int:
            return self.queued

        def poll(self, _timeout: float = 0) -> int:
            return 0

        def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
            self.purged, self.queued = True, 0

    install(monkeypatch, TargetPartition())
    monkeypatch.setattr(task, "make_producer", lambda *_a, **_k: StuckProducer())
    monkeypatch.setattr(task, "FLUSH_TIMEOUT", 0.0)
    with pytest.raises(FatalProduceError, match="did not acknowledge"):
        run_task(plan(), rows(range(3)))
    assert len(made) == 1 and made[0].purged
    with pytest.raises(FatalProduceError):
        run_task(plan(), rows(range(3)))
    assert len(made) == 2  # a new producer for the retry


def test_the_replay_check_compares_timestamps_and_a_log_append_time_copy_proves_nothing() -> None:
    """A copy whose timestamp differs is another record. A copy the target topic stamped
    (LogAppendTime) is never taken for a copy: key and value alone cannot tell it from the
    copy of an older record alike (such targets get the replay: duplicates, never a loss)."""
    # `_same` itself, the replay's one comparison rule (a timestamp decides only where the
    # target keeps the producer's): the task-level tests meet it only through whole tails.
    (row,) = rows([5])
    origin: list[Any] = []  # headers play no part in the comparison
    assert task._same(TailRecord(9, row[3], row[4], row[5], origin), row)
    assert not task._same(TailRecord(9, row[3] + 1, row[4], row[5], origin), row)
    assert not task._same(TailRecord(9, row[3] + 1, row[4], row[5], origin, log_append_time=True), row)
    assert not task._same(TailRecord(9, row[3], row[4], row[5], origin, log_append_time=True), row)
    assert not task._same(TailRecord(9, row[3], row[4], b"other", origin), row)


def test_a_replay_never_skips_records_whose_copies_are_not_on_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skips only what is proved to be on the target (task.py). The target holds copies of an
    old incarnation's 0..29 (the group committed 30), then copies of the new incarnation's
    50..120 only: the source topic was recreated while the query ran, and 0..49 of the new
    one never reached the target (Spark's source, failOnDataLoss=false, moved past them).
    The driver dies before the commit; the restart replays 30..199. The target's last copy
    (of 120) matches, but right before the copy of 50 is a copy of 29: the copies of 30..49
    are provably not on the target. The task skips them anyway (held=120) and the group
    commits past them: lost."""
    target = TargetPartition()
    install(monkeypatch, target)
    run_task(plan(), rows(range(30), tag="old"))  # the old incarnation, mirrored
    new = rows(range(200), tag="new", ts0=1_700_000_000_000)
    run_task(plan(), new[50:121])  # what the query mirrored of the new incarnation: 50..120
    result = run_task(replace(plan(), source_ends={(TOPIC, 0): 200}), new[30:])
    landed = {r[1] for r in target.records}
    lost = [r[2] for r in new[30:] if r[5] not in landed]
    assert lost == [], f"source offsets {lost} skipped (skipped={result.skipped}) but never on the target"


def test_a_replay_whose_run_of_copies_reaches_the_targets_log_start_copies_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run of copies reaches the target's log start (past 0): retention and the mirror's own
    deletion look alike there, so nothing is skipped."""
    target = TargetPartition()
    install(monkeypatch, target)
    run_task(plan(), rows(range(100)))
    target.low = 40
    result = run_task(plan(), rows(range(20, 100)))
    assert (result.produced, result.skipped, result.placed) == (80, 0, True)


def test_a_replay_never_takes_an_old_incarnations_copies_for_the_batchs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the copy of the last record to skip is compared with its source record. The
    target holds copies of an old incarnation's 0..29, then of the new incarnation's 30..120
    (the source topic was recreated while the query ran and Spark's source read on from the
    old position 30). The run restarts the partition from the earliest offset: the copies
    read back run from 120 down to the old 0 without a break (their origin offsets go
    down), so the batch 0..199's first 30 records pass for copied: never produced."""
    target = TargetPartition()
    install(monkeypatch, target)
    run_task(plan(), rows(range(30), tag="old"))
    new = rows(range(200), tag="new", ts0=1_700_000_000_000)
    run_task(plan(), new[30:121])
    result = run_task(replace(plan(), source_ends={(TOPIC, 0): 200}), new)
    landed = {r[1] for r in target.records}
    lost = [r[2] for r in new if r[5] not in landed]
    assert lost == [], f"source offsets {lost} skipped (skipped={result.skipped}) but never on the target"


def test_a_run_of_copies_cut_by_records_by_hand_skips_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The target holds the copies of 0..99, five records by hand, then the copies of
    105..109 only (a retried attempt whose first records never landed). A replay of
    100..109: the run of copies reaches the read-back window's start, but the window is not
    cut by the target's log start, so nothing shows 100..104 landed: all ten are produced."""
    target = TargetPartition()
    install(monkeypatch, target)
    run_task(plan(), rows(range(100)))
    target.records.extend([(b"hand", b"made", 5, None)] * 5)
    run_task(plan(), rows(range(105, 110)))
    result = run_task(plan(), rows(range(100, 110)))
    assert (result.produced, result.skipped) == (10, 0)
    assert result.warning is not None and "100..104" in result.warning
