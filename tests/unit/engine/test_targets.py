"""`sync_topics` decisions: what it changes, what it never touches, and a refusal that is not fatal.

The target here is a stand-in for the project's own `Admin` (its five methods), not for
Kafka: the dev clusters have no authorizer, so a target that refuses AlterConfigs cannot be
made real in this suite. The real-cluster behaviour is tests/integration/test_topic_sync.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry

from mirror import config as cfg
from mirror.domain.topics import TopicMapping
from mirror.engine.targets import sync_topics
from mirror.errors import ConfigError, KafkaOperationError
from mirror.metrics import TopicSyncMetrics


class _Cluster:
    def __init__(
        self, details: dict[str, tuple[int, int]], configs: dict[str, dict[str, str]], refuse: Iterable[str] = ()
    ) -> None:
        self.details, self.configs, self.refuse = details, configs, set(refuse)
        self.calls: list[tuple] = []

    def topic_details(self) -> dict[str, tuple[int, int]]:
        return dict(self.details)

    def topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        return {t: dict(self.configs.get(t, {})) for t in topics}

    def create_partitions(self, topic: str, total: int) -> None:
        self.calls.append(("grow", topic, total))
        self.details[topic] = (total, self.details[topic][1])

    def alter_topic_configs(self, topic: str, set_configs: Mapping[str, str], reset: Iterable[str] = ()) -> None:
        if topic in self.refuse:
            raise KafkaOperationError(
                f"cluster 'dst': cannot alter the configs of topic {topic!r}: Topic authorization failed",
                code="TOPIC_AUTHORIZATION_FAILED",
            )
        self.calls.append(("alter", topic, dict(set_configs), list(reset)))
        self.configs.setdefault(topic, {}).update(set_configs)
        for k in reset:
            self.configs[topic].pop(k, None)


def _maps(*names: tuple[str, int]) -> list[TopicMapping]:
    return [TopicMapping(n, f"src.{n}", p) for n, p in names]


def test_follows_configs_and_increases_never_lowers_nor_touches_the_rest():
    source = _Cluster(
        {"a": (4, 3), "b": (2, 1), "c": (1, 1)},
        {"a": {"retention.ms": "1000", "cleanup.policy": "compact", "min.insync.replicas": "2"}, "b": {}},
    )
    target = _Cluster(
        {"src.a": (2, 1), "src.b": (6, 1)},
        {"src.a": {"retention.ms": "9999", "segment.ms": "60000"}, "src.b": {"retention.bytes": "5"}},
    )
    result = {s.source: s for s in sync_topics(source, target, _maps(("a", 4), ("b", 2), ("c", 1)))}  # type: ignore[arg-type]
    assert set(result) == {"a", "b"}  # c is not created yet: the worker's business
    assert result["a"].grown == (2, 4) and result["b"].grown is None
    # min.insync.replicas capped at the target's replication, as at creation
    assert result["a"].applied == {"retention.ms": "1000", "cleanup.policy": "compact", "min.insync.replicas": "1"}
    assert result["b"].applied == {"retention.bytes": None}  # the source no longer sets it: back to default
    assert target.details["src.b"] == (6, 1)  # more partitions than the source: left alone
    assert target.configs["src.a"]["segment.ms"] == "60000"  # the target operator's tuning stays
    assert not any(r.drifting for r in result.values())
    # in line now: a second round changes nothing
    assert sync_topics(source, target, _maps(("a", 4), ("b", 2))) == []  # type: ignore[arg-type]


def test_a_refused_topic_is_drift_counted_and_the_others_still_follow():
    source = _Cluster({"a": (1, 1), "b": (1, 1)}, {"a": {"retention.ms": "1000"}, "b": {"retention.ms": "1000"}})
    target = _Cluster({"src.a": (1, 1), "src.b": (1, 1)}, {}, refuse=["src.a"])
    synced = sync_topics(source, target, _maps(("a", 1), ("b", 1)))  # type: ignore[arg-type]
    by = {s.source: s for s in synced}
    assert by["a"].drifting and "authorization" in (by["a"].failed or "")
    assert not by["b"].drifting and target.configs["src.b"] == {"retention.ms": "1000"}

    metrics = TopicSyncMetrics(CollectorRegistry())
    metrics.observe("f", {"a": 1, "b": 0}, synced)
    assert metrics.drift.labels("f", "a")._value.get() == 1
    assert metrics.drift.labels("f", "b")._value.get() == 0
    assert metrics.failures.labels("f")._value.get() == 1
    assert metrics.changes.labels("f")._value.get() == 1
    metrics.observe("f", {"b": 0}, [])  # a stopped being mirrored: its series ends
    assert [s.labels["topic"] for fam in metrics.drift.collect() for s in fam.samples] == ["b"]


def test_sync_keys_validated():
    base = (
        'clusters: {a: {bootstrap: "x:1"}, b: {bootstrap: "y:1"}}\n'
        "flows: [{name: f, source: a, target: b, topics: {include: [t]}EXTRA}]\n"
    )
    flow = cfg.parse(base.replace("EXTRA", ""), env={}).flows[0]
    assert flow.sync_topic_configs is True and flow.sync_topic_configs_interval == 60.0
    flow = cfg.parse(
        base.replace("EXTRA", ", sync_topic_configs: false, sync_topic_configs_interval: 5s"), env={}
    ).flows[0]
    assert flow.sync_topic_configs is False and flow.sync_topic_configs_interval == 5.0
    for extra, key in (
        (", sync_topic_configs_interval: 0s", "flows[0].sync_topic_configs_interval"),
        (", sync_topic_configs: maybe", "flows[0].sync_topic_configs"),
    ):
        try:
            cfg.parse(base.replace("EXTRA", extra), env={})
        except ConfigError as exc:
            assert exc.key == key
        else:
            raise AssertionError(f"{extra} accepted")


def test_topic_creation_is_chunked_below_the_controllers_batch_limit():
    """A KRaft controller refuses one CreateTopics writing more than 10,000 metadata records."""
    from mirror.kafka.admin import CREATE_BATCH_RECORDS, _create_chunks

    topics = {f"t{i:04d}": (10, 1, {"retention.ms": "1"}) for i in range(1000)}  # 12 records each
    chunks = _create_chunks(topics)
    assert [t for c in chunks for t in c] == list(topics)  # all of them, in order, once
    assert all(sum(1 + n + len(cfg) for n, _, cfg in c.values()) <= CREATE_BATCH_RECORDS for c in chunks)
    assert len(chunks) == 3
    assert _create_chunks({}) == []
    assert _create_chunks({"huge": (20000, 1, {})}) == [{"huge": (20000, 1, {})}]  # alone; the broker decides


def test_a_changed_record_limit_follows_with_room_for_the_provenance_header():
    # Created with the source's 65536 plus the header room; the source then lowers it to 32768.
    source = _Cluster({"a": (1, 1)}, {"a": {"max.message.bytes": "32768"}})
    target = _Cluster({"src.a": (1, 1)}, {"src.a": {"max.message.bytes": str(65536 + 1024)}})
    (r,) = sync_topics(source, target, _maps(("a", 1)))  # type: ignore[arg-type]
    assert r.applied == {"max.message.bytes": str(32768 + 1024)}  # a record at the source limit still fits
    assert sync_topics(source, target, _maps(("a", 1))) == []  # type: ignore[arg-type]  # no drift left: no endless re-sync
