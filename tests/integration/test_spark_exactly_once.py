"""`exactly_once: true` on the Spark engine (issue 24): one target transaction per task attempt,
fenced by a transactional.id per source partition, on real Kafka (and real Spark).

Every count is an independent read_committed consumer's (`tests.support.kafkautil`): each
committed source record once on the target, in order, nothing aborted.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mirror.config import load
from mirror.errors import MirrorError
from mirror.kafka.progress import read_progress
from mirror.spark.exactly_once import mirror_exactly_once, writer_id
from mirror.spark.task import TaskPlan
from tests.integration.test_spark import (
    SparkRun,
    assert_exact,
    assert_translation_exact,
    flow_yaml,
    load_data,
)
from tests.support.kafkautil import (
    create_topic,
    delete_topic,
    end_offsets,
    producer,
    read_partition,
    read_topic,
    topics,
    wait_for,
    wait_settled,
)
from tests.support.mirrorproc import children

pytestmark = pytest.mark.slow


def eos_yaml(unique: str, include: str, db: Path) -> str:
    return flow_yaml(unique, include, db).replace(
        "    provenance_headers:", "    exactly_once: true\n    provenance_headers:"
    )


def progress_of(config: Any, flow: str, topic: str, parts: int) -> dict[int, int]:
    f = config.flow(flow)
    got = read_progress(f.target, config.clusters[f.target], f.progress_group, [(topic, p) for p in range(parts)], 10)
    return {p: got[(topic, p)].next_offset for p in range(parts) if (topic, p) in got}


def test_a_second_attempt_fences_the_first_and_the_target_holds_each_record_once(clusters, write_config, unique):
    """Two attempts of one task (a retried or speculative one beside the first): the second
    starts while the first's transaction is open, fences it, writes and commits the slice; the
    first's commit then fails. A third attempt finds the slice committed and writes nothing."""
    dst = clusters.bootstrap("dst")
    topic = f"eos-{unique}"
    create_topic(dst, f"src.{topic}", 1)
    config = load(write_config(eos_yaml(unique, topic, Path("offsets.db"))))
    flow = config.flow(f"f-{unique}")
    plan = TaskPlan(flow, config.clusters["dst"])
    rows = [(topic, 0, o, 1_600_000_000_000 + o, b"k%d" % o, b"v%d" % o, None) for o in range(300)]
    chunks = [rows[i : i + 100] for i in range(0, 300, 100)]
    second = []

    def first_attempt() -> Iterator[list[Any]]:
        yield chunks[0]
        # The second attempt runs whole while the first holds an open transaction.
        second.extend(mirror_exactly_once(plan, chunks))
        yield chunks[1]
        yield chunks[2]

    # Fenced: its next produce, flush or commit fails (which one depends on when the fence's
    # error reaches its producer); the attempt fails whole.
    with pytest.raises(MirrorError):
        list(mirror_exactly_once(plan, first_attempt()))
    (result,) = second
    assert (result.produced, result.skipped, result.next_offset, result.placed) == (300, 0, 300, True)
    wait_settled(dst, f"src.{topic}", 1)  # the commit's marker written (the first's abort's too)
    copies = read_partition(dst, f"src.{topic}", 0)
    assert [int(c.provenance()["offset"]) for c in copies] == list(range(300))
    assert [c.value for c in copies] == [r[5] for r in rows]
    # Records and progress in one transaction; the writer's id in the progress (whom a new owner fences).
    f = config.flow(f"f-{unique}")
    got = read_progress(f.target, config.clusters["dst"], f.progress_group, [(f"src.{topic}", 0)], 10)
    assert got[(f"src.{topic}", 0)].next_offset == 300
    assert got[(f"src.{topic}", 0)].writer_id == writer_id(f.name, topic, 0)
    # The offset map gets the copies' places: one row, the first record's.
    assert result.syncs == [(0, copies[0].offset)]

    (again,) = mirror_exactly_once(plan, chunks)
    assert (again.produced, again.skipped, again.next_offset, again.placed) == (0, 300, 300, False)
    assert len(read_partition(dst, f"src.{topic}", 0)) == 300


