"""What every admin request shares: one AdminClient per cluster, each request bounded by the
cluster's timeout, and Kafka's errors turned into this project's exceptions."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from mirror.config import ClusterConfig
from mirror.errors import ClusterUnavailable
from mirror.kafka.clients import client_settings
from mirror.kafka.errors import HINT_UNREACHABLE, authentication_error, raise_for, security_error


class AdminBase:
    """The connection and error handling the admin's parts (topics, configs, offsets, groups, ACLs) share."""

    def __init__(self, name: str, cluster: ClusterConfig) -> None:
        self.name = name
        self.timeout = cluster.timeout
        self._client = AdminClient(client_settings(name, cluster))

    def _raise(self, what: str, exc: BaseException, timeout: float | None = None, acl: tuple[str, str, str] | None = None) -> None:
        self._client.poll(0)  # serve error_cb: a refused login is recorded there
        raise_for(self.name, what, exc, timeout, acl)

    def _result(self, what: str, future: Any, acl: tuple[str, str, str] | None = None) -> Any:
        try:
            return self._answer(what, future)
        except KafkaException as exc:
            self._raise(what, exc, self.timeout, acl)

    def _answer(self, what: str, future: Any) -> Any:
        """The future's result; its KafkaException raised as is (the caller may expect some:
        a topic that already exists), no answer within the timeout as `ClusterUnavailable`.
        Python's wait can give up before librdkafka's own request timeout fires (a broker
        out of heap, say): that `TimeoutError` must not escape."""
        try:
            return future.result(timeout=self.timeout)
        except TimeoutError as exc:
            self._client.poll(0)
            refused = security_error(self.name)
            if refused is not None:
                raise authentication_error(self.name, refused) from None
            raise ClusterUnavailable(
                f"cluster {self.name!r} did not answer within {self.timeout:g}s while trying to {what}",
                hint=HINT_UNREACHABLE,
            ) from exc
        except Exception as exc:
            if type(exc).__name__ == "TimeoutError" or "timed out" in str(exc).lower():
                raise ClusterUnavailable(f"cluster {self.name!r} did not answer within {self.timeout:g}s while trying to {what}") from exc
            raise
