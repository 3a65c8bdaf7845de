"""Committer: a source offset is committed only once the target holds every record before it."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from mirror import config
from mirror.engine.worker import FlowWorker
from mirror.kafka import TopicPartition
from mirror.kafka.offsets import OFFSETS_CHUNK
from tests.unit.engine.fakes import P0, P1, Clock, FakeAdmin, FakeConsumer, FakeProducer, Step, Target, batch, run
from tests.unit.kafka.test_offsets import Broker


def test_never_commits_past_an_unacknowledged_record():
    """P0's records from 5 on never get an answer: while they are in flight and after the
    stop gives up on them (drain timeout, purge), P0 is committed up to 5 only."""
    target = Target()
    target.answer = lambda tp, o: "hold" if tp == P0 and o >= 5 else "store"
    worker, consumer, _ = run(
        [batch(P0, range(5)), batch(P0, range(5, 10)) + batch(P1, range(5)), [], [], []], target=target
    )
    assert {c.get(P0) for c in consumer.commits} <= {5, None}
    assert (consumer.last_commit(P0), consumer.last_commit(P1)) == (5, 5)
    assert consumer.position_of[P0] == 10 and worker.state.value == "stopped"


def test_never_commits_past_a_dropped_record():
    """A full producer queue: the records read but not produced are dropped at the stop, and
    so is the open segment cut short among them. The consumer's position is past both; the
    commit stays at the last acknowledged record."""
    target = Target()
    target.answer = lambda tp, o: "hold" if o >= 5 else "store"
    worker, consumer, _ = run([batch(P0, range(3)), batch(P0, range(3, 15)), [], []], target=target, capacity=5)
    assert target.stored[P0] == [0, 1, 2, 3, 4] and consumer.position_of[P0] == 15
    assert consumer.last_commit(P0) == 3  # 3 and 4 landed, but their segment's closing report never came
    assert consumer.paused  # reading paused while the target did not keep up


def test_quiet_partitions_commit_past_transaction_markers_busy_ones_do_not():
    target = Target()
    target.answer = lambda tp, o: "hold" if tp == P1 and o >= 3 else "store"
    script: list[Step] = [
        batch(P0, range(5)) + batch(P1, range(3)),
        lambda c: c.markers(P0, 7),  # a commit marker at 5 and 6
        batch(P1, range(3, 5)),  # held by the target: P1 is busy
        lambda c: c.markers(P1, 7),
        [],
    ]
    worker, consumer, _ = run(script, target=target)
    assert 7 in {c.get(P0) for c in consumer.commits}
    assert {c.get(P1) for c in consumer.commits} <= {3, None}


def test_a_tainted_partition_commits_only_what_was_acknowledged():
    """A purged segment taints its partition: even with nothing in flight any more, its
    commit stays at the last acknowledged record, not at the consumer's position."""
    target = Target()
    target.answer = lambda tp, o: "purge" if tp == P0 and 3 <= o < 6 else "store"
    worker, consumer, _ = run(
        [batch(P0, range(3)), batch(P0, range(3, 6)), lambda c: c.markers(P0, 9), [], []], target=target
    )
    assert consumer.last_commit(P0) == 3 and worker.state.value == "stopped"


TWO_TOPICS = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: ["gone", "orders"]}, commit_interval: 1s}
"""


def test_a_stop_commits_every_partition_the_target_holds_though_one_topic_is_refused():
    """The source topic `gone` was deleted while assigned: its partition's commit is refused.
    The stop's last commit must still commit what the target holds of the 1,000 others."""
    n = OFFSETS_CHUNK + 1
    parts = [("gone", 0)] + [("orders", p) for p in range(n - 1)]
    cfg = config.parse(TWO_TOPICS, env={})
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
    admins: Mapping[str, Mapping[str, int]] = {
        "nyc": {"gone": 1, "orders": n - 1},
        "sf": {"nyc.gone": 1, "nyc.orders": n - 1},
    }

    def producer(name: str, cluster: Any, settings: Mapping[str, Any]) -> FakeProducer:
        p = FakeProducer(target, 100_000)
        target.producers.append(p)
        return p

    worker = FlowWorker(
        cfg,
        cfg.flows[0],
        stop=stop,
        clock=Clock(),
        consumer_factory=lambda name, cluster, settings: consumer,
        producer_factory=producer,
        admin_factory=lambda name, cluster: FakeAdmin(admins[name]),
    )
    worker.run()
    assert consumer.closed and not consumer.unsafe, consumer.unsafe
    assert all(target.stored.get(tp) == [0] for tp in parts)
    uncommitted = [tp for tp in parts[1:] if broker.committed.get(tp) != 1]
    assert not uncommitted, f"{len(uncommitted)} partitions the target holds left uncommitted, first {uncommitted[0]}"
