"""Exactly-once mirroring on real brokers: the progress group, fencing, and the copy through faults."""

from __future__ import annotations

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
from tests.support.kafkautil import create_topic, read_partition


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
