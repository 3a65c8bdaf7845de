"""Review 20: group offsets committed in chunks (mirror.kafka.offsets).

librdkafka 2.x fails a whole OffsetCommit when any one of its partitions is refused (the
last partition error becomes the request's: rdkafka_request.c, rd_kafka_handle_OffsetCommit),
while the broker applies every other partition of the request. One request for all
partitions: a refused partition (its source topic deleted, its Read grant withdrawn) raised,
and every other partition was committed. Chunks of 1,000 that stop at the first failure
left every chunk after the refused one uncommitted: on a revoke or a stop, records the target
holds are mirrored again by whoever resumes them; while it lasts, nothing past that chunk is
committed at all (and the flow is never caught up).

The consumer here plays the broker and librdkafka as described; the worker runs on the
in-memory fakes of tests/unit/test_worker_commits.py.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import pytest

from mirror import config
from mirror.domain.route import route
from mirror.engine.assignment import Partition
from mirror.engine.worker import FlowWorker
from mirror.kafka import KafkaError, KafkaException, TopicPartition, commit_offsets
from mirror.kafka.offsets import OFFSETS_CHUNK
from tests.unit.test_worker_commits import Clock, FakeAdmin, FakeConsumer, FakeProducer, Target, batch


class Broker:
    """A group coordinator behind librdkafka 2.x's synchronous commit: each request applies
    every partition it may on its own and raises the last refusal, if any."""

    def __init__(self, refused: set[str] = frozenset(), group_error: int | None = None) -> None:  # type: ignore[assignment]
        self.refused, self.group_error = set(refused), group_error
        self.committed: dict[tuple[str, int], int] = {}
        self.requests = 0

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert not asynchronous
        self.requests += 1
        if self.group_error is not None:  # not a member of this generation: nothing applied
            raise KafkaException(KafkaError(self.group_error))
        error = None
        for tp in offsets:
            if tp.topic in self.refused:
                error = KafkaError.UNKNOWN_TOPIC_OR_PART
            else:
                self.committed[(tp.topic, tp.partition)] = tp.offset
        if error is not None:
            raise KafkaException(KafkaError(error))


def test_a_refused_partition_does_not_hold_back_the_chunks_after_it():
    gone = [TopicPartition("gone", p, 5) for p in range(OFFSETS_CHUNK)]  # a whole chunk of a deleted topic
    kept = [TopicPartition("orders", p, 7) for p in range(OFFSETS_CHUNK + 500)]
    broker = Broker(refused={"gone"})
    with pytest.raises(KafkaException):  # as one request: the caller must not count any of it committed
        commit_offsets(broker, gone + kept)
    assert broker.committed == {("orders", p): 7 for p in range(OFFSETS_CHUNK + 500)}


def test_a_refusal_of_the_group_stops_at_the_first_chunk():
    """Not a member of the generation: every chunk would be refused the same way, each after
    its own round trip; the first says it for all."""
    broker = Broker(group_error=KafkaError.ILLEGAL_GENERATION)
    with pytest.raises(KafkaException):
        commit_offsets(broker, [TopicPartition("orders", p, 1) for p in range(3 * OFFSETS_CHUNK)])
    assert broker.requests == 1 and broker.committed == {}


TEXT = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: ["gone", "orders"]}, commit_interval: 1s}
"""


def test_a_stop_commits_every_partition_the_target_holds_though_one_topic_is_refused():
    """The source topic `gone` was deleted while assigned: its partition's commit is refused.
    The stop's last commit must still commit what the target holds of the 1,000 others."""
    n = OFFSETS_CHUNK + 1
    parts = [("gone", 0)] + [("orders", p) for p in range(n - 1)]
    cfg = config.parse(TEXT, env={})
    stop = threading.Event()
    target = Target()
    consumer = FakeConsumer(parts, [[m for tp in parts for m in batch(tp, [0])], []], stop, target)
    broker = Broker(refused={"gone"})
    commit = consumer.commit

    def commit_as_the_broker(*, offsets: list[TopicPartition], asynchronous: bool) -> None:
        try:
            broker.commit(offsets=offsets, asynchronous=asynchronous)
        finally:  # what the broker applied, checked against the target
            commit(offsets=[tp for tp in offsets if tp.topic not in broker.refused], asynchronous=asynchronous)

    consumer.commit = commit_as_the_broker  # type: ignore[method-assign]
    admins: Mapping[str, Mapping[str, int]] = {"nyc": {"gone": 1, "orders": n - 1}, "sf": {"nyc.gone": 1, "nyc.orders": n - 1}}

    def producer(name: str, cluster: Any, settings: Mapping[str, Any]) -> FakeProducer:
        p = FakeProducer(target, 100_000)
        target.producers.append(p)
        return p

    worker = FlowWorker(
        cfg, cfg.flows[0], stop=stop, clock=Clock(),
        consumer_factory=lambda name, cluster, settings: consumer,
        producer_factory=producer,
        admin_factory=lambda name, cluster: FakeAdmin(admins[name]),
    )
    worker.run()
    assert consumer.closed and not consumer.unsafe, consumer.unsafe
    assert all(target.stored.get(tp) == [0] for tp in parts)
    uncommitted = [tp for tp in parts[1:] if broker.committed.get(tp) != 1]
    assert not uncommitted, f"{len(uncommitted)} partitions the target holds left uncommitted, first {uncommitted[0]}"


class Group:
    """The group as a fenced worker's asking commit meets it: the chunks numbered in
    `refuse` are refused (UNKNOWN_MEMBER_ID: not a member of the current generation), the
    others accepted."""

    def __init__(self, refuse: set[int]) -> None:
        self.refuse, self.chunk = refuse, 0
        self.committed: dict[tuple[str, int], int] = {}

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.chunk += 1
        if self.chunk in self.refuse:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))
        self.committed.update({(tp.topic, tp.partition): tp.offset for tp in offsets})


@pytest.mark.parametrize("refuse", [{1}, {2}])
def test_a_fenced_worker_resumes_only_once_every_chunk_of_its_asking_commit_is_accepted(refuse: set[int]):
    """`_confirm_owner`: the commit that asks the group whether the partitions are still
    this worker's, in two chunks. Either refused: still fenced (reading stays paused), and
    it asks again; resumed only once all of it is accepted."""
    cfg = config.parse(TEXT, env={})
    worker = FlowWorker(cfg, cfg.flows[0], stop=threading.Event())
    keys = [("orders", p) for p in range(OFFSETS_CHUNK + 1)]
    for k in keys:
        worker._ledger.assign(k, Partition(route(cfg.flows[0], *k)))
    worker._fenced = dict.fromkeys(keys, 3)
    group = Group(refuse)
    worker._consumer = group
    worker._confirm_owner()
    assert worker._fenced is not None, "resumed though the group refused part of the asking commit"
    group.refuse = set()
    worker._paused = False
    worker._confirm_owner()
    assert worker._fenced is None and group.committed == dict.fromkeys(keys, 3)
