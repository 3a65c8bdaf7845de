"""The domain reads a flow through its own protocols: plain objects with the same attributes
work without the YAML config layer, and the config's models satisfy them unchanged."""

from __future__ import annotations

from dataclasses import dataclass, field

from mirror import config
from mirror.domain.acls import required_grants
from mirror.domain.naming import RenamePolicy, TopicFilter
from mirror.domain.route import route
from mirror.domain.topics import match_topics


@dataclass(frozen=True)
class Topics:
    include: tuple[str, ...]
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlainFlow:
    source: str
    target: str
    topics: Topics
    rename: RenamePolicy = RenamePolicy.PREFIX
    groups: tuple[str, ...] = ()
    group_id: str = "mirror.plain"
    provenance_headers: bool = True
    sync_topic_configs: bool = True
    sync_group_offsets: bool = False
    sync_topic_deletes: bool = False
    sync_acls: bool = False
    name: str = "plain"
    exactly_once: bool = False
    progress_group: str = "mirror-eos.plain"

    def topic_filter(self, canary_topic: str | None = None) -> TopicFilter:
        return TopicFilter.of(self.topics.include, self.topics.exclude, [canary_topic] if canary_topic else [])


@dataclass(frozen=True)
class Canary:
    topic: str = "mirror-canary"


@dataclass(frozen=True)
class PlainTopology:
    clusters: dict[str, object]
    flows: tuple[PlainFlow, ...]
    canary: Canary = field(default_factory=Canary)


FLOW = PlainFlow("nyc", "sf", Topics(("orders.*",), ("orders-test",)), groups=("billing",))
TOPOLOGY = PlainTopology({"nyc": None, "sf": None}, (FLOW,))

YAML = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: plain, source: nyc, target: sf, groups: [billing], topics: {include: ["orders.*"], exclude: ["orders-test"]}}
"""


def test_plain_objects_route_and_match_like_the_config_models():
    listed = {"orders": 3, "orders-test": 1, "orders.eu": 2, "sf.orders": 4, "mirror-canary": 1, "users": 1}
    plain = match_topics(TOPOLOGY, FLOW, listed)
    assert [(m.source, m.target, m.partitions) for m in plain] == [
        ("mirror-canary", "nyc.mirror-canary", 1),
        ("orders", "nyc.orders", 3),
        ("orders.eu", "nyc.orders.eu", 2),
    ]
    cfg = config.parse(YAML, env={})
    assert match_topics(cfg, cfg.flows[0], listed) == plain
    assert route(FLOW, "orders", 2) == route(cfg.flows[0], "orders", 2)


def test_grants_from_plain_objects_equal_those_from_the_config():
    cfg = config.parse(YAML, env={})
    assert required_grants(TOPOLOGY) == required_grants(cfg)
