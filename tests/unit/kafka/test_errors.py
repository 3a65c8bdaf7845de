"""Security failures as one line: what failed, on which cluster, as whom; never the secret."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirror.config import ClusterConfig
from mirror.errors import AuthenticationFailed, AuthorizationFailed, ClusterUnavailable
from mirror.kafka.clients import client_settings, principal
from mirror.kafka.errors import note_security_error, raise_for

BROKER = "sasl_ssl://127.0.0.1:9093/bootstrap: "


@pytest.mark.parametrize(("code", "text", "expected"), [
    (KafkaError._AUTHENTICATION, "SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 320ms in state AUTH_REQ)", "SASL credentials refused"),
    (KafkaError._AUTHENTICATION, "SASL PLAIN mechanism handshake failed: Broker: Unsupported SASL mechanism: broker's supported mechanisms: SCRAM-SHA-512", "SASL mechanism refused"),
    (KafkaError._SSL, "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified", "certificate is not trusted"),
    (KafkaError._SSL, "SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: Hostname mismatch", "does not match its hostname"),
])
def test_refused_login_after_a_timeout_says_what_failed(code, text, expected):
    settings = client_settings("nyc-t1", ClusterConfig(bootstrap="127.0.0.1:9093", client={"sasl.username": "mirror", "sasl.password": "s3cret-pw"}))
    settings["error_cb"](KafkaError(code, BROKER + text))
    with pytest.raises(AuthenticationFailed) as info:
        raise_for("nyc-t1", "list topics", KafkaException(KafkaError(KafkaError._TRANSPORT, "transport failure")))
    message = str(info.value)
    assert message.startswith("cluster 'nyc-t1': User:mirror cannot log in: ") and expected in message
    assert "s3cret-pw" not in message and "\n" not in message and "after 320ms" not in message
    assert isinstance(info.value, ClusterUnavailable)  # exit 1, like any unreachable cluster


def test_a_timeout_without_a_refusal_is_still_unreachable():
    note_security_error("sf-t2", KafkaError(KafkaError._ALL_BROKERS_DOWN, "down"))  # not a security error
    with pytest.raises(ClusterUnavailable) as info:
        raise_for("sf-t2", "list topics", KafkaException(KafkaError(KafkaError._TRANSPORT, "x")), 5)
    assert not isinstance(info.value, AuthenticationFailed)


def test_missing_grant_names_principal_operation_and_resource():
    client_settings("sf-t3", ClusterConfig(bootstrap="127.0.0.1:9093", client={"sasl.username": "mirror"}))
    with pytest.raises(AuthorizationFailed) as info:
        raise_for("sf-t3", "create topic 'nyc.orders'", KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")),
                  acl=("Create", "topic", "nyc.orders"))
    assert str(info.value).startswith("cluster 'sf-t3': User:mirror is not allowed to create topic 'nyc.orders': missing Create on topic 'nyc.orders'")
    assert info.value.exit_code == 1


def test_principal_of_settings():
    assert principal({"sasl.username": "bob"}) == "User:bob"
    assert principal({}) == "User:ANONYMOUS"


def test_a_partition_without_a_leader_is_not_called_an_unreachable_cluster():
    """Seen at 10,000 partitions: 'cluster dst did not answer within 60s while trying to
    list offsets' for a topic the broker was still creating. It had answered, at once."""
    with pytest.raises(ClusterUnavailable) as info:
        raise_for("dst", "list offsets of t[0]", KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE, "Broker: Leader not available")), 60)
    assert str(info.value).startswith("cluster 'dst' could not list offsets of t[0] yet: Broker: Leader not available (retried"), str(info.value)
    with pytest.raises(ClusterUnavailable) as info:
        raise_for("dst", "list offsets of t[0]", KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out")), 60)
    assert str(info.value).startswith("cluster 'dst' did not answer within 60s while trying to list offsets of t[0] (check"), str(info.value)
