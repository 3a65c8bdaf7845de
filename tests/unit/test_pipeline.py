from __future__ import annotations

from mirror import config
from mirror.pipeline import HEADER_OFFSET, provenance, route

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
    assert provenance(headers) == {
        "mirror.origin.cluster": "nyc",
        "mirror.origin.topic": "orders",
        "mirror.origin.partition": "3",
        "mirror.origin.offset": "42",
    }
    assert headers[-1] == (HEADER_OFFSET, b"42")
    assert original == [("b", b"2"), ("a", None), ("b", b"1")]  # not mutated


def test_without_provenance_headers_pass_through_untouched():
    cfg = config.parse(TEXT, env={})
    r = route(cfg.flows[1], "x", 0)
    assert r.target_topic == "x"
    assert r.headers(5, None) is None
    assert r.headers(5, [("k", b"v")]) == [("k", b"v")]
