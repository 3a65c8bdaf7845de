"""The Spark engine's pure pieces: replay detection from provenance headers, delta changes,
and the checks a run makes before Spark starts (no Spark, no Kafka)."""

from __future__ import annotations

import json

import pytest

from mirror.config import parse
from mirror.domain.route import HEADER_ORIGIN, Route
from mirror.errors import ExitCode, MirrorError, UsageError
from mirror.spark.job import check_master, claim_checkpoint, with_task_retries
from mirror.spark.task import delta_changes, origin_offset

R = Route("orders", 1, "nyc.orders", b"nyc/orders/1/")


def h(origin: str | None, *own: tuple[str, bytes | None]) -> list[tuple[str, bytes | None]]:
    return [*own, (HEADER_ORIGIN, origin.encode())] if origin else list(own)


def test_origin_offset_reads_only_this_routes_newest_hop():
    assert origin_offset(R, h("nyc/orders/1/42", ("a", b"x"))) == 42
    assert origin_offset(R, h("nyc/orders/2/42")) is None  # another partition's copy
    assert origin_offset(R, h("nyc/orders/1/7") + h("nyc/orders/1/9")) == 9
    assert origin_offset(R, [("a", None)]) is None
    assert origin_offset(Route("orders", 1, "orders", None), h("nyc/orders/1/3")) is None  # provenance off


def test_local_mode_gets_task_retries_and_other_masters_are_kept():
    assert with_task_retries("local[*]") == "local[*,4]"
    assert with_task_retries("local[2]") == "local[2,4]"
    assert with_task_retries("local") == "local[1,4]"
    assert with_task_retries("local[2,8]") == "local[2,8]"  # the user's own retries
    assert with_task_retries("spark://h:7077") == "spark://h:7077"  # spark.task.maxFailures applies


def test_delta_changes_keep_the_first_pair_and_every_change():
    assert delta_changes([(4, 11), (5, 12), (7, 13), (8, 14), (9, 16)]) == [(4, 11), (7, 13), (9, 16)]
    assert delta_changes([]) == []


def test_a_master_that_does_not_answer_is_one_clear_error():
    with pytest.raises(MirrorError, match="spark://127.0.0.1:9 does not answer") as info:
        check_master("spark://127.0.0.1:9", timeout=2)
    assert info.value.exit_code == ExitCode.FAILURE
    check_master("local[2]")  # nothing to reach


def _flow(name: str):
    text = f"""\
clusters:
  a: {{bootstrap: 127.0.0.1:9092}}
  b: {{bootstrap: 127.0.0.1:9093}}
flows:
  - {{name: {name}, source: a, target: b, topics: {{include: [x]}}}}
"""
    config = parse(text, env={})
    return config.flow(name)


def test_a_checkpoint_directory_belongs_to_one_flow(tmp_path):
    assert claim_checkpoint(tmp_path / "cp", _flow("one")) == tmp_path / "cp" / "query"
    assert json.loads((tmp_path / "cp" / "mirror-flow.json").read_text())["flow"] == "one"
    assert claim_checkpoint(tmp_path / "cp", _flow("one")) == tmp_path / "cp" / "query"  # its own again
    with pytest.raises(UsageError, match="belongs to .*'one'.*not flow 'two'"):
        claim_checkpoint(tmp_path / "cp", _flow("two"))


def test_a_pyspark_without_its_connector_jar_is_refused(tmp_path, monkeypatch):
    from mirror.spark import job

    monkeypatch.setattr(job, "CACHE", tmp_path)
    (tmp_path / "spark-4.2.0" / "jars").mkdir(parents=True)
    (tmp_path / "spark-4.2.0" / "jars" / "spark-sql-kafka-0-10_2.13-4.2.0.jar").write_bytes(b"")
    assert job.connector_jars("4.2.0") == [
        str(tmp_path / "spark-4.2.0" / "jars" / "spark-sql-kafka-0-10_2.13-4.2.0.jar")
    ]
    with pytest.raises(MirrorError, match="no Spark Kafka connector for pyspark 4.3.0") as info:
        job.connector_jars("4.3.0")
    assert "make setup" in str(info.value)