def test_local_mode_mirrors_a_transactional_source_exactly_and_resumes_from_the_target(
    clusters, write_config, unique, tmp_path, spark_local, capsys
):
    """A source with transactions and aborts, mirrored in batches of 1,000 with exactly_once:
    each committed record once, the progress at each partition's last record + 1, the offset
    map translating exactly across the target's commit markers; a rewound source group then
    changes nothing (the target's progress says where the copy resumes)."""
    from mirror.kafka import Admin
    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topics = load_data(src, unique, records=2000)
    config_path = write_config(eos_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db"))
    config = load(config_path)
    flow = f"f-{unique}"
    job = run_flow(config, config.flow(flow), until_caught_up=True, spark=spark_local, max_records_per_batch=1000)
    source = {t: read_topic(src, t, n) for t, n in topics.items()}
    assert job.records == sum(len(v) for s in source.values() for v in s.values()) and job.skipped == 0
    assert_exact(src, dst, unique, topics)
    for t, n in topics.items():
        assert progress_of(config, flow, f"src.{t}", n) == {p: source[t][p][-1].offset + 1 for p in range(n)}
        assert_translation_exact(src, dst, config_path, unique, t, n, capsys)

    plain = f"sp-{unique}-plain"
    Admin("src", config.clusters["src"]).alter_group_offsets(f"mirror-{unique}", dict.fromkeys([(plain, 0)], 0))
    again = run_flow(config, config.flow(flow), until_caught_up=True, spark=spark_local)
    assert (again.records, again.skipped) == (0, 0)
    copies = read_topic(dst, f"src.{plain}", 3)
    assert [[r.content() for r in copies[p]] for p in range(3)] == [
        [r.content() for r in source[plain][p]] for p in range(3)
    ]


def test_a_source_topic_recreated_while_the_flow_is_stopped_is_mirrored_from_its_beginning(
    clusters, write_config, unique, tmp_path, spark_local
):
    """The flow mirrored a topic (progress 300 per partition on the target) and stopped; the
    topic was deleted, created again and refilled past the old progress. The next run mirrors
    the new incarnation whole, its records below the old progress too: the progress names the
    source topic's id, and the old id's progress counts as none."""
    from mirror.kafka import Admin
    from mirror.spark.job import run_flow

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, target = f"sp-{unique}-re", f"src.sp-{unique}-re"
    config = load(write_config(eos_yaml(unique, topic, tmp_path / "offsets.db")))
    flow = f"f-{unique}"

    def fill(incarnation: str, records: int) -> None:
        p = producer(src)
        for i in range(records):
            p.produce(topic, value=b"%s-%d" % (incarnation.encode(), i), key=b"%d" % i, partition=i % 2)
        assert p.flush(60) == 0

    create_topic(src, topic, 2)
    fill("old", 600)
    run_flow(config, config.flow(flow), until_caught_up=True, spark=spark_local)
    assert progress_of(config, flow, target, 2) == {0: 300, 1: 300}

    delete_topic(src, topic)
    wait_for(lambda: topic not in topics(src), 30, "the source topic deleted")
    # Its deletion may still be under way on the broker: created once it is done.
    wait_for(lambda: create_topic(src, topic, 2) is None, 30, "the source topic created again")
    fill("new", 1000)
    job = run_flow(config, config.flow(flow), until_caught_up=True, spark=spark_local)
    assert job.records == 1000
    copies = read_topic(dst, target, 2)
    for p in range(2):
        expected = [b"old-%d" % i for i in range(p, 600, 2)] + [b"new-%d" % i for i in range(p, 1000, 2)]
        assert [c.value for c in copies[p]] == expected
    assert progress_of(config, flow, target, 2) == {0: 500, 1: 500}
    (new_id,) = Admin("src", config.clusters["src"]).topic_ids([topic]).values()
    f = config.flow(flow)
    got = read_progress(f.target, config.clusters["dst"], f.progress_group, [(target, 0), (target, 1)], 10)
    assert {g.source_id for g in got.values()} == {new_id}


class Feeder:
    """Produces records to a source topic's partitions in a thread, a hundred every `every`
    seconds, until the `with` block ends (bounded: at most `limit` records)."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int = 3, limit: int = 200_000, every: float = 0.2
    ) -> None:
        self.bootstrap, self.topic, self.partitions, self.limit = bootstrap, topic, partitions, limit
        self.every = every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._feed, daemon=True)

    def _feed(self) -> None:
        p = producer(self.bootstrap)
        n = 0
        while n < self.limit and not self.stop.wait(self.every):
            for _ in range(100):
                p.produce(self.topic, value=b"fed-%d" % n, key=b"%d" % n, partition=n % self.partitions)
                n += 1
            p.poll(0)
        assert p.flush(60) == 0

    def __enter__(self) -> Feeder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(90)


def executors(home: Path, master: str) -> list[int]:
    """The executor JVMs of the session's standalone workers (the workers' children)."""
    from mirror.devenv.spark import SparkDev

    dev = SparkDev(home, int(master.rsplit(":", 1)[1]) + 30, 4)
    return [
        c
        for role in ("worker", "worker-1")
        if (pid := dev.pid(role)) is not None
        for c in children(pid)
        if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{c}/cmdline").read_bytes()
    ]


@pytest.mark.timeout(900)  # two driver starts on the shared machine
def test_an_executor_killed_mid_batch_then_the_driver_killed_and_restarted_lose_and_duplicate_nothing(
    clusters, write_config, unique, tmp_path, spark_cluster
):
    """On the standalone cluster, with exactly_once: the executor SIGKILLed while a task's
    transaction is open (Spark retries its tasks, whose fence aborts it), then the driver
    SIGKILLed while a transaction is open, and started again until caught up: an independent
    read_committed read finds every committed source record once, in order."""
    home, master = spark_cluster
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topics = load_data(src, unique, records=4000)
    config = write_config(eos_yaml(unique, f"sp-{unique}-.*", tmp_path / "offsets.db"))
    flow, plain = f"f-{unique}", f"sp-{unique}-plain"
    target = f"src.{plain}"
    total_plain = sum(end_offsets(src, plain, 3).values())

    def open_transaction() -> bool:
        """Records on the target past its last stable offset: a transaction is open."""
        try:
            return sum(end_offsets(dst, target, 3, committed=False).values()) > sum(
                end_offsets(dst, target, 3).values()
            )
        except Exception:  # the target topic does not exist yet
            return False

    def committed() -> int:
        return len([r for recs in read_topic(dst, target, 3).values() for r in recs])

    run = SparkRun(config, flow, "--master", master, "--max-records-per-batch", "600")
    kills = []
    # Source records arriving all along keep the run opening transactions: a run that copied
    # the whole backlog between two polls would otherwise never show one open again.
    try:
        with Feeder(src, plain, every=0.5):
            wait_for(open_transaction, 240, "a task's transaction open on the target", interval=0.05, detail=run.output)
            (pid, *_) = executors(home, master)
            os.kill(pid, signal.SIGKILL)
            kills.append(("executor", committed()))
            wait_for(
                lambda: committed() > kills[0][1],
                240,
                "a batch committed after the executor was lost",
                detail=run.output,
            )
            wait_for(open_transaction, 240, "a transaction open again", interval=0.05, detail=run.output)
            run.kill()
        kills.append(("driver", committed()))
    finally:
        run.close()
    total_plain = sum(end_offsets(src, plain, 3).values())
    assert kills[-1][1] < total_plain, "the run finished before the driver could be killed mid-batch"
    again = SparkRun(config, flow, "--master", master, "--until-caught-up")
    try:
        assert again.wait() == 0, again.output()
    finally:
        again.close()
    landed = sum(end_offsets(dst, target, 3, committed=False).values())
    print(
        f"killed (what, plain records committed on the target): {kills}; the target's log holds {landed} offsets "
        f"for {total_plain} plain records (aborted copies and commit markers)"
    )
    assert_exact(src, dst, unique, topics)  # read_committed: each record once, in order, nothing aborted


def test_a_partition_added_while_the_query_runs_is_copied_exactly_once(
    clusters, write_config, unique, tmp_path, spark_local
):
    """A source topic grown from 2 to 3 partitions while the query copies it with
    exactly_once: the new partition (no progress yet) is copied from its first record, the old
    ones go on from their progress; read_committed, each record once, in order, and the
    progress at every partition's end."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    from mirror.spark.job import run_flow
    from tests.support.kafkautil import group_offsets

    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, flow, group = f"sp-{unique}-grow", f"f-{unique}", f"mirror-{unique}"
    create_topic(src, topic, 2)

    def produce(parts: int, start: int) -> None:
        p = producer(src)  # a new client each time: an old one's metadata has the old count
        for i in range(start, start + 300):
            p.produce(topic, value=b"v%d" % i, key=b"%d" % i, partition=i % parts)
        assert p.flush(30) == 0

    produce(2, 0)
    config = load(write_config(eos_yaml(unique, topic, tmp_path / "offsets.db")))
    stop, failed = threading.Event(), []

    def run() -> None:
        try:
            run_flow(config, config.flow(flow), checkpoint=tmp_path / "cp", stop=stop, spark=spark_local)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failed.append(exc)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    try:
        done = lambda n: lambda: bool(failed) or group_offsets(src, group, topic, n) == end_offsets(src, topic, n)  # noqa: E731
        wait_for(done(2), 180, "the first partitions copied")
        admin = AdminClient({"bootstrap.servers": src})  # held: a collected client fails its futures
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
        produce(3, 300)
        wait_for(done(3), 180, "the new partition copied")
        assert not failed, f"the run failed when the source topic grew: {failed}"
    finally:
        stop.set()
        th.join(120)
    assert not th.is_alive() and not failed, failed
    for part in range(3):
        want = [r.content() for r in read_partition(src, topic, part)]
        assert [r.content() for r in read_partition(dst, f"src.{topic}", part)] == want, f"partition {part}"
    assert progress_of(config, flow, f"src.{topic}", 3) == end_offsets(src, topic, 3)
