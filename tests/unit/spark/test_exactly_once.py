"""The Spark engine's exactly-once task (`mirror.spark.exactly_once`) against an in-memory
target partition with transactions (our fake of the producer and progress-group ports): what
an attempt writes given the committed progress, and the offset-map pairs across commit markers.
No Spark, no Kafka (tests/integration/test_spark_exactly_once.py runs the real thing)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

import mirror.spark.exactly_once as eos
import mirror.spark.task as task
from mirror.domain.topics import TopicMapping
from mirror.errors import ClusterUnavailable, MirrorError
from mirror.kafka.progress import Progress, ProgressPending, TransactionFailed, parse_metadata
from mirror.spark.exactly_once import mirror_exactly_once, with_progress, writer_id
from mirror.spark.task import TaskPlan
from tests.unit.spark.fakes import Delivered, task_plan

TOPIC, TARGET = "orders", "src.orders"


@dataclass
class Target:
    """One target partition: its log (records and commit markers, by offset) and the progress group."""

    log: list[Any] = field(default_factory=list)
    progress: dict[tuple[str, int], Progress] = field(default_factory=dict)
    transactions: int = 0
    pending_writer: str | None = None  # another writer's transaction open on the progress
    unavailable: int = 0  # reads answered "coordinator not ready" before one succeeds
    epochs: dict[str, int] = field(default_factory=dict)  # transactional.id -> its epoch (bumped by a fence)

    def committed_records(self) -> list[Any]:
        return [r for r in self.log if r not in ("marker", "aborted")]


def install(monkeypatch: pytest.MonkeyPatch, target: Target) -> None:
    class FakeProducer:
        def __init__(self, settings: dict[str, Any]) -> None:
            self.id = settings["transactional.id"]
            self.pending: list[tuple[int, Any]] = []
            self.staged: dict[tuple[str, int], Progress] = {}

        def init_transactions(self, _t: float) -> None:
            self.epoch = target.epochs[self.id] = target.epochs.get(self.id, 0) + 1

        def begin_transaction(self) -> None:
            self.staged = {}

        def produce(self, _topic: str, value: Any, key: Any, **kw: Any) -> None:
            target.log.append((key, value))
            self.pending.append((len(target.log) - 1, kw.get("on_delivery")))

        def poll(self, _t: float = 0) -> int:
            return 0

        def flush(self, _t: float = 0) -> int:
            for offset, cb in self.pending:
                if cb is not None:
                    cb(None, Delivered(offset))
            self.pending.clear()
            return 0

        def send_offsets_to_transaction(self, offsets: Any, _meta: Any, _t: float) -> None:
            self.staged = {
                (tp.topic, tp.partition): Progress(tp.offset, *parse_metadata(tp.metadata)) for tp in offsets
            }

        def commit_transaction(self, _t: float) -> None:
            if target.epochs[self.id] != self.epoch:
                raise TransactionFailed("fenced: another producer took the id's epoch", fenced=True)
            target.log.append("marker")  # a commit marker takes an offset
            target.progress.update(self.staged)
            target.transactions += 1

        def abort_transaction(self, _t: float) -> None:
            pass

        def purge(self, **_k: Any) -> None:
            pass

    class FakeProgressGroup:
        def __init__(self, *_a: Any) -> None:
            pass

        def metadata(self) -> str:
            return "group-metadata"

        def close(self) -> None:
            pass

        def read(self, parts: Any, _timeout: float, *, stable: bool = True) -> dict[tuple[str, int], Progress]:
            if target.unavailable > 0:
                target.unavailable -= 1
                raise ClusterUnavailable("cluster 'dst' could not read the progress: Broker: Not coordinator")
            if stable and target.pending_writer is not None:
                raise ProgressPending("an open transaction's offsets")
            return {tp: target.progress[tp] for tp in parts if tp in target.progress}

    def fake_fence(_name: str, _cluster: Any, writer: str, _timeout: float) -> None:
        target.epochs[writer] = target.epochs.get(writer, 0) + 1
        if writer == target.pending_writer:
            target.pending_writer = None  # its open transaction aborted

    monkeypatch.setattr(task, "_CLIENTS", {})
    monkeypatch.setattr(eos, "make_producer", lambda _n, _c, settings: FakeProducer(settings))
    monkeypatch.setattr(eos, "ProgressGroup", FakeProgressGroup)
    monkeypatch.setattr(eos, "fence", fake_fence)


def plan() -> TaskPlan:
    return task_plan("exactly_once: true, ")


def rows(offsets: range) -> list[tuple[Any, ...]]:
    return [(TOPIC, 0, o, 1_600_000_000_000 + o, b"k%d" % o, b"v%d" % o, None) for o in offsets]


def run(p: TaskPlan, batch: list[tuple[Any, ...]], chunk: int = 100) -> task.TaskResult:
    (result,) = mirror_exactly_once(p, [batch[i : i + chunk] for i in range(0, len(batch), chunk)])
    return result


def test_batches_commit_their_records_with_the_progress_and_each_commit_marker_moves_the_delta(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = Target()
    install(monkeypatch, target)
    first, second = run(plan(), rows(range(0, 100))), run(plan(), rows(range(100, 250)))
    assert target.progress[(TARGET, 0)] == Progress(250, writer_id("f", TOPIC, 0))
    assert (first.produced, first.next_offset, first.syncs) == (100, 100, [(0, 0)])
    # The marker after the first batch's copies is target offset 100: the second batch's
    # first copy (source 100) is at 101, a new delta, so a row.
    assert (second.produced, second.next_offset, second.syncs) == (150, 250, [(100, 101)])
    assert len(target.committed_records()) == 250


def test_an_attempt_writes_only_what_the_progress_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """An earlier attempt committed the slice: nothing written, no rows (their copies' places
    are unknown to this attempt). Part of it (progress inside the slice): the rest only."""
    target = Target()
    install(monkeypatch, target)
    run(plan(), rows(range(0, 100)))
    again = run(plan(), rows(range(0, 100)))
    assert (again.produced, again.skipped, again.next_offset, again.placed, again.syncs) == (0, 100, 100, False, [])
    target.progress[(TARGET, 0)] = Progress(160, None)  # as if a long slice committed 100..159 then died
    rest = run(plan(), rows(range(100, 200)))
    assert (rest.produced, rest.skipped, rest.next_offset, rest.placed) == (40, 60, 200, False)
    assert [v for _k, v in target.committed_records()][-40:] == [b"v%d" % o for o in range(160, 200)]
    assert target.progress[(TARGET, 0)].next_offset == 200


def test_a_progress_before_the_slice_writes_from_its_start_and_one_past_the_source_end_is_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = Target()
    install(monkeypatch, target)
    target.progress[(TARGET, 0)] = Progress(40, None)  # the records 40..49 were transaction markers or aborted
    assert run(plan(), rows(range(50, 80))).produced == 30
    # Another incarnation's progress (the source topic recreated): past the source's end now.
    target.progress[(TARGET, 0)] = Progress(5000, None)
    fresh = run(replace(plan(), source_ends={(TOPIC, 0): 120}), rows(range(0, 120)))
    assert (fresh.produced, fresh.skipped) == (120, 0)
    assert target.progress[(TARGET, 0)].next_offset == 120


def test_a_slow_slice_is_committed_in_several_transactions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction open longer than the coordinator's timeout is aborted: a slice that takes
    longer than a third of it commits what it produced and goes on in a new transaction."""
    target = Target()
    install(monkeypatch, target)
    clock = iter(range(0, 10_000, 15))  # each look at the clock 15 s later: budget 20 s
    monkeypatch.setattr(eos.time, "monotonic", lambda: float(next(clock)))
    result = run(plan(), rows(range(0, 300)), chunk=30)
    assert target.transactions > 1
    assert result.produced == 300 and target.progress[(TARGET, 0)].next_offset == 300
    copies = [i for i, r in enumerate(target.log) if r not in ("marker", "aborted")]
    # One row per transaction: each starts after the previous one's marker.
    assert len(result.syncs) == target.transactions
    assert all(copies[src] == tgt for src, tgt in result.syncs)