def test_a_committed_offset_outside_the_source_log_starts_from_the_earliest():
    from mirror.spark.job import starting_offset

    assert starting_offset(None, 0, 10) == (-2, None)  # never committed
    assert starting_offset(7, 0, 10) == (7, None)
    assert starting_offset(10, 0, 10) == (10, None)  # caught up
    assert starting_offset(3, 3, 10) == (3, None)
    start, why = starting_offset(900, 0, 50)  # the topic was recreated: offsets restarted
    assert start == -2 and why is not None and "past the log end 50" in why
    start, why = starting_offset(2, 5, 50)  # retention deleted what the group had not read
    assert start == -2 and why is not None and "before the log start 5" in why


class FakeSource:
    """The source cluster's admin port, in memory: group commits (with metadata) and the log."""

    def __init__(self, committed, low=0, high=50):
        self.committed = dict(committed)  # (topic, partition) -> (offset, metadata)
        self.low, self.high = low, high
        self.ids = {"x": "S1"}

    def topic_ids(self, topics):
        return {t: self.ids[t] for t in topics if t in self.ids}

    def group_offsets_with_metadata(self, _group):
        return dict(self.committed)

    def watermarks(self, parts, committed_only=True):
        from mirror.kafka.admin import Watermarks

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


def _job(source, target, created=()):
    from mirror.spark.job import SparkFlow

    job = SparkFlow(None, _flow("one"))  # type: ignore[arg-type]
    job._source, job._target, job._recorder = source, target, FakeRecorder()
    job._created = set(created)
    return job


def _start(job, partitions=3):
    from mirror.domain.topics import TopicMapping

    job._mappings = [TopicMapping("x", "a.x", partitions)]
    return job._starting_offsets(job._mappings)


def test_a_query_starts_a_recreated_topic_from_the_earliest_offset():
    """The group committed 900 on `x` partition 0 before the topic was deleted and created
    again (now 0..50): the query must start it at -2, not hand 900 to Spark (whose source,
    with failOnDataLoss=false, would start at the latest offset and skip the new records)."""
    job = _job(FakeSource({("x", 0): (900, None), ("x", 1): (20, None)}), FakeTarget({"a.x": "T1"}))
    assert _start(job) == {"x": {"0": -2, "1": 20, "2": -2}}
    assert job._committed == {("x", 1): 20}


def test_a_target_topic_created_by_the_run_is_mirrored_from_the_beginning():
    """The group committed 20 (into a target topic since deleted, by an untagged commit): the
    run creates a.x again, so every partition starts at the beginning, the recorder drops the
    old rows, and the group is rewound (tagged with the new topic's id) before Spark starts."""
    source = FakeSource({("x", 0): (20, None)})
    job = _job(source, FakeTarget({"a.x": "T2"}), created={"a.x"})
    assert _start(job, 2) == {"x": {"0": -2, "1": -2}}
    assert job._recorder.reset == [("x", 0), ("x", 1)]
    assert source.committed == {("x", 0): (0, "target-topic-id=T2"), ("x", 1): (0, "target-topic-id=T2")}
    assert not job._created
    job._commit({("x", 0): 30})
    assert source.committed[("x", 0)] == (30, "target-topic-id=T2")  # every commit carries the tag


def test_a_commit_tagged_with_an_earlier_target_topic_starts_from_the_beginning():
    """a.x was deleted and created again while the flow was stopped: the commit names T1, the
    topic is now T2. A commit tagged T2, or untagged, is trusted."""
    from mirror.engine.assignment import TID as _TID
    from mirror.spark.job import TARGET_TOPIC_ID, new_target

    assert TARGET_TOPIC_ID == _TID  # the same tag as `mirror run`: either engine reads the other's
    source = FakeSource(
        {("x", 0): (20, "target-topic-id=T1"), ("x", 1): (20, "target-topic-id=T2"), ("x", 2): (20, None)}
    )
    job = _job(source, FakeTarget({"a.x": "T2"}))
    assert _start(job) == {"x": {"0": -2, "1": 20, "2": 20}}
    assert job._recorder.reset == [("x", 0)]
    from mirror.kafka import OFFSET_END

    assert job._target.deleted == {("a.x", 0): OFFSET_END}  # what the new topic got uncommitted goes first
    assert job._restarted  # a --checkpoint of the query is dropped: it would resume past the reset
    assert new_target(False, "target-topic-id=T1", None) is False  # the target's id unknown: trust
    assert new_target(False, "something else", "T2") is False


