"""The admin client: a request the cluster never answers is `ClusterUnavailable`, whichever
call made it. Python's own `TimeoutError` (the future's wait, which can fire before
librdkafka's request timeout) must not escape: a flow would crash with a traceback instead
of retrying. And a flow's admin clients are made at first use.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError

from mirror.config import ClusterConfig
from mirror.errors import AuthorizationFailed, ClusterUnavailable, KafkaOperationError
from mirror.kafka import Admin
from tests.unit.kafka.fakes import Coordinator, MixedCoordinator


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

    def describe_cluster(self, **_kw: Any) -> Future[Any]:
        return Future()


@pytest.fixture
def admin() -> Admin:
    return Admin("src", ClusterConfig(bootstrap="127.0.0.1:1", timeout=0.05), client=SilentClient())


@pytest.mark.parametrize(
    "call",
    [
        lambda a: a.max_message_bytes(["t"]),
        lambda a: a.topic_configs(["t"]),
        lambda a: a.topic_ids(["t"]),
        lambda a: a.create_topic("t", 1),
        lambda a: a.create_topics({"t": (1, 1, {})}),
        lambda a: a.delete_topics(["t"]),
        lambda a: a.delete_groups(["g"]),
        lambda a: a.cluster_id(),
    ],
    ids=[
        "max_message_bytes",
        "topic_configs",
        "topic_ids",
        "create_topic",
        "create_topics",
        "delete_topics",
        "delete_groups",
        "cluster_id",
    ],
)
def test_a_request_never_answered_is_cluster_unavailable(admin: Admin, call: Any) -> None:
    with pytest.raises(ClusterUnavailable, match="cluster 'src' did not answer within 0.05s"):
        call(admin)


def test_flow_admins_are_made_at_first_use_once_and_given_ones_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import mirror.kafka.admin as admin_module
    from mirror.config import parse

    cfg = parse(
        'clusters: {nyc: {bootstrap: "127.0.0.1:1"}, sf: {bootstrap: "127.0.0.1:2"}}\nflows: [{name: f, source: nyc, '
        "target: sf, topics: {include: [x]}}]\n",
        env={},
    )
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


class AnsweringClient:
    """An AdminClient that answers every group request at once and records which groups it was asked about."""

    made: list[AnsweringClient] = []

    def __init__(self, _settings: Any = None) -> None:
        self.asked: list[str] = []
        AnsweringClient.made.append(self)

    def poll(self, _timeout: float) -> int:
        return 0

    def _answered(self, groups: Any, value: Any = None) -> dict[str, Future[Any]]:
        out = {}
        for g in groups:
            self.asked.append(g)
            out[g] = Future()
            out[g].set_result(value)
        return out

    def delete_consumer_groups(self, groups: Any, **_kw: Any) -> dict[str, Future[Any]]:
        return self._answered(groups)

    def alter_consumer_group_offsets(self, requests: Any, **_kw: Any) -> dict[str, Future[Any]]:
        class Answer:
            topic_partitions: list[Any] = []

        return self._answered([r.group_id for r in requests], Answer())


def test_lanes_spread_many_groups_over_connections_each_group_keeping_to_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A site's hundreds of groups go over several connections (a broker answers one request
    per connection at a time), opened at first use; one group's requests always take the same
    lane, so they reach the broker in the order they were sent."""
    monkeypatch.setattr("mirror.kafka.admin.base.AdminClient", AnsweringClient)
    AnsweringClient.made = []
    admin = Admin("dst", ClusterConfig(bootstrap="127.0.0.1:1", timeout=1), lanes=4)
    assert len(AnsweringClient.made) == 1  # the others only when a group needs them
    groups = [f"g{i}" for i in range(40)]
    admin.delete_groups(groups)
    for g in groups:
        admin.alter_group_offsets(g, {("t", 0): 1})
    clients = AnsweringClient.made
    assert len(clients) == 4
    assert sorted(g for c in clients for g in c.asked) == sorted(groups * 2)  # each request sent once
    for c in clients:
        assert c.asked, "every lane carries some of 40 groups"
        mine = set(c.asked)
        assert all(g not in mine for other in clients if other is not c for g in other.asked)


def test_one_lane_by_default_and_with_a_client_handed_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mirror.kafka.admin.base.AdminClient", AnsweringClient)
    AnsweringClient.made = []
    Admin("dst", ClusterConfig(bootstrap="127.0.0.1:1", timeout=1)).delete_groups([f"g{i}" for i in range(10)])
    given = AnsweringClient()
    Admin("dst", ClusterConfig(bootstrap="127.0.0.1:1", timeout=1), client=given, lanes=8).delete_groups(["a", "b"])
    assert len(AnsweringClient.made) == 2 and given.asked == ["a", "b"]


@pytest.mark.parametrize(
    "code", [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS]
)
def test_offsets_refused_while_the_group_coordinator_moves_are_cluster_unavailable(code: int) -> None:
    """A rolling restart moves the group's coordinator: the commit may be sent again (its
    callers retry `ClusterUnavailable`), said in one line naming the group and partition."""
    admin = Admin("src", ClusterConfig(bootstrap="127.0.0.1:1", timeout=1), client=Coordinator(code))
    with pytest.raises(ClusterUnavailable) as refused:
        admin.alter_group_offsets("g", {("t", 3): 7})
    assert "'g'" in str(refused.value) and "t[3]" in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("code", [KafkaError.UNKNOWN_MEMBER_ID, KafkaError.OFFSET_METADATA_TOO_LARGE])
def test_offsets_refused_for_good_stay_operation_errors(code: int) -> None:
    admin = Admin("src", ClusterConfig(bootstrap="127.0.0.1:1", timeout=1), client=Coordinator(code))
    with pytest.raises(KafkaOperationError) as refused:
        admin.alter_group_offsets("g", {("t", 3): 7})
    assert not isinstance(refused.value, ClusterUnavailable)
    with pytest.raises(AuthorizationFailed):
        Admin(
            "src",
            ClusterConfig(bootstrap="127.0.0.1:1", timeout=1),
            client=Coordinator(KafkaError.TOPIC_AUTHORIZATION_FAILED),
        ).alter_group_offsets("g", {("t", 3): 7})


def test_a_partition_refused_for_good_is_reported_before_one_refused_for_now() -> None:
    """A mixed answer (the coordinator moving for one topic, Read on the other missing):
    said as the moving coordinator, the run's commits would treat the missing grant as an
    outage to wait out (`GroupCommits`), and `failover apply` would say "not yet" where only
    an ACL helps. The refusal for good wins, whatever the answer's order."""
    client = MixedCoordinator({("a", 0): KafkaError.NOT_COORDINATOR, ("b", 0): KafkaError.TOPIC_AUTHORIZATION_FAILED})
    admin = Admin("src", ClusterConfig(bootstrap="127.0.0.1:1", timeout=1), client=client)
    with pytest.raises(AuthorizationFailed) as refused:
        admin.alter_group_offsets("g", {("a", 0): 5, ("b", 0): 7})
    assert "'b'" in str(refused.value) or " b" in str(refused.value)
    client.codes = {("a", 0): KafkaError.COORDINATOR_LOAD_IN_PROGRESS, ("b", 0): KafkaError.UNKNOWN_TOPIC_OR_PART}
    with pytest.raises(KafkaOperationError) as gone:
        admin.alter_group_offsets("g", {("a", 0): 5, ("b", 0): 7})
    assert not isinstance(gone.value, ClusterUnavailable) and "b[0]" in str(gone.value)
