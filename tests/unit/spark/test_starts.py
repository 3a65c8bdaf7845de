"""Where a Spark query starts each source partition (`mirror.spark.starts`), with the group
commits it implies (`mirror.spark.commits`) and the topic watch that restarts a query
(`mirror.spark.watch`). In-memory fakes of our own admin and recorder ports; no Spark."""

from __future__ import annotations

from mirror.config import parse
from mirror.domain.gaps import GapReason, SourceGap
from mirror.domain.topics import TopicMapping
from mirror.kafka import OFFSET_END
from mirror.kafka.admin import Watermarks
from mirror.spark.commits import TARGET_TOPIC_ID, GroupCommits
from mirror.spark.starts import StartingOffsets, new_target, plan_starts, starting_offset
from mirror.spark.watch import TopicWatch


def _config():
    text = """\
clusters:
  a: {bootstrap: 127.0.0.1:9092}
  b: {bootstrap: 127.0.0.1:9093}
flows:
  - {name: one, source: a, target: b, topics: {include: [x]}}
"""
    return parse(text, env={})


def test_a_committed_offset_outside_the_source_log_starts_from_the_earliest():
    assert starting_offset(None, 0, 10) == (-2, None)  # never committed
    assert starting_offset(7, 0, 10) == (7, None)
    assert starting_offset(10, 0, 10) == (10, None)  # caught up
    assert starting_offset(3, 3, 10) == (3, None)
    start, why = starting_offset(900, 0, 50)  # the topic was recreated: offsets restarted
    assert start == -2 and why is not None and "past the log end 50" in why
    start, why = starting_offset(2, 5, 50)  # retention deleted what the group had not read
    assert start == -2 and why is not None and "before the log start 5" in why


def test_the_plan_names_each_partitions_start_and_what_must_happen_before_it():
    """The pure decision: x[0] at the group's 20, x[1] past the log end (from the beginning,
    the group's offset untrusted), x[2] never committed; y's target topic was recreated
    since its commit (reset, the new topic emptied first); z's source was recreated."""
    mappings = [TopicMapping("x", "a.x", 3), TopicMapping("y", "a.y", 1), TopicMapping("z", "a.z", 1)]
    committed = {
        ("x", 0): (20, None),
        ("x", 1): (900, None),
        ("y", 0): (5, f"{TARGET_TOPIC_ID}T1"),
        ("z", 0): (7, None),
    }
    marks = {tp: Watermarks(0, 50) for tp in committed}
    plan = plan_starts(mappings, committed, marks, {"a.x": "X", "a.y": "T2", "a.z": "Z"}, set(), {"z"})
    assert plan.offsets == {"x": {"0": 20, "1": -2, "2": -2}, "y": {"0": -2}, "z": {"0": -2}}
    assert plan.at == {("x", 0): 20}
    assert plan.earliest == [("x", 1), ("x", 2)]
    assert plan.reset == [("y", 0), ("z", 0)]
    assert plan.stale == {("a.y", 0): OFFSET_END}
    assert plan.restarted
    assert (
        len(plan.warnings) == 3 and "x[1]: the group's committed offset 900 is past the log end 50" in plan.warnings[0]
    )
    quiet = plan_starts([TopicMapping("x", "a.x", 2)], {("x", 0): (20, None)}, marks, {}, set(), set())
    assert quiet.offsets == {"x": {"0": 20, "1": -2}} and not quiet.restarted and not quiet.warnings


def test_a_start_over_many_partitions_says_so_once_per_topic_not_once_per_partition():
    """1,000 partitions whose target topic is new (or whose source was recreated) are a few
    lines in the log, not 1,000 each."""
    n = 1000
    mappings = [TopicMapping("x", "a.x", n), TopicMapping("z", "a.z", n), TopicMapping("r", "a.r", n)]
    committed = {("r", p): (5, None) for p in range(n)}
    marks = {tp: Watermarks(100, 200) for tp in committed}
    plan = plan_starts(mappings, committed, marks, {}, {"a.x"}, {"z"})
    assert len(plan.reset) == 2 * n and len(plan.earliest) == n  # every partition still decided
    assert len(plan.warnings) == 2, plan.warnings[:5]
    new, recreated = plan.warnings
    assert "target topic a.x is new" in new and f"{n} partitions" in new
    assert "source topic z was deleted and created again" in recreated and f"{n} partitions" in recreated
    # Records retention deleted before they were copied are a gap per partition, each reported
    # (one WARNING per gap, as `mirror run` reports them), counted and recorded.
    assert plan.gaps == [SourceGap("r", p, 5, 99, GapReason.RETENTION) for p in range(n)]