def test_a_target_topic_recreated_while_the_query_runs_restarts_it():
    target = FakeTarget({"a.x": "T1"})
    job = _job(FakeSource({("x", 0): (20, None)}), target)
    _start(job, 1)
    assert not job._restarted and not job._targets_recreated(job._mappings)
    target.ids["a.x"] = "T2"
    assert job._targets_recreated(job._mappings)
    del target.ids["a.x"]
    assert job._targets_recreated(job._mappings)


def test_a_task_sizes_producer_batches_below_the_target_topics_limit_as_mirror_run_does():
    from mirror.kafka.settings import BATCH_SIZE, batch_size_for
    from mirror.spark.task import TaskPlan

    config = parse(
        "clusters: {s: {bootstrap: 'h:1'}, d: {bootstrap: 'h:2'}}\nflows: "
        "[{name: f, source: s, target: d, topics: {include: [t]}}]\n",
        env={},
    )
    plan = TaskPlan(config.flow("f"), config.clusters["d"], limits={"s.small": 65536, "s.big": 10 * BATCH_SIZE})
    assert plan.producer_settings_for("s.small")["batch.size"] == batch_size_for(BATCH_SIZE, 65536) == 65536 - 1024
    assert plan.producer_settings_for("s.big")["batch.size"] == BATCH_SIZE
    assert plan.producer_settings_for("s.unknown")["batch.size"] == BATCH_SIZE


def test_audit_trims_only_what_the_target_topics_retention_explains():
    from mirror.domain.offsetmap import OffsetSync
    from mirror.spark.audit import first_held, retention_cutoff

    now = 10_000_000
    assert retention_cutoff({"retention.ms": "3600000", "retention.bytes": "-1"}, now) == now - 3600_000
    assert (
        retention_cutoff({"retention.ms": "-1", "retention.bytes": "-1"}, now) is None
    )  # keeps everything: a gap is missing
    assert retention_cutoff({"retention.ms": "-1", "retention.bytes": "1000"}, now) == float(
        "inf"
    )  # size-based: any age
    # Copies at target offset = source + 5 from source 0, + 4 from source 100 (a marker): the
    # target's log start 50 holds the copy of source 45; 200 the copy of 196.
    syncs = [OffsetSync("t", 0, 0, 5), OffsetSync("t", 0, 100, 104)]
    assert first_held(syncs, 50, 0) == 45
    assert first_held(syncs, 200, 0) == 196
    assert first_held(syncs, 0, 7) == 7 and first_held([], 50, 7) == 7  # nothing trimmed / no map


def test_a_partition_restarted_from_the_earliest_offset_commits_again_after_a_query_restart():
    """In one run: the first query committed 900 on x[0]; the source topic was then deleted
    and created again with more partitions (the query restarts on the count change). The
    group's 900 is past the new log's end, so the new query starts x[0] from the earliest
    offset, but the job still remembers 900 as committed and only commits positions beyond
    it: the group stays at 900 while 0..50 are mirrored (lag and failover translation
    wrong), and a restart once the new log passes 900 resumes there, past records this run
    read but never committed."""
    source = FakeSource({("x", 0): (20, None)})
    job = _job(source, FakeTarget({"a.x": "T1"}))
    _start(job, 1)
    job._commit({("x", 0): 900})  # the first query's last batch
    assert source.committed[("x", 0)][0] == 900
    assert _start(job, 2) == {"x": {"0": -2, "1": -2}}  # recreated: the log is 0..50 now
    job._commit({("x", 0): 30, ("x", 1): 10})
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
    job = _job(source, target)
    assert _start(job, 1) == {"x": {"0": 900}}
    source.ids["x"] = "S2"  # recreated, and already refilled past 900
    assert job._sources_recreated(job._mappings)
    assert _start(job, 1) == {"x": {"0": -2}}
    assert job._recorder.reset == [("x", 0)]
    assert source.committed[("x", 0)][0] == 0 and job._restarted
    assert target.deleted == {}
    assert not job._sources_recreated(job._mappings)
