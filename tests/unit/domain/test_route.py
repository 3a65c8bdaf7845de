from __future__ import annotations

from mirror import config
from mirror.domain.route import HEADER_ORIGIN, provenance, route

TEXT = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: [".*"]}}
  - {name: i, source: sf, target: nyc, rename: identity, provenance_headers: false, topics: {include: ["x"]}}
"""


def test_route_keeps_partition_and_prefixes_name():
    cfg = config.parse(TEXT, env={})
    r = route(cfg.flows[0], "orders", 7)
    assert (r.source_topic, r.partition, r.target_topic) == ("orders", 7, "nyc.orders")


def test_headers_keep_originals_in_order_then_add_provenance():
    cfg = config.parse(TEXT, env={})
    r = route(cfg.flows[0], "orders", 3)
    original = [("b", b"2"), ("a", None), ("b", b"1")]
    headers = r.headers(42, original)
    assert headers[:3] == original
    assert headers[3:] == [(HEADER_ORIGIN, b"nyc/orders/3/42")]
    assert provenance(headers) == {"cluster": "nyc", "topic": "orders", "partition": "3", "offset": "42"}
    assert original == [("b", b"2"), ("a", None), ("b", b"1")]  # not mutated


def test_without_provenance_headers_pass_through_untouched():
    cfg = config.parse(TEXT, env={})
    r = route(cfg.flows[1], "x", 0)
    assert r.target_topic == "x"
    assert r.headers(5, None) is None
    assert r.headers(5, [("k", b"v")]) == [("k", b"v")]


def test_provenance_of_a_record_mirrored_twice_is_the_newest_hop():
    headers = [("own", b"x"), (HEADER_ORIGIN, b"nyc/orders/0/7"), (HEADER_ORIGIN, b"hub/nyc.orders/0/3")]
    assert provenance(headers) == {"cluster": "hub", "topic": "nyc.orders", "partition": "0", "offset": "3"}
    assert provenance([("own", b"x")]) is None
