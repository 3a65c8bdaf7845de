"""The one package that talks to confluent-kafka.

It builds consumers, producers and admin clients from a cluster's config (security
settings passed through untouched, secrets never logged), and turns `KafkaError`s and
librdkafka's `None`-on-timeout into this project's exceptions, so the rest of the code
never imports `confluent_kafka` and never checks for `None`.

In the order a client is made and used: `settings` (what keeps "nothing lost, order kept"
at the client) -> `clients` (consumers and producers from a cluster's config) -> `errors`
(Kafka's errors as this project's); then the requests: `offsets` (group offsets in chunks),
`admin` (topics, configs, offsets, groups, ACLs), `reader` (a few records at given offsets),
`progress` (exactly_once's progress on the target) and `canary_topic`.
"""

from __future__ import annotations

import confluent_kafka
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from mirror.kafka.admin import Admin, PendingOffsets, Watermarks
from mirror.kafka.clients import client_settings, make_consumer, make_producer
from mirror.kafka.errors import is_retriable, raise_for, raise_if_refused
from mirror.kafka.offsets import commit_offsets, committed_offsets
from mirror.kafka.reader import PartitionReader, Record

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "Admin",
    "Consumer",
    "KafkaError",
    "KafkaException",
    "Message",
    "PartitionReader",
    "PendingOffsets",
    "Producer",
    "Record",
    "TopicPartition",
    "Watermarks",
    "client_settings",
    "commit_offsets",
    "committed_offsets",
    "is_retriable",
    "make_consumer",
    "make_producer",
    "raise_for",
    "raise_if_refused",
]

OFFSET_BEGINNING = confluent_kafka.OFFSET_BEGINNING
OFFSET_END = confluent_kafka.OFFSET_END
OFFSET_INVALID = confluent_kafka.OFFSET_INVALID
