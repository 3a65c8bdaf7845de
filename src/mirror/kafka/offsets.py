"""Reading and committing a consumer group's offsets in chunks.

librdkafka's cost for one OffsetFetch or OffsetCommit grows with the square of its
partitions (librdkafka 2.16; the figures at 10,000 partitions are in bench/README.md,
"Figures behind the code"), so thousands of partitions go in chunks. Each chunk
is a request of its own, which changes nothing the broker guarantees: it applies and
answers every partition of one request on its own anyway.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

OFFSETS_CHUNK = 1000

# Errors an OffsetCommit answers for a partition, not for the group or the request: the
# broker applied the request's other partitions, and a later chunk is answered on its own.
# Any other error (not a member of the generation, no coordinator, a timeout) would refuse
# every later chunk the same way, each after its own round trip.
PARTITION_ERRORS = frozenset({
    KafkaError.UNKNOWN_TOPIC_OR_PART,  # its topic was deleted
    KafkaError.TOPIC_AUTHORIZATION_FAILED,  # its Read grant was withdrawn
    KafkaError.OFFSET_METADATA_TOO_LARGE,
    KafkaError.INVALID_COMMIT_OFFSET_SIZE,
})


def chunks(items: Sequence[Any], size: int = OFFSETS_CHUNK) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def committed_offsets(consumer: Any, partitions: Sequence[TopicPartition], timeout: float) -> list[TopicPartition]:
    """`consumer.committed(partitions)`, a chunk at a time, all of it within `timeout`
    (raises librdkafka's KafkaException as one call would, a timeout included)."""
    deadline = time.monotonic() + timeout
    out: list[TopicPartition] = []
    for chunk in chunks(partitions):
        # A chunk started past the deadline still gets a moment: librdkafka then raises
        # its own timeout, as a single call would have.
        out.extend(consumer.committed(list(chunk), timeout=max(0.001, deadline - time.monotonic())))
    return out


def commit_offsets(consumer: Any, offsets: Sequence[TopicPartition]) -> None:
    """`consumer.commit(offsets=..., asynchronous=False)`, a chunk at a time, raising as one
    call would: librdkafka (2.x) fails a commit when any of its partitions is refused, and
    the broker applies the others all the same. So a partition refused (`PARTITION_ERRORS`)
    does not stop the chunks after it: they are committed, then its error is raised (the
    caller counts nothing of the call committed; committing again later is harmless). Any
    other failure stops at its chunk, the chunks before it committed."""
    refused: KafkaException | None = None
    for chunk in chunks(offsets):
        try:
            consumer.commit(offsets=list(chunk), asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() not in PARTITION_ERRORS:
                raise
            refused = refused or exc
    if refused is not None:
        raise refused
