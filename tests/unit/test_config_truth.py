"""The config loader tells the whole truth: every problem at once, a hint for a typo, a
warning for a literal secret, refusals for duplicated keys and over-long topic names."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror import config as cfg
from mirror.cli import main
from mirror.errors import ConfigError, ConfigProblems

CLUSTERS = """\
clusters:
  nyc: {bootstrap: "127.0.0.1:19092"}
  sf: {bootstrap: "127.0.0.1:19192"}
"""
FLOW = """\
flows:
  - name: nyc-to-sf
    source: nyc
    target: sf
    topics: {include: ["orders.*"]}
"""


def _problems(text: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        cfg.parse(text, env=env or {})
    err = info.value
    return [str(p) for p in err.problems] if isinstance(err, ConfigProblems) else [str(err)]


# ---------------------------------------------------------------------------- a typo gets a suggestion


def test_an_unknown_key_suggests_the_closest_known_key_at_its_path_and_the_reference() -> None:
    (problem,) = _problems(CLUSTERS + FLOW + "    sync_group_offset: true\n")
    assert problem.startswith("flows[0].sync_group_offset: unknown key")
    assert "did you mean `sync_group_offsets`?" in problem
    assert "docs/config.md" in problem


def test_suggestions_come_from_the_keys_of_the_mapping_the_typo_is_in() -> None:
    text = CLUSTERS.replace('{bootstrap: "127.0.0.1:19092"}', '{bootstrap: "127.0.0.1:19092", timout: 5s}') + FLOW
    (problem,) = _problems(text + "canary: {intervall: 5s}\n")[:1]
    assert "clusters.nyc.timout: unknown key" in problem and "did you mean `timeout`?" in problem
    problems = _problems(text + "canary: {intervall: 5s}\n")
    assert any("canary.intervall" in p and "did you mean `interval`?" in p for p in problems)


def test_an_unknown_key_far_from_every_known_one_gets_only_the_pointer() -> None:
    (problem,) = _problems(CLUSTERS + FLOW + "colour: blue\n")
    assert "did you mean" not in problem
    assert "docs/config.md" in problem


# ---------------------------------------------------------------------------- every problem at once


def test_a_type_error_does_not_hide_the_refused_client_settings_beside_it() -> None:
    text = (
        CLUSTERS
        + FLOW
        + "    exactly_once: maybe\n    producer: {acks: 1}\n    consumer: {isolation.level: read_uncommitted}\n"
    )
    problems = _problems(text)
    assert len(problems) == 3, problems
    assert any(p.startswith("flows[0].exactly_once: Input should be a valid boolean") for p in problems)
    assert any(p.startswith("flows[0].producer.acks: '1' refused") for p in problems)
    assert any(p.startswith("flows[0].consumer.isolation.level: 'read_uncommitted' refused") for p in problems)


def test_a_flow_with_a_bad_value_still_takes_part_in_the_cross_checks() -> None:
    text = CLUSTERS + FLOW.replace("target: sf", "target: la") + "    refresh_interval: soon\n"
    problems = _problems(text)
    assert any(p.startswith("flows[0].refresh_interval:") for p in problems)
    assert any(p.startswith("flows[0].target: unknown cluster 'la'") for p in problems)


def test_a_cluster_with_a_bad_timeout_still_has_its_client_settings_checked() -> None:
    text = (
        "clusters:\n  nyc: {bootstrap: '127.0.0.1:1', timeout: never, client: {enable.idempotence: false}}\n"
        "  sf: {bootstrap: '127.0.0.1:2'}\n" + FLOW
    )
    problems = _problems(text)
    assert any(p.startswith("clusters.nyc.timeout:") for p in problems)
    assert any(p.startswith("clusters.nyc.client.enable.idempotence:") for p in problems)


# ---------------------------------------------------------------------------- duplicated keys


def test_a_duplicated_cluster_is_refused_naming_both_lines() -> None:
    text = CLUSTERS + '  nyc: {bootstrap: "10.0.0.1:9092"}\n' + FLOW
    (problem,) = _problems(text)
    assert "duplicate key 'nyc'" in problem
    assert "line 2" in problem and "line 4" in problem


def test_a_duplicated_key_deep_in_a_flow_is_refused_too() -> None:
    text = CLUSTERS + FLOW + "    rename: identity\n    rename: prefix\n"
    (problem,) = _problems(text)
    assert "duplicate key 'rename'" in problem and "line 9" in problem and "line 10" in problem


# ---------------------------------------------------------------------------- Kafka's topic name limit

ALIAS = "a" * 230


def _long_alias(include: str) -> str:
    return (
        f'clusters:\n  {ALIAS}: {{bootstrap: "127.0.0.1:19092"}}\n  sf: {{bootstrap: "127.0.0.1:19192"}}\n'
        f"flows:\n  - {{name: long, source: {ALIAS}, target: sf, rename: prefix, topics: {{include: [{include}]}}}}\n"
    )


def test_a_literal_topic_the_prefix_would_make_too_long_is_refused_naming_it_and_the_limit() -> None:
    (problem,) = _problems(_long_alias("customer-events-v2-eu"))
    assert problem.startswith("flows[0].topics.include[0]:")
    assert f"{ALIAS}.customer-events-v2-eu" in problem
    assert "249" in problem


def test_a_regex_include_is_left_to_the_online_check() -> None:
    config = cfg.parse(_long_alias("'customer-.*'"), env={})
    assert config.flows[0].source == ALIAS


def test_a_prefixed_canary_topic_too_long_for_kafka_is_refused() -> None:
    alias = "a" * 240
    text = _long_alias("x").replace(ALIAS, alias)
    problems = _problems(text)
    assert any("canary" in p and "249" in p for p in problems), problems


def test_too_long_names_are_found_among_matched_topics() -> None:
    from mirror.domain.naming import MAX_TOPIC_NAME, too_long
    from mirror.domain.topics import TopicMapping

    ok = TopicMapping("a", "x" * MAX_TOPIC_NAME, 1)
    long = TopicMapping("b", "x" * (MAX_TOPIC_NAME + 1), 1)
    assert too_long([ok, long]) == [long]


# ---------------------------------------------------------------------------- secrets

SECRET_CLUSTERS = """\
clusters:
  nyc:
    bootstrap: "127.0.0.1:19092"
    client: {security.protocol: SASL_SSL, sasl.username: mirror, sasl.password: hunter2, ssl.key.password: k3y}
  sf: {bootstrap: "127.0.0.1:19192", client: {sasl.oauthbearer.client.secret: "${SF_SECRET}"}}
