"""What a fatal producer error says, read from librdkafka's text (its code is librdkafka's own)."""

from __future__ import annotations

from mirror.kafka import KafkaError
from mirror.kafka.errors import denied_in_fatal, fatal_partition, is_size_refusal


def fatal(text: str, code: int = KafkaError._FATAL) -> KafkaError:
    return KafkaError(code, text, fatal=True)


def test_the_partition_a_fatal_error_names():
    err = fatal("Producer fatal error: Broker: Message size too large for nyc.orders [3] with 2 message(s)")
    assert fatal_partition(err) == ("nyc.orders", 3)
    assert is_size_refusal(err)
    assert fatal_partition(fatal("Producer fatal error: unknown")) is None


def test_the_grant_a_fatal_error_says_is_missing():
    assert denied_in_fatal(fatal("Topic authorization failed for nyc.orders [0]")) == ("Write", "topic", "nyc.orders")
    assert denied_in_fatal(fatal("x", KafkaError.TOPIC_AUTHORIZATION_FAILED)) == ("Write", "topic", "the target topics")
    # Since Kafka 3.0 Write on any topic lets a producer be idempotent: that is the grant to name.
    assert denied_in_fatal(fatal("Cluster authorization failed")) == ("Write", "topic", "the target topics")
    assert denied_in_fatal(fatal("Broker: Message size too large for t [0]")) is None
