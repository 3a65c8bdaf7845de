"""The mirror's client settings: what keeps "nothing lost, order kept" true at the client.

Flow `consumer:` / `producer:` overrides are merged over these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mirror.config import CONSUMER_TIMINGS, TRANSACTION_TIMEOUT_MS

# Source consumer: read only committed data (aborted transactions never reach the target),
# commit only what the worker says, cooperative rebalancing so a new worker or a new topic
# moves only the partitions that must move (a flow may choose roundrobin instead: above
# ~5,000 partitions librdkafka's cooperative-sticky assignor is too slow, see the worker).
CONSUMER_DEFAULTS: dict[str, Any] = {
    "isolation.level": "read_committed",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # A position out of range (records deleted before they were copied, a truncated or
    # re-created topic) comes to the worker as an error instead of a silent jump to the log
    # start: it finds out what was skipped, reports it and resumes itself (engine/gaps.py).
    "auto.offset.reset": "error",
    "partition.assignment.strategy": "cooperative-sticky",
    **CONSUMER_TIMINGS,  # session and heartbeat: judged with the flow's overrides in mirror.config
    "fetch.wait.max.ms": 100,
    # Bounded prefetch keeps a worker's memory flat whatever the partition count...
    "queued.max.messages.kbytes": 16384,
    # ...but once it is full librdkafka waits fetch.queue.backoff.ms (1 s by default) before
    # fetching again: with a fast target that idles the mirror half the time (the
    # throughput with 20 ms is in bench/README.md, "Figures behind the code").
    "fetch.queue.backoff.ms": 20,
}

# Target producer: idempotent with acks=all; infinite message timeout so a target outage
# never turns into a dropped or reordered record; gapless so a permanent failure of one
# batch cannot let later records of the same partition through.
PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "message.timeout.ms": 0,
    "enable.gapless.guarantee": True,
    "linger.ms": 10,
    "batch.size": 1048576,
    "compression.type": "lz4",
    "queue.buffering.max.kbytes": 16384,  # a larger queue buys no throughput, only memory
    "queue.buffering.max.messages": 200000,
    # Never create a target topic by producing to it (librdkafka's default does, on brokers
    # with auto.create.topics.enable, Kafka's default): a deleted target topic would come
    # back with the broker's default partition count and configs before the mirror saw it
    # gone. Target topics are created by the mirror's admin client only.
    "allow.auto.create.topics": False,
    # librdkafka refuses records above its own 1,000,000 before the broker sees them, while
    # a broker's default is 1,048,588 and topics may allow more: let the target decide.
    "message.max.bytes": 1_000_000_000,
    # A topic the mirror just created may not show in the target's metadata for minutes
    # (thousands of new partitions on one broker). librdkafka fails records for a topic
    # it has not seen after this long (30 s by default), which the worker must take for a
    # deleted target and answer with a resync of every partition; wait longer instead. Since
    # librdkafka 2.8.3 (#4970) a topic the producer *did* see and that was deleted also
    # stays "existing" for this long after the producer first saw it (a new producer after
    # every resync sees them all anew): its records wait, without errors at delivery. A
    # deleted target is told by the refresh's topic ids (each refresh_interval), not by them.
    "topic.metadata.propagation.max.ms": 300_000,
}

# Producer batches are checked whole against the target topic's max.message.bytes, and
# librdkafka never splits a refused batch: topics whose limit is below this batch size get
# a producer of their own with smaller batches (see `mirror.engine.worker`).
BATCH_SIZE = PRODUCER_DEFAULTS["batch.size"]
# Room left in a producer batch below a topic's max.message.bytes (framing the batch.size
# accounting may not count).
BATCH_MARGIN = 1024


def metadata_refresh_ms(refresh_interval: float) -> int:
    """The source consumer's `topic.metadata.refresh.interval.ms` for a flow refreshing every
    `refresh_interval` seconds. The subscription names topics, so only librdkafka's metadata
    refresh shows it a subscribed topic's new partitions (and the group leader a reason to
    rebalance): at its default, 5 minutes after the flow grew the target. Never slower than
    that default, never more than once a second."""
    return max(1_000, min(300_000, int(refresh_interval * 1000)))


def batch_size_for(configured: int, limit: int | None) -> int:
    """The producer batch.size for a target topic whose max.message.bytes is `limit`
    (None: unknown): the configured size, or one that fits below the limit. Used by both
    engines (`mirror.engine.worker`, `mirror.spark.task`)."""
    if limit is not None and limit < configured:
        return max(1024, limit - BATCH_MARGIN)
    return configured


def transactional_settings(transactional_id: str, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Producer settings for a transactional writer with `transactional_id` (over `base`, the
    flow's producer settings; the defaults if None).

    No gapless guarantee and no infinite message timeout: a transaction that fails anywhere is
    aborted whole and its records copied again from the committed progress, so a failed batch
    cannot leave a gap, and librdkafka requires message.timeout.ms within transaction.timeout.ms
    (it derives it from the transaction timeout when left unset).
    """
    settings = dict(PRODUCER_DEFAULTS if base is None else base)
    settings.pop("enable.gapless.guarantee", None)
    settings.pop("message.timeout.ms", None)
    settings.setdefault("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
    settings["transactional.id"] = transactional_id
    settings["enable.idempotence"] = True
    return settings
