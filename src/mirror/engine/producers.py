"""`ProducerPool`: the flow's producers to its target, one per batch size."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from mirror.config import ClusterConfig, FlowConfig
from mirror.engine.partition import AssignedPartition
from mirror.kafka import KafkaError, KafkaException
from mirror.kafka.settings import BATCH_SIZE, batch_size_for

log = logging.getLogger(__name__)

# A record this far below its target topic's limit fits whatever its headers (the check
# beyond it is `Forwarder._never_fits`).
SIZE_CHECK_SLACK = 16384

# Makes a consumer or producer: (cluster name, cluster config, client settings) -> client.
ClientFactory = Callable[[str, ClusterConfig, Mapping[str, Any]], Any]


class ProducerPool:
    """The producers of one flow, keyed by batch size, and the target topics' size limits.

    The broker checks a whole batch against the topic's max.message.bytes and librdkafka
    never splits a refused batch, so a topic whose limit is below the batch size needs
    smaller batches. A producer of its own (one per distinct size) keeps the large batches,
    and their throughput, for every other topic.

    Invariants: there is always a default producer (the configured batch size) once opened;
    `dead` is about the producers in the pool now (a fatal error of one: nothing in flight
    will ever be acknowledged) and only `renew` clears it, by replacing them all, since an
    idempotent producer cannot go on past a gap; `purging` is true only inside a purge, when
    a producer's fatal error and its reports are the purge's, not a record's.
    """

    def __init__(
        self, flow: FlowConfig, target: ClusterConfig, settings: Mapping[str, Any], make_producer: ClientFactory
    ) -> None:
        self.flow = flow
        self._target = target
        self.settings = dict(settings)
        self._make = make_producer
        self._producers: dict[int, Any] = {}
        self.limits: dict[str, int] = {}  # target topic -> its max.message.bytes
        self.dead = False
        self.purging = False
        self._default_size = int(self.settings.get("batch.size", BATCH_SIZE))
        self.for_topic(None)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._producers.values()))

    def for_topic(self, target_topic: str | None) -> Any:
        """The producer whose batches fit a target topic's limit (the default one for None).

        A partition keeps its producer while assigned: reports of one partition must come
        from one producer, in order.
        """
        limit = self.limits.get(target_topic) if target_topic is not None else None
        size = batch_size_for(self._default_size, limit)
        producer = self._producers.get(size)
        if producer is None:
            producer = self._producers[size] = self._make(
                self.flow.target, self._target, {**self.settings, "batch.size": size}
            )
            if size != self._default_size:
                log.info(
                    "flow %s: target %s takes batches of at most %s bytes (max.message.bytes): a "
                    "producer with batch.size %d for it",
                    self.flow.name,
                    target_topic,
                    limit,
                    size,
                )
        return producer

    def set_limits(self, limits: dict[str, int]) -> None:
        """The target topics' max.message.bytes as last read (for producers made from now on)."""
        self.limits = limits

    def fit(self, part: AssignedPartition) -> AssignedPartition:
        """Give a partition the producer and the size check of its target topic."""
        part.producer = self.for_topic(part.route.target_topic)
        limit = self.limits.get(part.route.target_topic)
        part.limit = limit
        part.room = limit - SIZE_CHECK_SLACK if limit is not None else 1 << 62
        return part

    def poll(self, timeout: float, on_fatal: Callable[[KafkaError], None]) -> None:
        """Serve delivery reports of every producer (waiting at most `timeout` on the first)."""
        for producer in list(self._producers.values()):
            try:
                producer.poll(timeout)
            except KafkaException as exc:
                on_fatal(exc.args[0])
            timeout = 0

    def purge(self, serve: Callable[[float], None]) -> None:
        """Purge every producer and serve the purge's reports: they are the purge's own.

        Purging requests in flight breaks an idempotent producer's gapless guarantee on
        purpose: the fatal error that follows is the purge's, not a record's.
        """
        self.purging = True
        try:
            for producer in self._producers.values():
                producer.purge(in_queue=True, in_flight=True)
            serve(0)
        finally:
            self.purging = False

    def died(self) -> None:
        """A producer failed for good: nothing in flight will be acknowledged any more."""
        self.dead = True

    def renew(self) -> None:
        """Drop every producer (purged or failed) and start a new default one.

        The idempotent producer numbers records per partition; a recreated partition expects
        sequence 0 again, so only a new producer (new producer id) can write to it.
        """
        self._producers.clear()
        self.dead = False
        self.for_topic(None)

    def discard(self) -> None:
        """Purge every producer unheard (their reports are never served) and renew them all."""
        for producer in self._producers.values():
            producer.purge(in_queue=True, in_flight=True)
        self.renew()

    def flush(self) -> None:
        """Hand what is queued to librdkafka's threads without waiting (closing)."""
        if not self.dead:
            for producer in self._producers.values():
                producer.flush(0)
