"""The book's multi-cluster architectures, run for real on four clusters (a, b, c, hub).

configs/active-active.yaml, configs/hub-and-spoke.yaml and the spoke -> hub -> DR chain
(configs/active-standby.yaml behind a hub) as `mirror run --until-caught-up` processes
with one-second refreshes. Every check is on records: each one present once, in order, on
each destination, under the name the topology gives it, and nothing sent round again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.kafkautil import create_topic, producer, read_topic, topics
from tests.support.mirrorproc import MirrorProcess

if TYPE_CHECKING:  # imported by name, pytest would try to collect the class
    from tests.support.clusters import TestClusters

PARTITIONS = 2


@pytest.fixture(scope="module")
def four(clusters: TestClusters, more_clusters: TestClusters) -> Iterator[TestClusters]:
    """Three spokes and a hub: the session's `src` and `dst` serve as spoke `a` and the hub
    (every check here looks only at this test's topics), with the session's `b` and `c`."""
    from tests.support.clusters import TestClusters as Four

    own = more_clusters
    yield Four(
        own.dev,
        own.base_port,
        ["a", "b", "c", "hub"],
        {
            "a": clusters.bootstrap("src"),
            "b": own.bootstrap("b"),
            "c": own.bootstrap("c"),
            "hub": clusters.bootstrap("dst"),
        },
    )


def _config(tmp_path: Path, tc: TestClusters, unique: str, flows: str) -> Path:
    path = tmp_path / f"topology-{uuid.uuid4().hex[:6]}.yaml"
    clusters = "".join(f"  {n}:\n    bootstrap: {tc.bootstrap(n)}\n    timeout: 15s\n" for n in tc.names)
    # A canary topic of this test's own, so no other flow's probes can show up in the counts.
    path.write_text(f"clusters:\n{clusters}flows:\n{flows}canary: {{topic: canary-{unique}}}\n")
    return path


def _flow(name: str, source: str, target: str, include: str, rename: str = "prefix") -> str:
    return (
        f"  - {{name: {name}, source: {source}, target: {target}, rename: {rename}, refresh_interval: 1s, "
        f"topics: {{include: ['{include}']}}}}\n"
    )


def _round(config: Path) -> None:
    """One `mirror run --until-caught-up` of every flow in the file."""
    with MirrorProcess(config, "--until-caught-up") as m:
        assert m.wait(180) == 0, m.output()


def _produce(bootstrap: str, topic: str, tag: str, count: int) -> dict[int, list[bytes]]:
    """`count` records spread over the partitions; returns the values per partition, in order."""
    create_topic(bootstrap, topic, PARTITIONS)
    p = producer(bootstrap)
    sent: dict[int, list[bytes]] = {q: [] for q in range(PARTITIONS)}
    for i in range(count):
        value = f"{tag}-{i}".encode()
        p.produce(topic, key=str(i).encode(), value=value, partition=i % PARTITIONS)
        sent[i % PARTITIONS].append(value)
    assert p.flush(30) == 0
    return sent


def _values(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    return {q: [r.value for r in recs] for q, recs in read_topic(bootstrap, topic, PARTITIONS).items()}


def _mine(bootstrap: str, unique: str) -> dict[str, int]:
    """This test's data topics on a cluster (canary topics are checked apart, by `_canaries`)."""
    return {t: n for t, n in topics(bootstrap).items() if unique in t and f"canary-{unique}" not in t}


def _canaries(bootstrap: str, unique: str) -> set[str]:
    """This test's canary topics on a cluster: `mirror run` makes one on every flow's source,
    and each flow carries its source's canary topic like any selected topic."""
    return {t for t in topics(bootstrap) if f"canary-{unique}" in t}


def test_active_active_with_prefixes_both_ways(four, tmp_path, unique):
    a, b = four.bootstrap("a"), four.bootstrap("b")
    orders = f"aa-{unique}.orders"
    sent_a, sent_b = _produce(a, orders, "a", 40), _produce(b, orders, "b", 30)
    # Patterns wide enough to select the other side's copies: only the prefix keeps
    # `b.aa-….orders` on a from going back to b as `a.b.aa-….orders`.
    wide = f"(.*\\.)?aa-{unique}\\..*"
    config = _config(
        tmp_path, four, unique, _flow(f"a-to-b-{unique}", "a", "b", wide) + _flow(f"b-to-a-{unique}", "b", "a", wide)
    )

    snapshots = []
    for _ in range(3):  # three processes, each with its own refreshes, over the same state
        _round(config)
        snapshots.append(
            (
                _mine(a, unique),
                _mine(b, unique),
                {t: _values(a, t) for t in _mine(a, unique)},
                {t: _values(b, t) for t in _mine(b, unique)},
            )
        )
    on_a, on_b, values_a, values_b = snapshots[0]
    assert on_a == {orders: PARTITIONS, f"b.{orders}": PARTITIONS}
    assert on_b == {orders: PARTITIONS, f"a.{orders}": PARTITIONS}
    # Each cluster: its own records untouched, the other's once each, in order.
    assert values_a == {orders: sent_a, f"b.{orders}": sent_b}
    assert values_b == {orders: sent_b, f"a.{orders}": sent_a}
    assert snapshots[1] == snapshots[0] and snapshots[2] == snapshots[0], "topics or counts changed in a later round"
    assert not [t for t in [*on_a, *on_b] if t.startswith(("a.b.", "b.a.", "a.a.", "b.b."))]
    # The probes travel both ways once too, never back round.
    canary = f"canary-{unique}"
    assert _canaries(a, unique) == {canary, f"b.{canary}"}
    assert _canaries(b, unique) == {canary, f"a.{canary}"}


def test_hub_and_spoke_with_fan_out(four, tmp_path, unique):
    spokes = ("a", "b", "c")
    prices = f"hs-{unique}.prices"
    sent = {s: _produce(four.bootstrap(s), prices, s, 20 + 5 * i) for i, s in enumerate(spokes)}
    reference = f"ref-{unique}.fx"
    sent_ref = _produce(four.bootstrap("hub"), reference, "hub", 16)
    flows = "".join(_flow(f"{s}-to-hub-{unique}", s, "hub", f"(.*\\.)?hs-{unique}\\..*") for s in spokes)
    # The fan-out takes only the hub's own reference data, never the regions' copies.
    flows += "".join(_flow(f"hub-to-{s}-{unique}", "hub", s, f"ref-{unique}\\..*") for s in spokes)
    config = _config(tmp_path, four, unique, flows)
    _round(config)
    _round(config)  # a second pass over the same state adds nothing

    hub = four.bootstrap("hub")
    assert _mine(hub, unique) == {reference: PARTITIONS, **{f"{s}.{prices}": PARTITIONS for s in spokes}}
    for s in spokes:
        assert _values(hub, f"{s}.{prices}") == sent[s], f"{s}'s prices on the hub"
        # every spoke: its own prices and the hub's reference data, nothing of the other spokes
        assert _mine(four.bootstrap(s), unique) == {prices: PARTITIONS, f"hub.{reference}": PARTITIONS}
        assert _values(four.bootstrap(s), f"hub.{reference}") == sent_ref, f"the hub's reference data on {s}"
    # Every flow's source has its canary topic, and each crossed its own flow once.
    canary = f"canary-{unique}"
    assert _canaries(hub, unique) == {canary, *(f"{s}.{canary}" for s in spokes)}
    for s in spokes:
        assert _canaries(four.bootstrap(s), unique) == {canary, f"hub.{canary}"}


def test_chain_spoke_to_hub_to_dr(four, tmp_path, unique):
    """a -> hub with prefixes (hub and spoke), hub -> b with identity names (b is the hub's DR site)."""
    a, hub, dr = four.bootstrap("a"), four.bootstrap("hub"), four.bootstrap("b")
    topic = f"chain-{unique}.events"
    sent = _produce(a, topic, "a", 30)
    config = _config(
        tmp_path,
        four,
        unique,
        _flow(f"a-to-hub-{unique}", "a", "hub", f"chain-{unique}\\..*")
        + _flow(f"hub-to-dr-{unique}", "hub", "b", f"a\\.chain-{unique}\\..*", "identity"),
    )
    # The hub's copy appears during the first round; the DR flow may have counted itself
    # caught up before it existed, so a second round carries it on (and must add nothing
    # to what the first delivered).
    _round(config)
    _round(config)
    assert _values(hub, f"a.{topic}") == sent
    assert _mine(dr, unique) == {f"a.{topic}": PARTITIONS}
    assert _values(dr, f"a.{topic}") == sent
    # Each hop leaves its provenance: the DR copy names the spoke and the hub.
    first = read_topic(dr, f"a.{topic}", PARTITIONS)[0][0]
    origins = [v.decode().split("/")[:2] for k, v in first.headers if k == "mirror.origin"]
    assert origins == [["a", topic], ["hub", f"a.{topic}"]]
    # The identity hop carries the hub's canary topic under its own name; the spoke's copy
    # on the hub (`a.canary-…`) is not the DR flow's to take.
    assert _canaries(hub, unique) == {f"canary-{unique}", f"a.canary-{unique}"}
    assert _canaries(dr, unique) == {f"canary-{unique}"}
    _round(config)
    assert _values(dr, f"a.{topic}") == sent