class FakeSource:
    """The source cluster's admin port, in memory: group commits (with metadata) and the log."""

    timeout = 1.0  # a refused commit is sent again for up to this long (`GroupCommits._insist`)

    def __init__(self, committed, low=0, high=50):
        self.committed = dict(committed)  # (topic, partition) -> (offset, metadata)
        self.low, self.high = low, high
        self.ids = {"x": "S1"}

    def topic_ids(self, topics):
        return {t: self.ids[t] for t in topics if t in self.ids}

    def group_offsets_with_metadata(self, _group):
        return dict(self.committed)

    def watermarks(self, parts, committed_only=True):
        return {tp: Watermarks(self.low, self.high) for tp in parts}

    def alter_group_offsets(self, _group, offsets, *, metadata=None):
        for tp, o in offsets.items():
            self.committed[tp] = (o, metadata if isinstance(metadata, str) or metadata is None else metadata.get(tp))


class FakeTarget:
    def __init__(self, ids):
        self.ids = ids
        self.deleted = {}

    def delete_records(self, before):
        self.deleted.update(before)

    def topic_ids(self, topics):
        return {t: self.ids[t] for t in topics if t in self.ids}


class FakeRecorder:
    def __init__(self):
        self.reset = []

    def on_reset(self, _flow, partitions):
        self.reset.extend(partitions)

    def flush(self):
        pass


class Job:
    """The units `SparkFlow` wires for a query's start, over the fakes."""

    def __init__(self, source, target, created=()):
        self.source, self.target, self.recorder = source, target, FakeRecorder()
        self.commits = GroupCommits("one", "g", source, target)
        self.starts = StartingOffsets("one", "g", source, target, self.recorder, self.commits)
        self.starts.created = set(created)
        config = _config()
        self.watch = TopicWatch(config, config.flow("one"), source, target)
        self.mappings: list[TopicMapping] = []

    def start(self, partitions=3):
        self.mappings = [TopicMapping("x", "a.x", partitions)]
        return self.starts.decide(self.mappings)


def test_a_query_starts_a_recreated_topic_from_the_earliest_offset():
    """The group committed 900 on `x` partition 0 before the topic was deleted and created
    again (now 0..50): the query must start it at -2, not hand 900 to Spark (whose source,
    with failOnDataLoss=false, would start at the latest offset and skip the new records)."""
    job = Job(FakeSource({("x", 0): (900, None), ("x", 1): (20, None)}), FakeTarget({"a.x": "T1"}))
    assert job.start().offsets == {"x": {"0": -2, "1": 20, "2": -2}}
    assert job.commits.positions == {("x", 1): 20}


def test_a_target_topic_created_by_the_run_is_mirrored_from_the_beginning():
    """The group committed 20 (into a target topic since deleted, by an untagged commit): the
    run creates a.x again, so every partition starts at the beginning, the recorder drops the
    old rows, and the group is rewound (tagged with the new topic's id) before Spark starts."""
    source = FakeSource({("x", 0): (20, None)})
    job = Job(source, FakeTarget({"a.x": "T2"}), created={"a.x"})
    assert job.start(2).offsets == {"x": {"0": -2, "1": -2}}
    assert job.recorder.reset == [("x", 0), ("x", 1)]
    assert source.committed == {("x", 0): (0, "target-topic-id=T2"), ("x", 1): (0, "target-topic-id=T2")}
    assert not job.starts.created
    job.commits.commit({("x", 0): 30})
    assert source.committed[("x", 0)] == (30, "target-topic-id=T2")  # every commit carries the tag


