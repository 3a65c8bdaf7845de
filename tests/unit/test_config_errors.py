"""Every broken config gets exit 2 and a one-line message naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.cli import main

GOOD_CLUSTERS = """\
clusters:
  nyc: {bootstrap: "127.0.0.1:19092"}
  sf: {bootstrap: "127.0.0.1:19192"}
"""
GOOD_FLOW = """\
flows:
  - name: nyc-to-sf
    source: nyc
    target: sf
    topics: {include: ["orders.*"]}
"""

CASES = {
    "yaml_syntax": ("clusters: [nyc\n", "YAML syntax error at line"),
    "not_a_mapping": ("- just\n- a list\n", "expected a mapping"),
    "unknown_top_level_key": (GOOD_CLUSTERS + GOOD_FLOW + "colour: blue\n", "colour: unknown key"),
    "unknown_flow_key": (GOOD_CLUSTERS + GOOD_FLOW.replace("    target: sf\n", "    target: sf\n    tragets: x\n"), "flows[0].tragets: unknown key"),
    "unknown_source_cluster": (GOOD_CLUSTERS + GOOD_FLOW.replace("source: nyc", "source: la"), "flows[0].source: unknown cluster 'la'"),
    "unknown_target_cluster": (GOOD_CLUSTERS + GOOD_FLOW.replace("target: sf", "target: tokyo"), "flows[0].target: unknown cluster 'tokyo'"),
    "source_equals_target": (GOOD_CLUSTERS + GOOD_FLOW.replace("target: sf", "target: nyc"), "flows[0].target: source and target are both 'nyc'"),
    "invalid_include_regex": (GOOD_CLUSTERS + GOOD_FLOW.replace('["orders.*"]', '["orders.*", "(unclosed"]'), "flows[0].topics.include[1]: invalid regex '(unclosed'"),
    "invalid_exclude_regex": (GOOD_CLUSTERS + GOOD_FLOW.replace('{include: ["orders.*"]}', '{include: [".*"], exclude: ["*bad"]}'), "flows[0].topics.exclude[0]: invalid regex"),
    "duplicate_flow_names": (GOOD_CLUSTERS + GOOD_FLOW + "  - {name: nyc-to-sf, source: sf, target: nyc, topics: {include: [x]}}\n", "flows[1].name: duplicate flow name 'nyc-to-sf'"),
    "missing_bootstrap": ("clusters:\n  nyc: {client: {}}\n  sf: {bootstrap: '127.0.0.1:1'}\n" + GOOD_FLOW, "clusters.nyc.bootstrap: required key is missing"),
    "bad_bootstrap": ("clusters:\n  nyc: {bootstrap: 'localhost'}\n  sf: {bootstrap: '127.0.0.1:1'}\n" + GOOD_FLOW, "clusters.nyc.bootstrap: 'localhost' is not a host:port list"),
    "unset_env_var": ("clusters:\n  nyc: {bootstrap: '${MIRROR_TEST_UNSET_VAR}'}\n  sf: {bootstrap: '127.0.0.1:1'}\n" + GOOD_FLOW, "clusters.nyc.bootstrap: environment variable MIRROR_TEST_UNSET_VAR is not set"),
    "wrong_type_port": (GOOD_CLUSTERS + GOOD_FLOW + "metrics: {port: lots}\n", "metrics.port: Input should be a valid integer"),
    "wrong_type_include": (GOOD_CLUSTERS + GOOD_FLOW.replace('{include: ["orders.*"]}', "{include: orders}"), "flows[0].topics.include: Input should be a valid list"),
    "empty_include": (GOOD_CLUSTERS + GOOD_FLOW.replace('["orders.*"]', "[]"), "flows[0].topics.include: List should have at least 1 item"),
    "bad_duration": (GOOD_CLUSTERS + GOOD_FLOW + "canary: {interval: soon}\n", "canary.interval: 'soon' is not a duration"),
    "bad_rename": (GOOD_CLUSTERS + GOOD_FLOW.replace("target: sf", "target: sf\n    rename: suffix"), "flows[0].rename: Input should be 'prefix' or 'identity'"),
    "unknown_store_kind": (GOOD_CLUSTERS + GOOD_FLOW + "offset_store: {kind: redis}\n", "offset_store: unknown kind"),
    "cassandra_without_contact_points": (GOOD_CLUSTERS + GOOD_FLOW + "offset_store: {kind: cassandra}\n", "offset_store.contact_points: required key is missing"),
    "no_flows": (GOOD_CLUSTERS, "flows: required key is missing"),
    "cluster_name_with_dot": ("clusters:\n  ny.c: {bootstrap: '127.0.0.1:1'}\n  sf: {bootstrap: '127.0.0.1:2'}\n" + GOOD_FLOW, "clusters.ny.c"),
    "identity_loop": (
        GOOD_CLUSTERS
        + "flows:\n"
        + "  - {name: a, source: nyc, target: sf, rename: identity, topics: {include: ['orders.*']}}\n"
        + "  - {name: b, source: sf, target: nyc, rename: identity, topics: {include: ['.*']}}\n",
        "flows: flows a -> b form a loop with rename: identity",
    ),
    "identity_fan_in_collision": (
        "clusters:\n  nyc: {bootstrap: '127.0.0.1:1'}\n  sf: {bootstrap: '127.0.0.1:2'}\n  hub: {bootstrap: '127.0.0.1:3'}\n"
        + "flows:\n"
        + "  - {name: a, source: nyc, target: hub, rename: identity, topics: {include: ['prices']}}\n"
        + "  - {name: b, source: sf, target: hub, rename: identity, topics: {include: ['pri.*']}}\n",
        "flows: flows a and b both write topics with their source names into one target cluster",
    ),
    "same_pair_twice": (GOOD_CLUSTERS + GOOD_FLOW + "  - {name: again, source: nyc, target: sf, topics: {include: [x]}}\n", "flows[1]: flow 'again' mirrors nyc -> sf like flow 'nyc-to-sf'"),
    "bool_as_duration": (GOOD_CLUSTERS + GOOD_FLOW + "canary: {max_latency: yes}\n", "canary.max_latency: expected a duration"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_config_exits_2_naming_the_key(case: str, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.delenv("MIRROR_TEST_UNSET_VAR", raising=False)
    text, expected = CASES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    rc = main(["validate", "--offline", "-c", str(path)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("Error: "), err
    assert expected in err, err
    assert len(err.strip().splitlines()) == 1, f"expected one line, got: {err}"
    assert "Traceback" not in err


def test_missing_file_is_a_usage_error(tmp_path: Path, capsys):
    rc = main(["validate", "--offline", "-c", str(tmp_path / "nope.yaml")])
    assert rc == 2
    assert "-c/--config: cannot read" in capsys.readouterr().err


def test_debug_shows_the_traceback(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD_CLUSTERS + GOOD_FLOW.replace("source: nyc", "source: la"))
    from mirror.errors import ConfigError

    with pytest.raises(ConfigError):
        main(["--debug", "validate", "--offline", "-c", str(path)])


def test_good_config_prints_the_offline_plan(tmp_path: Path, capsys):
    path = tmp_path / "good.yaml"
    path.write_text(GOOD_CLUSTERS + GOOD_FLOW)
    assert main(["validate", "--offline", "-c", str(path)]) == 0
    out = capsys.readouterr().out
    assert "flow nyc-to-sf: nyc -> sf (rename: prefix)" in out
