"""What every admin request shares: one AdminClient per cluster, each request bounded by the
cluster's timeout, and Kafka's errors turned into this project's exceptions."""

from __future__ import annotations

import zlib
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from mirror.config import ClusterConfig
from mirror.errors import ClusterUnavailable
from mirror.kafka.clients import build_client
from mirror.kafka.errors import HINT_UNREACHABLE, authentication_error, raise_for, security_error


class AdminBase:
    """The connection and error handling the admin's parts (topics, configs, offsets, groups, ACLs) share.

    `lanes`: connections for requests about many groups at once (a site's failover). A
    broker works on one request per connection at a time (it reads the next only once it has
    answered), and an offset commit or a group deletion waits for its write to the offsets
    topic: hundreds of groups' requests over one connection wait for those writes in turn.
    Over several connections the broker has several in hand and its group coordinator
    writes them together. Each group keeps to one lane, so its own requests stay in order.
    """

    def __init__(self, name: str, cluster: ClusterConfig, *, client: Any = None, lanes: int = 1) -> None:
        """`client`: an AdminClient made elsewhere (tests hand in one that never answers); by default one from the
        cluster's settings. Lanes past the first are opened at their first use (none with `client`).
        """
        self.name = name
        self.timeout = cluster.timeout
        self._client = client if client is not None else build_client(AdminClient, name, cluster)
        self._cluster = cluster
        self._lanes: list[Any] = [self._client] + [None] * (max(1, lanes) - 1 if client is None else 0)

    def _lane(self, group: str) -> Any:
        """The client a group's requests go through (always the same one for a group)."""
        i = zlib.crc32(group.encode()) % len(self._lanes)
        if self._lanes[i] is None:
            self._lanes[i] = build_client(AdminClient, self.name, self._cluster)
        return self._lanes[i]

    def _poll(self) -> None:
        for client in self._lanes:
            if client is not None:
                client.poll(0)

    def _raise(
        self, what: str, exc: BaseException, timeout: float | None = None, acl: tuple[str, str, str] | None = None
    ) -> None:
        self._poll()  # serve error_cb: a refused login is recorded there
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
            self._poll()
            refused = security_error(self.name)
            if refused is not None:
                raise authentication_error(self.name, refused) from None
            raise ClusterUnavailable(
                f"cluster {self.name!r} did not answer within {self.timeout:g}s while trying to {what}",
                hint=HINT_UNREACHABLE,
            ) from exc
        except Exception as exc:
            if type(exc).__name__ == "TimeoutError" or "timed out" in str(exc).lower():
                raise ClusterUnavailable(
                    f"cluster {self.name!r} did not answer within {self.timeout:g}s while trying to {what}"
                ) from exc
            raise