def test_a_commit_tagged_with_an_earlier_target_topic_starts_from_the_beginning():
    """a.x was deleted and created again while the flow was stopped: the commit names T1, the
    topic is now T2. A commit tagged T2, or untagged, is trusted."""
    from mirror.engine.partition import TID as _TID

    assert TARGET_TOPIC_ID == _TID  # the same tag as `mirror run`: either engine reads the other's
    source = FakeSource(
        {("x", 0): (20, "target-topic-id=T1"), ("x", 1): (20, "target-topic-id=T2"), ("x", 2): (20, None)}
    )
    job = Job(source, FakeTarget({"a.x": "T2"}))
    starts = job.start()
    assert starts.offsets == {"x": {"0": -2, "1": 20, "2": 20}}
    assert job.recorder.reset == [("x", 0)]
    assert job.target.deleted == {("a.x", 0): OFFSET_END}  # what the new topic got uncommitted goes first
    assert starts.restarted  # a --checkpoint of the query is dropped: it would resume past the reset
    assert new_target(False, "target-topic-id=T1", None) is False  # the target's id unknown: trust
    assert new_target(False, "something else", "T2") is False


def test_a_target_topic_recreated_while_the_query_runs_restarts_it():
    target = FakeTarget({"a.x": "T1"})
    job = Job(FakeSource({("x", 0): (20, None)}), target)
    assert not job.start(1).restarted
    assert not job.watch.targets_recreated(job.mappings, job.commits.target_ids)
    target.ids["a.x"] = "T2"
    assert job.watch.targets_recreated(job.mappings, job.commits.target_ids)
    del target.ids["a.x"]
    assert job.watch.targets_recreated(job.mappings, job.commits.target_ids)


def test_a_partition_restarted_from_the_earliest_offset_commits_again_after_a_query_restart():
    """In one run: the first query committed 900 on x[0]; the source topic was then deleted
    and created again with more partitions (the query restarts on the count change). The
    group's 900 is past the new log's end, so the new query starts x[0] from the earliest
    offset, and its commits must not be held back by the 900 remembered from the first
    query: otherwise the group stays at 900 while 0..50 are mirrored (lag and failover
    translation wrong), and a restart once the new log passes 900 resumes there, past
    records this run read but never committed."""
    source = FakeSource({("x", 0): (20, None)})
    job = Job(source, FakeTarget({"a.x": "T1"}))
    job.start(1)
    job.commits.commit({("x", 0): 900})  # the first query's last batch
    assert source.committed[("x", 0)][0] == 900
    assert job.start(2).offsets == {"x": {"0": -2, "1": -2}}  # recreated: the log is 0..50 now
    job.commits.commit({("x", 0): 30, ("x", 1): 10})
    assert source.committed[("x", 0)][0] == 30, (
        f"group left at {source.committed[('x', 0)][0]} after mirroring x[0] up to 30"
    )


def test_a_source_topic_recreated_while_the_query_runs_restarts_it_from_the_beginning():
    """The source topic x was deleted and created again (same partition count) while the
    query ran. Spark's source does not notice a new topic id: with failOnDataLoss=false it
    drops a batch whose end is below its start ("offset was changed from .. to ..", a WARN
    the run's ERROR log level hides) and goes on from the new end, or, once the new log is
    past the old position, just reads on from there: the new incarnation's first records
    are never mirrored. The run must notice (the topic id, as for target topics), restart
    the query, and mirror the new incarnation from its beginning: the old incarnation's
    rows dropped, the group rewound first; the target's copies of the old records stay."""
    source = FakeSource({("x", 0): (900, None)}, high=950)
    target = FakeTarget({"a.x": "T1"})
    job = Job(source, target)
    assert job.start(1).offsets == {"x": {"0": 900}}
    source.ids["x"] = "S2"  # recreated, and already refilled past 900
    assert job.watch.sources_recreated(job.mappings, job.starts.source_ids)
    starts = job.start(1)
    assert starts.offsets == {"x": {"0": -2}}
    assert job.recorder.reset == [("x", 0)]
    assert source.committed[("x", 0)][0] == 0 and starts.restarted
    assert target.deleted == {}
    assert not job.watch.sources_recreated(job.mappings, job.starts.source_ids)


