"""Consumers and producers built from a cluster's config; librdkafka's logging tamed.

Security settings pass through untouched; the settings are logged only redacted.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer

from mirror.config import ClusterConfig, redact
from mirror.kafka.errors import note_principal, note_security_error

log = logging.getLogger(__name__)


class _LibrdkafkaLog:
    """librdkafka's log lines (connection refused, …) go to Python logging at DEBUG.

    librdkafka would otherwise print them straight to stderr, once per retry, burying the
    one-line error the user needs; the project reports reachability itself.
    """

    def __init__(self, cluster: str) -> None:
        self._log = logging.getLogger(f"mirror.librdkafka.{cluster}")

    def log(self, level: int, fmt: str, *args: Any) -> None:
        self._log.debug(fmt, *args)


def principal(settings: Mapping[str, Any]) -> str:
    """The principal these settings log in as, for error messages: the SASL user, or the
    subject of the TLS client certificate (Kafka's default principal for mTLS)."""
    if settings.get("sasl.username"):
        return f"User:{settings['sasl.username']}"
    cert = settings.get("ssl.certificate.location")
    if cert:
        try:
            subject = ssl._ssl._test_decode_cert(str(cert))["subject"]  # type: ignore[attr-defined]
            return "User:" + ",".join(f"{k}={v}" for rdn in reversed(subject) for k, v in rdn).replace(
                "commonName", "CN"
            )
        except (OSError, ValueError, KeyError, AttributeError):
            return f"the principal of {cert}"
    return "User:ANONYMOUS"


def client_settings(name: str, cluster: ClusterConfig, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {"bootstrap.servers": cluster.bootstrap, **cluster.client, **(extra or {})}
    log.debug("client settings for %s: %s", name, redact(settings))
    settings["logger"] = _LibrdkafkaLog(name)
    note_principal(name, principal(settings))
    # Every client remembers a refused TLS handshake or SASL login (librdkafka tells only
    # error_cb), so a timeout can be reported as what it really is.
    own = settings.get("error_cb")

    def on_error(err: KafkaError) -> None:
        note_security_error(name, err)
        if own is not None:
            own(err)

    settings["error_cb"] = on_error
    return settings


def make_consumer(name: str, cluster: ClusterConfig, settings: Mapping[str, Any]) -> Consumer:
    return Consumer(client_settings(name, cluster, settings))


def make_producer(name: str, cluster: ClusterConfig, settings: Mapping[str, Any]) -> Producer:
    return Producer(client_settings(name, cluster, settings))
