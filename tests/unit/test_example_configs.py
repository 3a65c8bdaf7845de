"""Every topology in configs/ loads, validates offline, keeps secrets out, and cannot loop.

Topologies are found by shape (a mapping with `clusters` and `flows`), so a new example
is checked the day it is added and non-topology files such as alerts.yaml are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mirror import config as cfg
from mirror.cli import main
from mirror.domain.naming import RenamePolicy, would_loop
from mirror.domain.topics import match_topics
from mirror.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
_REQUIRED_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # no `:-default`: must be set
_SECRET_KEY = re.compile(r"password|secret|token|(^|\.)key$|jaas", re.IGNORECASE)


def _is_topology(path: Path) -> bool:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    return isinstance(doc, dict) and "clusters" in doc and "flows" in doc


TOPOLOGIES = sorted(p for p in CONFIGS.glob("*.yaml") if _is_topology(p))
EXAMPLES = {"active-standby.yaml", "active-active.yaml", "hub-and-spoke.yaml"}  # README's "Topologies"


def _required(path: Path) -> list[str]:
    """The variables a file requires (secrets have no default on purpose)."""
    return _REQUIRED_VAR.findall(path.read_text(encoding="utf-8"))


def _load(name: str) -> cfg.Config:
    """The file as `validate --offline` sees it on a machine with no secrets exported."""
    return cfg.load(CONFIGS / name, env={}, offline=True)


def test_the_documented_examples_exist_and_alerts_is_not_a_topology():
    names = {p.name for p in TOPOLOGIES}
    assert EXAMPLES | {"dev.yaml"} <= names
    assert "alerts.yaml" not in names


@pytest.mark.parametrize("path", TOPOLOGIES, ids=lambda p: p.name)
def test_loads_and_validates_offline(path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """With no secret exported, as on a laptop or in CI: the file is checked, the unset
    variables are warnings."""
    for name in _required(path):
        monkeypatch.delenv(name, raising=False)
    config = cfg.load(path, env={}, offline=True)
    assert config.flows
    assert main(["validate", "--offline", "-c", str(path)]) == 0
    captured = capsys.readouterr()
    assert f"valid ({len(config.clusters)} clusters, {len(config.flows)} flows)" in captured.out
    for name in _required(path):
        assert name in captured.err


@pytest.mark.parametrize("path", [p for p in TOPOLOGIES if p.name != "dev.yaml"], ids=lambda p: p.name)
def test_secrets_only_through_environment_variables(path: Path):
    """Every secret-looking setting is exactly `${VAR}`: no literal, and no default to fall back on."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    found = []

    def walk(node: object, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, str(k))
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif _SECRET_KEY.search(key):
            found.append((key, node))
            assert isinstance(node, str) and _REQUIRED_VAR.fullmatch(node), (
                f"{path.name}: {key} must be a bare ${{VAR}}, got {node!r}"
            )

    walk(raw)
    if path.name in EXAMPLES:
        assert found, f"{path.name}: a production example should show where its credentials come from"


# Only the files that require a variable: the others have no secret to leave out.
@pytest.mark.parametrize("path", [p for p in TOPOLOGIES if p.name != "dev.yaml" and _required(p)], ids=lambda p: p.name)
def test_a_missing_secret_is_a_config_error_naming_it(path: Path):
    required = sorted(_required(path))
    name = required[0]
    env = {other: "set" for other in required[1:]}
    with pytest.raises(ConfigError, match=name):
        cfg.load(path, env=env)


def _samples(pattern: str) -> list[str]:
    """A topic name a pattern selects, when one is easy to make up (`supply\\..*` -> `supply.x`)."""
    guess = pattern.replace("\\.", "\0").replace(".*", "x").replace("\0", ".")
    return [guess] if re.fullmatch(pattern, guess) else []


@pytest.mark.parametrize("path", TOPOLOGIES, ids=lambda p: p.name)
def test_no_topic_ever_returns_to_a_cluster_it_left(path: Path):
    """Run the topology to a fixed point on made-up topics and follow every copy's route.

    Each cluster starts with the canary topic and a name for each include pattern of the
    flows leaving it; then every flow copies what it selects, again and again. No copy
    may land on a cluster it already passed through, and the process must stop (a loop
    that renamed its way around forever would not).
    """
    config = cfg.load(path, env={}, offline=True)
    copies: set[tuple[str, str, tuple[str, ...]]] = set()  # (cluster, topic, clusters it passed)
    for flow in config.flows:
        for pattern in flow.topics.include:
            for name in _samples(pattern):
                copies.add((flow.source, name, (flow.source,)))
        copies.add((flow.source, config.canary.topic, (flow.source,)))
    for _round in range(len(config.clusters) + 2):
        new = set()
        for flow in config.flows:
            here = {topic: route for cluster, topic, route in copies if cluster == flow.source}
            for m in match_topics(config, flow, {t: 1 for t in here}):
                route = here[m.source]
                assert flow.target not in route, (
                    f"{path.name}: {m.source} would go {' -> '.join(route)} -> {flow.target}"
                )
                new.add((flow.target, m.target, (*route, flow.target)))
        if new <= copies:
            break
        copies |= new
    else:
        pytest.fail(f"{path.name}: topics keep being copied after {len(config.clusters) + 2} rounds")