def test_another_writers_open_transaction_on_the_progress_is_fenced_before_the_task_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A native worker that died holding the partition (its id in the last committed progress)
    left a transaction open: the task fences it as the native claim fences Spark's ids."""
    target = Target()
    install(monkeypatch, target)
    target.progress[(TARGET, 0)] = Progress(30, "mirror.f.0a1b2c")
    target.pending_writer = "mirror.f.0a1b2c"
    result = run(plan(), rows(range(0, 100)))
    assert target.pending_writer is None
    assert (result.produced, result.skipped) == (70, 30)
    # One it cannot fence (its own id, or none named): the attempt fails, Spark retries it.
    target.pending_writer = "mirror.f.unnamed"
    with pytest.raises(ProgressPending):
        run(plan(), rows(range(100, 110)))


def test_the_query_starts_from_the_targets_progress_and_from_the_group_where_there_is_none() -> None:
    mappings = [TopicMapping("a", "src.a", 2), TopicMapping("b", "src.b", 1)]
    committed = {("a", 0): (10, "target-topic-id=x"), ("a", 1): (7, None), ("b", 0): (3, None)}
    progress = {("src.a", 0): Progress(25, "w"), ("src.b", 0): Progress(4, None)}
    assert with_progress(committed, progress, mappings) == {
        ("a", 0): (25, "target-topic-id=x"),  # the tag still tells a recreated target
        ("a", 1): (7, None),
        ("b", 0): (4, None),
    }


