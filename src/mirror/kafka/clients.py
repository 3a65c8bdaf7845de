"""Consumers and producers built from a cluster's config; librdkafka's logging tamed.

Security settings pass through untouched; the settings are logged only redacted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, Producer

from mirror.config import ClusterConfig, redact

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


def client_settings(name: str, cluster: ClusterConfig, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {"bootstrap.servers": cluster.bootstrap, **cluster.client, **(extra or {})}
    log.debug("client settings for %s: %s", name, redact(settings))
    settings["logger"] = _LibrdkafkaLog(name)
    return settings


def make_consumer(name: str, cluster: ClusterConfig, settings: Mapping[str, Any]) -> Consumer:
    return Consumer(client_settings(name, cluster, settings))


def make_producer(name: str, cluster: ClusterConfig, settings: Mapping[str, Any]) -> Producer:
    return Producer(client_settings(name, cluster, settings))
