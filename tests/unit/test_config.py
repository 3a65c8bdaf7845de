from __future__ import annotations

import pytest

from mirror import config
from mirror.domain.naming import RenamePolicy
from mirror.errors import ConfigError

BASE = """\
clusters:
  nyc:
    bootstrap: ${NYC_BOOTSTRAP:-127.0.0.1:19092}
    client: {security.protocol: SASL_SSL, sasl.password: "${NYC_PASSWORD}"}
  sf: {bootstrap: "127.0.0.1:19192"}
flows:
  - name: nyc-to-sf
    source: nyc
    target: sf
    topics: {include: ["orders.*"], exclude: ["orders\\\\.tmp"]}
    groups: ["billing.*"]
"""


def test_interpolation_defaults_and_values():
    c = config.parse(BASE, env={"NYC_PASSWORD": "s3cret"})
    assert c.clusters["nyc"].bootstrap == "127.0.0.1:19092"
    assert c.clusters["nyc"].client["sasl.password"] == "s3cret"
    c = config.parse(BASE, env={"NYC_PASSWORD": "x", "NYC_BOOTSTRAP": "10.0.0.1:9092"})
    assert c.clusters["nyc"].bootstrap == "10.0.0.1:9092"


def test_defaults_are_the_safe_ones():
    c = config.parse(BASE, env={"NYC_PASSWORD": "x"})
    flow = c.flows[0]
    assert flow.rename is RenamePolicy.PREFIX
    assert flow.provenance_headers is True
    assert flow.sync_group_offsets is False
    assert flow.group_id == "mirror.nyc-to-sf"
    assert flow.refresh_interval <= 30
    assert c.offset_store.kind == "sqlite"


def test_durations():
    assert config.parse_duration("500ms") == 0.5
    assert config.parse_duration("5m") == 300
    assert config.parse_duration(3) == 3.0
    for bad in ("0s", "-1s", "soon", True):
        with pytest.raises(ValueError):
            config.parse_duration(bad)


def test_redact_hides_secrets_only():
    r = config.redact({"sasl.password": "p", "ssl.key.password": "k", "sasl.username": "u", "bootstrap.servers": "b"})
    assert r == {"sasl.password": "***", "ssl.key.password": "***", "sasl.username": "u", "bootstrap.servers": "b"}


def test_unknown_flow_and_cluster_lookups_name_the_flag():
    c = config.parse(BASE, env={"NYC_PASSWORD": "x"})
    with pytest.raises(ConfigError, match="--flow: no flow named 'nope'"):
        c.flow("nope")
    with pytest.raises(ConfigError, match="--cluster: no cluster named 'la'"):
        c.cluster("la")


def test_active_active_with_prefix_is_allowed():
    text = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: a, source: nyc, target: sf, topics: {include: [".*"]}}
  - {name: b, source: sf, target: nyc, topics: {include: [".*"]}}
"""
    assert len(config.parse(text, env={}).flows) == 2


def test_identity_both_ways_loops_the_canary_even_with_disjoint_literals():
    """Every flow mirrors the canary topic: identity both ways would bounce its probes forever."""
    text = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: a, source: nyc, target: sf, rename: identity, topics: {include: ["orders"]}}
  - {name: b, source: sf, target: nyc, rename: identity, topics: {include: ["users"]}}
"""
    with pytest.raises(ConfigError, match=r"flows a -> b form a loop .*canary topic 'mirror-canary'"):
        config.parse(text, env={})
    # One direction prefixed: the canary comes back as nyc.mirror-canary once and stops there.
    assert (
        len(
            config.parse(
                text.replace(
                    'rename: identity, topics: {include: ["users"]}', 'rename: prefix, topics: {include: ["users"]}'
                ),
                env={},
            ).flows
        )
        == 2
    )


def test_chain_spoke_hub_dr_is_allowed():
    text = """\
clusters: {spoke: {bootstrap: "a:1"}, hub: {bootstrap: "b:1"}, dr: {bootstrap: "c:1"}}
flows:
  - {name: spoke-to-hub, source: spoke, target: hub, rename: prefix, topics: {include: [".*"]}}
  - {name: hub-to-dr, source: hub, target: dr, rename: identity, topics: {include: [".*"]}}
"""
    assert len(config.parse(text, env={}).flows) == 2


RELAY = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}, dr: {bootstrap: "c:1"}}
flows:
  - {name: nyc-to-sf, source: nyc, target: sf, topics: {include: [".*"]}}
  - {name: sf-to-nyc, source: sf, target: nyc, topics: {include: [".*"]}}
  - {name: nyc-to-dr, source: nyc, target: dr, rename: identity, topics: {include: [INCLUDE]}}
  - {name: sf-to-dr, source: sf, target: dr, rename: prefix, topics: {include: [".*"]}}
"""


def test_identity_relay_of_prefixed_copies_into_a_target_fed_by_their_origin_is_rejected():
    """nyc holds sf.orders (from sf-to-nyc); nyc-to-dr copies it to dr as sf.orders, and so does sf-to-dr."""
    with pytest.raises(ConfigError, match=r"flows nyc-to-dr and sf-to-dr could both write sf\.\* topics into dr"):
        config.parse(RELAY.replace("INCLUDE", '".*"'), env={})
    # Patterns that cannot select a sf.* name relay nothing of sf's.
    assert len(config.parse(RELAY.replace("INCLUDE", '"orders", "users"'), env={}).flows) == 4


def test_relative_sqlite_path_is_taken_from_the_config_file(tmp_path, monkeypatch):
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "m.yaml"
    path.write_text(
        'clusters: {a: {bootstrap: "x:1"}, b: {bootstrap: "y:1"}}\nflows: '
        "[{name: f, source: a, target: b, topics: {include: [t]}}]\n"
    )
    monkeypatch.chdir(tmp_path)
    assert config.load(path).offset_store.path == str(tmp_path / "etc" / ".mirror" / "offsets.db")


def test_relative_sqlite_path_is_taken_from_the_state_dir_when_one_is_set(tmp_path, monkeypatch):
    """The images mount the config read-only and keep state in MIRROR_STATE_DIR (/var/lib/mirror):
    a relative path next to the config file could never be written there."""
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "m.yaml"
    path.write_text(
        'clusters: {a: {bootstrap: "x:1"}, b: {bootstrap: "y:1"}}\nflows: '
        "[{name: f, source: a, target: b, topics: {include: [t]}}]\n"
    )
    monkeypatch.chdir(tmp_path)
    env = {"MIRROR_STATE_DIR": "state"}
    assert config.load(path, env=env).offset_store.path == str(tmp_path / "state" / ".mirror" / "offsets.db")
    path.write_text(path.read_text() + "offset_store: {kind: sqlite, path: /data/offsets.db}\n")
    assert config.load(path, env=env).offset_store.path == "/data/offsets.db"


def test_exactly_once_is_off_by_default_and_names_its_progress_group():
    cfg = config.parse(
        "clusters: {a: {bootstrap: '127.0.0.1:1'}, b: {bootstrap: '127.0.0.1:2'}}\n"
        "flows: [{name: f, source: a, target: b, topics: {include: [x]}},"
        " {name: g, source: b, target: a, topics: {include: [y]}, exactly_once: true}]\n",
        env={},
    )
    assert not cfg.flow("f").exactly_once
    assert cfg.flow("g").exactly_once
    assert cfg.flow("g").progress_group == "mirror-eos.g"