class FakeProgress:
    """`ProgressStarts` over an in-memory progress group on the target."""

    def __init__(self, progress):
        self.progress = progress  # (target topic, partition) -> next source offset
        self.reset_to_zero = []

    def committed(self, group, mappings, source_ids):
        from mirror.kafka.progress import Progress
        from mirror.spark.exactly_once import with_progress

        return with_progress(group, {tp: Progress(o, None) for tp, o in self.progress.items()}, mappings), set()

    def reset(self, _mappings, partitions):
        self.reset_to_zero.extend(partitions)


def test_with_exactly_once_a_query_starts_at_the_targets_progress_and_the_group_catches_up_to_it():
    """A driver killed between a batch's transactions and its group commit: the target's
    progress is ahead of the group. The query starts there, and the group is committed there
    at once (a partition with nothing left to copy would otherwise keep it behind)."""
    source = FakeSource({("x", 0): (20, None), ("x", 1): (30, None)})
    job = Job(source, FakeTarget({"a.x": "T1"}))
    job.starts.progress = FakeProgress({("a.x", 0): 25, ("a.x", 2): 7})
    assert job.start().offsets == {"x": {"0": 25, "1": 30, "2": 7}}
    assert {tp: o for tp, (o, _meta) in source.committed.items()} == {("x", 0): 25, ("x", 1): 30, ("x", 2): 7}
    assert job.commits.positions == {("x", 0): 25, ("x", 1): 30, ("x", 2): 7}


class _Marks:
    """A target admin answering watermarks (or failing to)."""

    def __init__(self, marks, error=None):
        self.marks, self.error, self.asked = marks, error, []

    def watermarks(self, parts, committed_only=True):
        self.asked.append((sorted(parts), committed_only))
        if self.error:
            raise self.error
        return {tp: self.marks[tp] for tp in parts}


def test_empty_targets_names_the_source_partitions_whose_target_partition_holds_nothing():
    from mirror.errors import MirrorError
    from mirror.spark.starts import empty_targets

    mappings = [TopicMapping("x", "a.x", 3)]
    admin = _Marks({("a.x", 0): Watermarks(0, 0), ("a.x", 1): Watermarks(0, 5), ("a.x", 2): Watermarks(9, 9)})
    # Partition 2 was emptied by DeleteRecords (or retention): nothing to skip there either.
    assert empty_targets(admin, mappings) == {("x", 0), ("x", 2)}
    # Open transactions count: a record not yet committed may still be a copy.
    assert admin.asked == [([("a.x", 0), ("a.x", 1), ("a.x", 2)], False)]
    assert empty_targets(_Marks({}, MirrorError("no leader")), mappings) == set()


def test_a_query_settles_only_its_own_partitions_named_empty():
    from pathlib import Path

    from mirror.spark.batches import Batches
    from mirror.spark.task import TaskPlan

    config = _config()
    flow = config.flow("one")
    batches = Batches("one", None, TaskPlan(flow, config.clusters["b"]), None, None)
    # Pins the invariant behind the tail-free JVM path: `_settled` holds only this query's
    # partitions named empty, and a new query starts it afresh.
    batches.start_query([TopicMapping("x", "b.x", 2)], Path("cp"), {("x", 1), ("y", 0)})
    assert batches._settled == {("x", 1)}
    batches.start_query([TopicMapping("x", "b.x", 2)], Path("cp"))
    assert batches._settled == set()


def test_start_from_starts_only_partitions_the_group_never_committed():
    """x[1] was never committed: it starts where start_from chose, even into a target topic
    the run created; x[0] resumes at the group's offset whatever was chosen."""
    mappings = [TopicMapping("x", "a.x", 2)]
    committed = {("x", 0): (20, None)}
    marks = {("x", 0): Watermarks(0, 50), ("x", 1): Watermarks(0, 70)}
    chosen = {("x", 1): 64, ("x", 0): 45}
    plan = plan_starts(mappings, committed, marks, {"a.x": "X"}, {"a.x"}, set(), chosen)
    assert plan.offsets["x"]["1"] == 64 and plan.at[("x", 1)] == 64
    assert ("x", 1) not in plan.reset and ("x", 1) not in plan.earliest
    assert plan.offsets["x"]["0"] == -2  # created by this run, committed before: from the beginning, as always