"""


def test_a_literal_secret_is_a_warning_naming_the_key_not_its_value() -> None:
    warnings: list[cfg.ConfigWarning] = []
    cfg.parse(SECRET_CLUSTERS + FLOW, env={"SF_SECRET": "x"}, warnings=warnings)
    text = [str(w) for w in warnings]
    assert any(w.startswith("clusters.nyc.client.sasl.password:") for w in text), text
    assert any(w.startswith("clusters.nyc.client.ssl.key.password:") for w in text), text
    assert not any("sasl.username" in w or "clusters.sf" in w for w in text), text
    assert not any("hunter2" in w or "k3y" in w for w in text)


def test_a_literal_secret_in_a_flows_client_settings_is_a_warning_too() -> None:
    warnings: list[cfg.ConfigWarning] = []
    cfg.parse(CLUSTERS + FLOW + "    producer: {sasl.password: hunter2}\n", env={}, warnings=warnings)
    assert [w.key for w in warnings] == ["flows[0].producer.sasl.password"]


def test_a_file_reference_reads_the_file_and_strips_one_newline(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n\n")
    text = CLUSTERS.replace(
        '{bootstrap: "127.0.0.1:19092"}',
        f'{{bootstrap: "127.0.0.1:19092", client: {{sasl.password: "${{file:{secret}}}"}}}}',
    )
    warnings: list[cfg.ConfigWarning] = []
    config = cfg.parse(text + FLOW, env={}, warnings=warnings)
    assert config.clusters["nyc"].client["sasl.password"] == "s3cret\n"
    assert warnings == []


def test_a_missing_file_reference_is_a_config_error_naming_the_key_and_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    text = CLUSTERS.replace(
        '{bootstrap: "127.0.0.1:19092"}',
        f'{{bootstrap: "127.0.0.1:19092", client: {{sasl.password: "${{file:{missing}}}"}}}}',
    )
    (problem,) = _problems(text + FLOW)
    assert problem.startswith("clusters.nyc.client.sasl.password:")
    assert str(missing) in problem


# ---------------------------------------------------------------------------- offline: unset variables warn


def test_offline_an_unset_variable_is_a_warning_and_online_an_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        CLUSTERS.replace(
            '{bootstrap: "127.0.0.1:19092"}',
            '{bootstrap: "127.0.0.1:19092", client: {sasl.password: "${MIRROR_TEST_UNSET_PW}"}}',
        )
        + FLOW
    )
    assert main(["validate", "--offline", "-c", str(path)]) == 0
    captured = capsys.readouterr()
    assert "MIRROR_TEST_UNSET_PW" in captured.err and "warning" in captured.err.lower()
    with pytest.raises(ConfigError, match="MIRROR_TEST_UNSET_PW"):
        cfg.load(path, env={})


def test_the_cli_prints_a_literal_secret_warning_on_validate(tmp_path: Path, capsys) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(SECRET_CLUSTERS + FLOW)
    assert main(["validate", "--offline", "-c", str(path)]) == 0
    err = capsys.readouterr().err
    assert "clusters.nyc.client.sasl.password" in err and "hunter2" not in err
