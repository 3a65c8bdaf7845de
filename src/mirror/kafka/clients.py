"""Consumers and producers built from a cluster's config; librdkafka's logging tamed.

Security settings pass through untouched; the settings are logged only redacted.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from mirror.config import ClusterConfig, redact
from mirror.errors import ConfigError
from mirror.kafka.errors import note_principal, note_security_error

T = TypeVar("T")

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


def build_client(
    factory: Callable[[dict[str, Any]], T],
    name: str,
    cluster: ClusterConfig,
    extra: Mapping[str, Any] | None = None,
    *,
    cluster_name: str | None = None,
) -> T:
    """`factory(settings)` for client `name` of a cluster (`cluster_name`, if `name` is not
    it), a setting librdkafka refuses raised as `ConfigError` naming it.

    librdkafka judges every property when a client is made, before any request: a name it
    does not know or a value it cannot take raises `KafkaException` there. The config's
    loader passes `client:`, `consumer:` and `producer:` through untouched, so this is where
    they are first judged."""
    try:
        return factory(client_settings(name, cluster, extra))
    except KafkaException as exc:
        raise refused_setting(cluster_name or name, cluster, exc) from None


def refused_setting(name: str, cluster: ClusterConfig, exc: KafkaException) -> ConfigError:
    """The `ConfigError` for a client librdkafka would not make, naming the setting it refused."""
    err = exc.args[0] if exc.args else exc
    text = err.str() if isinstance(err, KafkaError) else str(err)
    quoted = re.findall(r'"([^"]+)"', text)
    prop = quoted[-1] if quoted else None
    if prop is not None and prop in cluster.client:
        return ConfigError(f"clusters.{name}.client.{prop}", f"librdkafka refuses it: {text}")
    # Not found by that name: an alias (`acks` is said as `request.required.acks`), or a flow's.
    return ConfigError(
        None,
        f"cluster {name!r}: librdkafka refuses a client setting ({text})",
        hint=f"check clusters.{name}.client and the consumer:/producer: settings of its flows",
    )


def check_settings(name: str, cluster: ClusterConfig, extra: Mapping[str, Any] | None = None) -> None:
    """Raise `ConfigError` if librdkafka refuses these settings. An admin client is made and
    dropped: librdkafka judges every property at construction, and this one sends nothing."""
    build_client(AdminClient, name, cluster, extra)


def make_consumer(name: str, cluster: ClusterConfig, settings: Mapping[str, Any]) -> Consumer:
    return build_client(Consumer, name, cluster, settings)


def make_producer(name: str, cluster: ClusterConfig, settings: Mapping[str, Any]) -> Producer:
    return build_client(Producer, name, cluster, settings)
