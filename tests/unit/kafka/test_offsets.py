"""Group offsets committed in chunks (mirror.kafka.offsets).

librdkafka 2.x fails a whole OffsetCommit when any one of its partitions is refused (the
last partition error becomes the request's: rdkafka_request.c, rd_kafka_handle_OffsetCommit),
while the broker applies every other partition of the request. Chunks that stopped at the
first failure would leave every chunk after a refused partition (its source topic deleted,
its Read grant withdrawn) uncommitted.
"""

from __future__ import annotations

import pytest

from mirror.kafka import KafkaError, KafkaException, TopicPartition, commit_offsets
from mirror.kafka.offsets import OFFSETS_CHUNK


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