def test_a_capped_driver_waits_after_a_batch_until_the_cap_paid_for_it():
    from mirror.domain.throttle import Throttle
    from mirror.spark.batches import pace

    class Clock:
        now = 0.0

        def __call__(self) -> float:
            return self.now

    class Stop:
        """A stop event whose waits pass on the fake clock."""

        def __init__(self, clock: Clock) -> None:
            self.clock, self.waited = clock, 0.0

        def is_set(self) -> bool:
            return False

        def wait(self, seconds: float) -> bool:
            self.clock.now += seconds
            self.waited += seconds
            return False

    clock = Clock()
    throttle = Throttle(max_bytes=1000, clock=clock)
    stop = Stop(clock)
    pace(throttle, stop, 10, 5000)  # five seconds' worth, one second of it paid from the burst
    assert 4.0 <= stop.waited <= 4.1
    assert throttle.throttled_seconds() >= 4.0


def test_a_source_topic_recreated_while_no_run_was_starts_from_the_beginning_once_reported(tmp_path, caplog):
    """The group lost its offsets with the old topic; the offset store recorded the old id
    and saw its end (40) past the newest copy (29): the driver reports 10 records never
    mirrored (the counter, no offset_gaps row), and the new topic starts from the beginning."""
    from mirror.domain.offsetmap import OffsetSync
    from mirror.run.recorder import OffsetMapRecorder
    from mirror.store import SqliteStore

    class Heard:
        def __init__(self):
            self.gaps = []

        def on_gap(self, _flow, gap):
            self.gaps.append(gap)

    store = SqliteStore(tmp_path / "o.db")
    store.write_syncs("one", [OffsetSync("x", 0, 0, 0)], [OffsetSync("x", 0, 29, 29)])
    store.write_source_ends("one", {("x", 0): 40}, 1)
    store.record_source_topic_ids("one", {"x": "OLD"})
    source, metrics = FakeSource({}), Heard()  # x's id now: S1
    recorder = OffsetMapRecorder(store, "one", registry=None)
    starts = StartingOffsets(
        "one", "g", source, FakeTarget({"a.x": "X"}), recorder, GroupCommits("one", "g", source, FakeTarget({}))
    )
    starts.metrics = metrics
    got = starts.decide([TopicMapping("x", "a.x", 1)])
    assert got.offsets == {"x": {"0": -2}} and got.reset == [("x", 0)]
    assert metrics.gaps == [SourceGap("x", -1, 0, 9, GapReason.RECREATED)]
    lines = [r.getMessage() for r in caplog.records if "created again" in r.getMessage()]
    assert (
        len(lines) == 1
        and "while the flow was stopped" in lines[0]
        and "(10 by the offset store's last look)" in lines[0]
    )
    assert store.source_topic_ids("one") == {"x": "S1"} and store.gaps("one") == {}
    again = starts.decide([TopicMapping("x", "a.x", 1)])  # the next query: known now
    assert len(metrics.gaps) == 1 and again.reset == []


def test_the_spark_driver_serves_the_flows_cap_and_its_throttled_time() -> None:
    """`mirror spark run --metrics-port` serves the cap and the time the driver held batches
    back for it, under the names `mirror run` uses."""
    from prometheus_client import CollectorRegistry

    from mirror.config import parse
    from mirror.spark.job import SparkFlow, watch_throttle

    config = parse(
        "clusters:\n  a: {bootstrap: '127.0.0.1:1'}\n  b: {bootstrap: '127.0.0.1:2'}\n"
        "flows:\n  - {name: f, source: a, target: b, topics: {include: [x]}, max_bytes_per_second: 1MiB}\n",
        env={},
    )
    job = SparkFlow(config, config.flow("f"))
    registry = CollectorRegistry()
    watch_throttle(registry, job)
    assert registry.get_sample_value("mirror_flow_max_bytes_per_second", {"flow": "f"}) == 1024 * 1024
    assert registry.get_sample_value("mirror_flow_max_records_per_second", {"flow": "f"}) is None
    assert registry.get_sample_value("mirror_flow_throttled_seconds_total", {"flow": "f"}) == 0
