from __future__ import annotations

from mirror.domain.naming import (
    FlowEdge,
    RelayCollision,
    RenamePolicy,
    TopicFilter,
    find_identity_cycles,
    find_relay_collisions,
    origin_chain,
    source_topic,
    target_topic,
    would_loop,
)

CLUSTERS = ["nyc", "sf", "hub"]


def test_full_match_include_exclude():
    f = TopicFilter.of(["orders.*", "users"], ["orders\\.tmp"])
    assert f.matches("orders") and f.matches("orders.eu") and f.matches("users")
    assert not f.matches("users2")  # full match, not search
    assert not f.matches("xorders")
    assert not f.matches("orders.tmp")


def test_internal_topics_need_an_explicit_pattern():
    assert not TopicFilter.of([".*"]).matches("__consumer_offsets")
    assert TopicFilter.of(["__audit"]).matches("__audit")


def test_always_overrides_patterns():
    f = TopicFilter.of(["orders"], ["mirror-canary"], always=["mirror-canary"])
    assert f.matches("mirror-canary")


def test_prefix_naming_roundtrip():
    assert target_topic("orders", "nyc", RenamePolicy.PREFIX) == "nyc.orders"
    assert source_topic("nyc.orders", "nyc", RenamePolicy.PREFIX) == "orders"
    assert target_topic("orders", "nyc", RenamePolicy.IDENTITY) == "orders"


def test_origin_chain_and_loops():
    assert origin_chain("sf.nyc.orders", CLUSTERS) == ["sf", "nyc"]
    assert origin_chain("orders.eu", CLUSTERS) == []
    # nyc.orders on sf is nyc's own data: never send it back to nyc
    assert would_loop("nyc.orders", "sf", "nyc", CLUSTERS)
    # hub-and-spoke: the hub forwards a spoke's topic to another spoke
    assert not would_loop("nyc.orders", "hub", "sf", CLUSTERS)
    assert not would_loop("orders", "sf", "nyc", CLUSTERS)


def test_identity_cycle_detection():
    a = FlowEdge("a", "nyc", "sf", RenamePolicy.IDENTITY, ("orders.*",))
    b = FlowEdge("b", "sf", "nyc", RenamePolicy.IDENTITY, ("orders",))
    assert find_identity_cycles([a, b]) == [["a", "b"]]
    b_prefix = FlowEdge("b", "sf", "nyc", RenamePolicy.PREFIX, ("orders",))
    assert find_identity_cycles([a, b_prefix]) == []
    b_disjoint = FlowEdge("b", "sf", "nyc", RenamePolicy.IDENTITY, ("users",))
    assert find_identity_cycles([FlowEdge("a", "nyc", "sf", RenamePolicy.IDENTITY, ("orders",)), b_disjoint]) == []
    # a three-cluster ring
    c1 = FlowEdge("1", "nyc", "sf", RenamePolicy.IDENTITY, (".*",))
    c2 = FlowEdge("2", "sf", "hub", RenamePolicy.IDENTITY, (".*",))
    c3 = FlowEdge("3", "hub", "nyc", RenamePolicy.IDENTITY, (".*",))
    assert find_identity_cycles([c1, c2, c3]) == [["1", "2", "3"]]


def test_identity_cycles_through_the_always_mirrored_canary():
    a = FlowEdge("a", "nyc", "sf", RenamePolicy.IDENTITY, ("orders",))
    b = FlowEdge("b", "sf", "nyc", RenamePolicy.IDENTITY, ("users",))
    assert find_identity_cycles([a, b]) == []
    assert find_identity_cycles([a, b], always=["mirror-canary"]) == [["a", "b"]]
    assert find_identity_cycles([a, FlowEdge("b", "sf", "nyc", RenamePolicy.PREFIX, ("users",))], always=["mirror-canary"]) == []


def test_relay_collisions_follow_prefixed_names_through_the_topology():
    # sf's topics reach nyc as sf.x; an identity flow nyc -> dr carries them on as sf.x,
    # which is exactly what the prefixing flow sf -> dr writes.
    aa = [FlowEdge("n2s", "nyc", "sf", RenamePolicy.PREFIX, (".*",)), FlowEdge("s2n", "sf", "nyc", RenamePolicy.PREFIX, (".*",))]
    relay = FlowEdge("n2dr", "nyc", "dr", RenamePolicy.IDENTITY, (".*",))
    direct = FlowEdge("s2dr", "sf", "dr", RenamePolicy.PREFIX, (".*",))
    assert find_relay_collisions([*aa, relay, direct]) == [RelayCollision("n2dr", "s2dr", "dr", "sf")]
    # Without the flow bringing sf.* names to nyc there is nothing to relay.
    assert find_relay_collisions([aa[0], relay, direct]) == []
    # A relay whose patterns cannot select sf.* names.
    assert find_relay_collisions([*aa, FlowEdge("n2dr", "nyc", "dr", RenamePolicy.IDENTITY, ("orders",)), direct]) == []
    # A longer path: sf -> hub (prefix) -> nyc (identity) -> dr (identity) still carries sf.*.
    longer = [FlowEdge("s2h", "sf", "hub", RenamePolicy.PREFIX, (".*",)), FlowEdge("h2n", "hub", "nyc", RenamePolicy.IDENTITY, (".*",)), relay, direct]
    assert find_relay_collisions(longer) == [RelayCollision("n2dr", "s2dr", "dr", "sf")]
