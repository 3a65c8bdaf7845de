"""Exactly-once mirroring on real brokers: the progress group, fencing, and the copy through faults."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from mirror.config import ClusterConfig
from mirror.kafka.progress import (
    ProgressGroup,
    ProgressPending,
    TransactionFailed,
    fence,
    new_writer_id,
    progress_offsets,
    read_progress,
    transact,
)
from mirror.kafka.settings import transactional_settings
from tests.integration.test_mirror_datapath import flow_yaml, produce_numbered
from tests.support.kafkautil import create_topic, end_offsets, group_offsets, read_partition, topics, wait_for
from tests.support.mirrorproc import MirrorProcess


def _writer(bootstrap: str, writer_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, **transactional_settings(writer_id)})
    producer.init_transactions(30)
    return producer


def _write(producer: Producer, topic: str, values: list[bytes]) -> None:
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, v, partition=0)
    producer.flush(30)


@pytest.fixture
def target(clusters, unique):
    bootstrap = clusters.bootstrap("dst")
    topic = f"eos-progress-{unique}"
    create_topic(bootstrap, topic, 1)
    cluster = ClusterConfig(bootstrap=bootstrap, timeout=10)
    group = ProgressGroup("dst", cluster, f"mirror-eos.{unique}")
    yield bootstrap, cluster, topic, group
    group.close()


def test_progress_commits_with_a_memberless_group(target):
    """send_offsets_to_transaction to a group nobody joined, with a never-subscribed consumer's
    metadata: the offset and the writer id are committed with the records."""
    bootstrap, cluster, topic, group = target
    writer = new_writer_id("t")
    producer = _writer(bootstrap, writer)
    _write(producer, topic, [b"a", b"b", b"c"])
    producer.send_offsets_to_transaction(progress_offsets({(topic, 0): 103}, writer), group.metadata(), 30)
    producer.commit_transaction(30)
    got = read_progress("dst", cluster, group.group, [(topic, 0)], 10)
    assert got[(topic, 0)].next_offset == 103
    assert got[(topic, 0)].writer_id == writer
    assert [r.value for r in read_partition(bootstrap, topic, 0)] == [b"a", b"b", b"c"]


def test_pending_progress_is_not_read_as_done(target):
    bootstrap, cluster, topic, group = target
    writer = new_writer_id("t")
    producer = _writer(bootstrap, writer)
    _write(producer, topic, [b"a"])
    producer.send_offsets_to_transaction(progress_offsets({(topic, 0): 10}, writer), group.metadata(), 30)
    producer.commit_transaction(30)
    _write(producer, topic, [b"b"])
    producer.send_offsets_to_transaction(progress_offsets({(topic, 0): 20}, writer), group.metadata(), 30)
    with pytest.raises(ProgressPending):
        group.read([(topic, 0)], 3)
    # The last committed progress, pending or not: where a new owner learns whom to fence.
    assert group.read([(topic, 0)], 10, stable=False)[(topic, 0)].next_offset == 10
    producer.commit_transaction(30)
    assert group.read([(topic, 0)], 10)[(topic, 0)].next_offset == 20


def test_fence_aborts_the_zombie_and_fails_its_commit(target):
    bootstrap, cluster, topic, group = target
    writer = new_writer_id("t")
    zombie = _writer(bootstrap, writer)
    _write(zombie, topic, [b"kept"])
    zombie.send_offsets_to_transaction(progress_offsets({(topic, 0): 1}, writer), group.metadata(), 30)
    zombie.commit_transaction(30)
    _write(zombie, topic, [b"zombie-1", b"zombie-2"])
    zombie.send_offsets_to_transaction(progress_offsets({(topic, 0): 3}, writer), group.metadata(), 30)

    fence("dst", cluster, writer, 30)

    # The open transaction is aborted: the progress is stable again, at the last commit.
    assert (
        group.read([(topic, 0)], 10)[(topic, 0)]
        == read_progress("dst", cluster, group.group, [(topic, 0)], 10)[(topic, 0)]
    )
    assert group.read([(topic, 0)], 10)[(topic, 0)].next_offset == 1
    with pytest.raises(TransactionFailed) as failed:
        transact("commit", zombie.commit_transaction, 10)
    assert failed.value.fenced
    assert [r.value for r in read_partition(bootstrap, topic, 0)] == [b"kept"]


# ---------------------------------------------------------------------------- the copy through faults


def eos_flow(unique: str, topic: str, extra: str = "") -> str:
    return flow_yaml(unique, f'["{topic}"]', extra="    exactly_once: true\n" + extra)


def exactly(src: str, dst: str, topic: str, partitions: int) -> dict[str, int]:
    """Compare a topic with its copy, read_committed on both sides: every source record once,
    in order per partition. Returns the counts (lost and duplicated must be 0)."""
    lost = dup = copied = 0
    for p in range(partitions):
        want = [r.value for r in read_partition(src, topic, p)]
        got = [r.value for r in read_partition(dst, f"src.{topic}", p)]
        copied += len(got)
        lost += len(set(want) - set(got))
        dup += len(got) - len(set(got))
        if not lost and not dup:
            assert got == want, f"partition {p}: order differs"
    return {"copied": copied, "lost": lost, "duplicated": dup}


def caught_up(src: str, unique: str, topic: str, partitions: int) -> Callable[[], bool]:
    return lambda: group_offsets(src, f"mirror-{unique}", topic, partitions) == end_offsets(src, topic, partitions)


@pytest.mark.slow
def test_sigkill_three_times_during_a_copy(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, n, total = f"eos-kill-{unique}", 4, 200_000
    create_topic(src, t, n)
    produce_numbered(src, t, total, n, size=8)
    cfg = write_config(eos_flow(unique, t))
    kills = 0
    for kills in range(1, 4):
        with MirrorProcess(cfg) as m:
            mark = kills * total // 4
            wait_for(
                lambda: f"src.{t}" in topics(dst) and sum(end_offsets(dst, f"src.{t}", n).values()) > mark,
                120,
                f"{mark} records copied",
                detail=m.output,
            )
            m.kill()
    with MirrorProcess(cfg) as m:
        wait_for(caught_up(src, unique, t, n), 120, "the copy to finish", detail=m.output)
        m.stop()
        assert "fenced" in m.output(), m.output()[-3000:]
    counts = exactly(src, dst, t, n)
    print(f"after {kills} SIGKILLs: {counts}")
    assert counts == {"copied": total, "lost": 0, "duplicated": 0}