def test_progress_of_a_deleted_source_incarnation_counts_as_none_and_the_commit_names_the_topic_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The source topic was deleted and created again while the flow was stopped, and refilled
    past the old progress (60, named with the old topic's id): the task writes the slice whole
    (the new topic's records below 60 were never copied), and its commit names the new id."""
    target = Target()
    install(monkeypatch, target)
    target.progress[(TARGET, 0)] = Progress(60, writer_id("f", TOPIC, 0), "old-id")
    p = replace(plan(), source_ids={TOPIC: "new-id"}, source_ends={(TOPIC, 0): 120})
    result = run(p, rows(range(0, 100)))
    assert (result.produced, result.skipped) == (100, 0)
    assert target.progress[(TARGET, 0)] == Progress(100, writer_id("f", TOPIC, 0), "new-id")
    assert (run(p, rows(range(0, 100))).produced, run(p, rows(range(100, 120))).produced) == (0, 20)
    # Progress naming no source id (written before ids were, or by a reset) still counts.
    target.progress[(TARGET, 0)] = Progress(110, None)
    assert run(p, rows(range(100, 120))).produced == 10


def test_a_query_starts_a_source_incarnation_whose_progress_names_another_id_from_the_beginning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stopped, the flow's source topic x was deleted and created again (id S2) and refilled
    past the progress the old one (S1) left on the target (600); Kafka dropped the group's
    offsets of the deleted topic. The query must start x from the beginning with the old
    incarnation's rows dropped and its progress reset, not at 600."""
    from tests.unit.spark.test_starts import FakeSource, FakeTarget, Job, _config

    target = Target()
    install(monkeypatch, target)
    target.progress[("a.x", 0)] = Progress(600, writer_id("one", "x", 0), "S1")
    target.progress[("a.x", 1)] = Progress(500, writer_id("one", "x", 1), "S1")
    source = FakeSource({}, high=950)
    source.ids["x"] = "S2"
    job = Job(source, FakeTarget({"a.x": "T1"}))
    reset: dict[tuple[str, int], int] = {}
    admin = type("Admin", (), {"alter_group_offsets": lambda _s, _g, offsets, **_k: reset.update(offsets)})()
    config = _config()
    job.starts.progress = eos.ProgressStarts(config.flow("one"), config.clusters["b"], admin)
    starts = job.start(2)
    assert starts.offsets == {"x": {"0": -2, "1": -2}}
    assert job.recorder.reset == [("x", 0), ("x", 1)] and reset == {("a.x", 0): 0, ("a.x", 1): 0}
    # Progress naming the topic's id now, or none, says where the next query starts.
    target.progress[("a.x", 0)] = Progress(40, writer_id("one", "x", 0), "S2")
    target.progress[("a.x", 1)] = Progress(30, None)
    again = Job(source, FakeTarget({"a.x": "T1"}))
    again.starts.progress = job.starts.progress
    assert again.start(2).offsets == {"x": {"0": 40, "1": 30}} and not again.recorder.reset


def test_the_driver_waits_for_the_progress_groups_coordinator_as_the_task_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first exactly-once run on a fresh target: the progress group's coordinator is not
    ready for a moment (NOT_COORDINATOR). The query's start reads the progress again until
    the target's timeout, as a task does, instead of failing the run."""
    target = Target(unavailable=2)
    install(monkeypatch, target)
    monkeypatch.setattr(eos, "RETRY_BACKOFF", 0.001)
    target.progress[(TARGET, 0)] = Progress(25, writer_id("f", TOPIC, 0))
    starts = eos.ProgressStarts(plan().flow, plan().target, admin=None)
    committed, others = starts.committed({}, [TopicMapping(TOPIC, TARGET, 1)], {})
    assert (committed, others, target.unavailable) == ({(TOPIC, 0): (25, None)}, set(), 0)
    target.unavailable = 2
    assert run(plan(), rows(range(0, 40))).produced == 15


def test_a_progress_reset_fences_the_attempts_left_over_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """A query starting a partition from the beginning sets its progress to 0. An attempt left
    over from before (an executor of a killed driver, its transaction open) must not commit
    after that: the new query's tasks would take its progress as theirs and skip the records
    below its slice."""
    target = Target()
    install(monkeypatch, target)

    class Admin:
        def alter_group_offsets(self, _group: str, offsets: dict[tuple[str, int], int], **_k: Any) -> None:
            target.progress.update({tp: Progress(o, None) for tp, o in offsets.items()})

    starts = eos.ProgressStarts(plan().flow, plan().target, Admin())

    def leftover() -> Any:
        yield rows(range(50, 100))
        starts.reset([TopicMapping(TOPIC, TARGET, 1)], [(TOPIC, 0)])
        yield rows(range(100, 150))

    with pytest.raises(MirrorError):
        list(mirror_exactly_once(plan(), leftover()))
    assert target.progress[(TARGET, 0)] == Progress(0, None)
    assert run(plan(), rows(range(0, 150))).produced == 150