# ---------------------------------------------------------------------------- per topology


def test_active_standby_identity_names_and_no_way_back():
    config = _load("active-standby.yaml")
    (flow,) = config.flows
    assert (flow.source, flow.target, flow.rename) == ("nyc", "sf", RenamePolicy.IDENTITY)
    assert match_topics(config, flow, {"orders": 3, "test.x": 1})[0].target == "orders"
    # The offset map must be readable from the DR site when the primary is gone.
    assert config.offset_store.kind == "cassandra" and config.offset_store.local_dc == "sf"
    # Adding the reversed flow next to it (instead of replacing it, as failback says) is a loop.
    text = (CONFIGS / "active-standby.yaml").read_text(encoding="utf-8")
    reversed_flow = "\n  - {name: sf-to-nyc, source: sf, target: nyc, rename: identity, topics: {include: ['.*']}}\n"
    doubled = text.replace("\noffset_store:", reversed_flow + "\noffset_store:", 1)
    with pytest.raises(ConfigError, match="loop"):
        cfg.parse(doubled, env={}, offline=True)


def test_active_active_prefixes_stop_the_round_trip():
    config = _load("active-active.yaml")
    clusters = list(config.clusters)
    flows = {f.name: f for f in config.flows}
    assert {(f.source, f.target) for f in flows.values()} == {("nyc", "sf"), ("sf", "nyc")}
    assert all(f.rename is RenamePolicy.PREFIX for f in flows.values())

    # nyc's orders arrive in sf as nyc.orders and must never be mirrored back to nyc.
    assert would_loop("nyc.orders", "sf", "nyc", clusters)
    assert not would_loop("orders", "sf", "nyc", clusters)
    on_sf = {"orders": 3, "nyc.orders": 3, "nyc.mirror-canary": 1, "mirror-canary": 1}
    back = {m.source: m.target for m in match_topics(config, flows["sf-to-nyc"], on_sf)}
    assert back == {"orders": "sf.orders", "mirror-canary": "sf.mirror-canary"}
    # Even a catch-all include would not send nyc's data home.
    assert all(would_loop(t, "sf", "nyc", clusters) for t in on_sf if t.startswith("nyc."))

    # The same topology with identity names on both sides is rejected as a loop.
    text = (CONFIGS / "active-active.yaml").read_text(encoding="utf-8").replace("rename: prefix", "rename: identity")
    with pytest.raises(ConfigError, match="loop"):
        cfg.parse(text, env={}, offline=True)


def test_hub_and_spoke_keeps_regions_apart_and_fan_out_does_not_echo():
    config = _load("hub-and-spoke.yaml")
    clusters = list(config.clusters)
    into_hub = [f for f in config.flows if f.target == "hub"]
    assert {f.source for f in into_hub} == {"nyc", "sf", "london"}
    assert all(f.rename is RenamePolicy.PREFIX for f in into_hub)
    # Each region's `prices` gets its own topic on the hub: no two sources share a partition.
    targets = [m.target for f in into_hub for m in match_topics(config, f, {"prices": 6})]
    assert sorted(targets) == ["london.prices", "nyc.prices", "sf.prices"]

    (fan_out,) = [f for f in config.flows if f.source == "hub"]
    on_hub = {"nyc.prices": 6, "sf.prices": 6, "reference.fx": 1, "mirror-canary": 1}
    out = {m.source: m.target for m in match_topics(config, fan_out, on_hub)}
    assert out == {"reference.fx": "hub.reference.fx", "mirror-canary": "hub.mirror-canary"}
    assert would_loop("nyc.prices", "hub", "nyc", clusters)
    # What the hub sent to nyc is never mirrored back to the hub.
    nyc_to_hub = next(f for f in into_hub if f.source == "nyc")
    assert would_loop("hub.reference.fx", "nyc", "hub", clusters)
    assert match_topics(config, nyc_to_hub, {"hub.reference.fx": 1, "hub.mirror-canary": 1}) == []
