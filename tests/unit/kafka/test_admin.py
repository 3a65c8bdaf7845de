"""An admin request the cluster never answers is `ClusterUnavailable`, whichever call made it.

Seen with a source broker out of heap at 10,000 partitions: `max_message_bytes` let
Python's own `TimeoutError` (the future's wait, which can fire before librdkafka's request
timeout) escape, and the flow crashed with a traceback instead of retrying.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from mirror.config import ClusterConfig
from mirror.errors import ClusterUnavailable
from mirror.kafka import Admin


class SilentClient:
    """An AdminClient whose requests are never answered."""

    def _futures(self, keys: Any) -> dict[Any, Future[Any]]:
        return {k: Future() for k in keys}

    def poll(self, _timeout: float) -> int:
        return 0

    def describe_configs(self, resources: Any, **_kw: Any) -> dict[Any, Future[Any]]:
        return self._futures(resources)

    def describe_topics(self, collection: Any, **_kw: Any) -> dict[str, Future[Any]]:
        return self._futures(collection.topic_names)

    def create_topics(self, new: Any, **_kw: Any) -> dict[str, Future[Any]]:
        return self._futures(t.topic for t in new)

    def delete_topics(self, topics: Any, **_kw: Any) -> dict[str, Future[Any]]:
        return self._futures(topics)

    def delete_consumer_groups(self, groups: Any, **_kw: Any) -> dict[str, Future[Any]]:
        return self._futures(groups)


@pytest.fixture
def admin() -> Admin:
    a = Admin("src", ClusterConfig(bootstrap="127.0.0.1:1", timeout=0.05))
    a._client = SilentClient()  # type: ignore[assignment]
    return a


@pytest.mark.parametrize("call", [
    lambda a: a.max_message_bytes(["t"]),
    lambda a: a.topic_configs(["t"]),
    lambda a: a.topic_ids(["t"]),
    lambda a: a.create_topic("t", 1),
    lambda a: a.create_topics({"t": (1, 1, {})}),
    lambda a: a.delete_topics(["t"]),
    lambda a: a.delete_groups(["g"]),
], ids=["max_message_bytes", "topic_configs", "topic_ids", "create_topic", "create_topics", "delete_topics", "delete_groups"])
def test_a_request_never_answered_is_cluster_unavailable(admin: Admin, call: Any) -> None:
    with pytest.raises(ClusterUnavailable, match="cluster 'src' did not answer within 0.05s"):
        call(admin)


def test_flow_admins_are_made_at_first_use_once_and_given_ones_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import mirror.kafka.admin as admin_module
    from mirror.config import parse

    cfg = parse('clusters: {nyc: {bootstrap: "127.0.0.1:1"}, sf: {bootstrap: "127.0.0.1:2"}}\nflows: [{name: f, source: nyc, target: sf, topics: {include: [x]}}]\n', env={})
    made: list[str] = []

    class Recording:
        def __init__(self, name: str, cluster: ClusterConfig) -> None:
            made.append(f"{name}@{cluster.bootstrap}")

    monkeypatch.setattr(admin_module, "Admin", Recording)
    admins = admin_module.FlowAdmins(cfg, cfg.flows[0])
    assert made == []  # a side loop stopped before its first tick opens no connection
    assert admins.source is admins.source and admins.target is admins.target
    assert made == ["nyc@127.0.0.1:1", "sf@127.0.0.1:2"]
    given = object()
    assert admin_module.FlowAdmins(cfg, cfg.flows[0], source=given).source is given  # type: ignore[arg-type]
