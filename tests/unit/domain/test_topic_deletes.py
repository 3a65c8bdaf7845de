"""`sync_topic_deletes`' judgements: the grace clock, and whether a sample is all the mirror's copies."""

from __future__ import annotations

from mirror.domain.topic_deletes import GoneTopics, foreign_record


def test_a_source_topic_is_due_only_once_gone_for_the_whole_grace():
    gone = GoneTopics(grace=300)
    assert gone.observe({"a", "b"}, ["a", "b"], now=0) == ([], [], [])
    assert gone.observe({"b"}, ["a", "b"], now=10) == ([], [], ["a"])  # a's count starts
    assert gone.observe({"b"}, ["a", "b"], now=309) == ([], [], [])
    assert gone.observe({"b"}, ["a", "b"], now=310) == (["a"], [], [])


def test_a_source_topic_recreated_within_the_grace_starts_over():
    gone = GoneTopics(grace=300)
    gone.observe(set(), ["a"], now=0)
    assert gone.observe({"a"}, ["a"], now=200) == ([], ["a"], [])  # back: kept
    assert gone.observe(set(), ["a"], now=250) == ([], [], ["a"])  # gone again: a new count
    assert gone.observe(set(), ["a"], now=549) == ([], [], [])
    assert gone.observe(set(), ["a"], now=550) == (["a"], [], [])


def test_a_topic_no_longer_watched_is_forgotten():
    gone = GoneTopics(grace=1)
    gone.observe(set(), ["a"], now=0)
    assert gone.observe(set(), [], now=5) == ([], [], [])
    assert gone.since == {}


def origin(value: str) -> list[tuple[str, bytes | None]]:
    return [("trace", b"x"), ("mirror.origin", value.encode())]


def test_the_mirrors_own_copies_pass():
    records = [(0, origin("nyc/orders/0/7")), (1, origin("nyc/orders/0/8"))]
    assert foreign_record(records, "nyc", "orders") is None
    # Mirrored twice (hub and spoke): the newest hop is this flow's.
    assert foreign_record([(0, origin("la/orders/0/1") + origin("nyc/orders/0/7"))], "nyc", "orders") is None


def test_a_record_somebody_else_wrote_is_named():
    assert foreign_record([(0, origin("nyc/orders/0/7")), (1, [("k", b"v")])], "nyc", "orders") == (
        1,
        "it has no provenance header",
    )
    assert foreign_record([(4, origin("la/orders/0/7"))], "nyc", "orders") == (4, "it came from la/orders")
    assert foreign_record([(4, origin("nyc/payments/0/7"))], "nyc", "orders") == (4, "it came from nyc/payments")
    assert foreign_record([(5, [("mirror.origin", b"garbage")])], "nyc", "orders") == (
        5,
        "its provenance header does not parse",
    )
