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
    "unknown_flow_key": (
        GOOD_CLUSTERS + GOOD_FLOW.replace("    target: sf\n", "    target: sf\n    tragets: x\n"),
        "flows[0].tragets: unknown key",
    ),
    "unknown_source_cluster": (
        GOOD_CLUSTERS + GOOD_FLOW.replace("source: nyc", "source: la"),
        "flows[0].source: unknown cluster 'la'",
    ),
    "unknown_target_cluster": (
        GOOD_CLUSTERS + GOOD_FLOW.replace("target: sf", "target: tokyo"),
        "flows[0].target: unknown cluster 'tokyo'",
    ),
    "source_equals_target": (
        GOOD_CLUSTERS + GOOD_FLOW.replace("target: sf", "target: nyc"),
        "flows[0].target: source and target are both 'nyc'",
    ),
    "invalid_include_regex": (
        GOOD_CLUSTERS + GOOD_FLOW.replace('["orders.*"]', '["orders.*", "(unclosed"]'),
        "flows[0].topics.include[1]: invalid regex '(unclosed'",
    ),
    "invalid_exclude_regex": (
        GOOD_CLUSTERS + GOOD_FLOW.replace('{include: ["orders.*"]}', '{include: [".*"], exclude: ["*bad"]}'),
        "flows[0].topics.exclude[0]: invalid regex",
    ),
    "duplicate_flow_names": (
        GOOD_CLUSTERS + GOOD_FLOW + "  - {name: nyc-to-sf, source: sf, target: nyc, topics: {include: [x]}}\n",
        "flows[1].name: duplicate flow name 'nyc-to-sf'",
    ),
    "missing_bootstrap": (
        "clusters:\n  nyc: {client: {}}\n  sf: {bootstrap: '127.0.0.1:1'}\n" + GOOD_FLOW,
        "clusters.nyc.bootstrap: required key is missing",
    ),
    "bad_bootstrap": (
        "clusters:\n  nyc: {bootstrap: 'localhost'}\n  sf: {bootstrap: '127.0.0.1:1'}\n" + GOOD_FLOW,
        "clusters.nyc.bootstrap: 'localhost' is not a host:port list",
    ),
    "unset_env_var": (
        "clusters:\n  nyc: {bootstrap: '${MIRROR_TEST_UNSET_VAR}'}\n  sf: {bootstrap: '127.0.0.1:1'}\n" + GOOD_FLOW,
        "clusters.nyc.bootstrap: environment variable MIRROR_TEST_UNSET_VAR is not set",
    ),
    "wrong_type_port": (
        GOOD_CLUSTERS + GOOD_FLOW + "metrics: {port: lots}\n",
        "metrics.port: Input should be a valid integer",
    ),
    "wrong_type_include": (
        GOOD_CLUSTERS + GOOD_FLOW.replace('{include: ["orders.*"]}', "{include: orders}"),
        "flows[0].topics.include: Input should be a valid list",
    ),
    "empty_include": (
        GOOD_CLUSTERS + GOOD_FLOW.replace('["orders.*"]', "[]"),
        "flows[0].topics.include: List should have at least 1 item",
    ),
    "bad_duration": (
        GOOD_CLUSTERS + GOOD_FLOW + "canary: {interval: soon}\n",
        "canary.interval: 'soon' is not a duration",
    ),
    "bad_rename": (
        GOOD_CLUSTERS + GOOD_FLOW.replace("target: sf", "target: sf\n    rename: suffix"),
        "flows[0].rename: Input should be 'prefix' or 'identity'",
    ),
    "unknown_store_kind": (GOOD_CLUSTERS + GOOD_FLOW + "offset_store: {kind: redis}\n", "offset_store: unknown kind"),
    "cassandra_without_contact_points": (
        GOOD_CLUSTERS + GOOD_FLOW + "offset_store: {kind: cassandra}\n",
        "offset_store.contact_points: required key is missing",
    ),
    "no_flows": (GOOD_CLUSTERS, "flows: required key is missing"),
    "cluster_name_with_dot": (
        "clusters:\n  ny.c: {bootstrap: '127.0.0.1:1'}\n  sf: {bootstrap: '127.0.0.1:2'}\n"
        + GOOD_FLOW.replace("source: nyc", "source: ny.c"),
        "clusters.ny.c: 'ny.c' is not a valid name",
    ),
    "identity_loop": (
        GOOD_CLUSTERS
        + "flows:\n"
        + "  - {name: a, source: nyc, target: sf, rename: identity, topics: {include: ['orders.*']}}\n"
        + "  - {name: b, source: sf, target: nyc, rename: identity, topics: {include: ['.*']}}\n",
        "flows: flows a -> b form a loop with rename: identity",
    ),
    "identity_fan_in_collision": (
        "clusters:\n  nyc: {bootstrap: '127.0.0.1:1'}\n  sf: {bootstrap: '127.0.0.1:2'}\n  hub: {bootstrap: "
        "'127.0.0.1:3'}\n"
        + "flows:\n"
        + "  - {name: a, source: nyc, target: hub, rename: identity, topics: {include: ['prices']}}\n"
        + "  - {name: b, source: sf, target: hub, rename: identity, topics: {include: ['pri.*']}}\n",
        "flows: flows a and b both write topics with their source names into one target cluster",
    ),
    "identity_loop_through_the_canary": (
        GOOD_CLUSTERS
        + "flows:\n"
        + "  - {name: a, source: nyc, target: sf, rename: identity, topics: {include: ['orders']}}\n"
        + "  - {name: b, source: sf, target: nyc, rename: identity, topics: {include: ['users']}}\n",
        "flows: flows a -> b form a loop with rename: identity; a record would be mirrored back to where it came from "
        "(the canary topic 'mirror-canary'",
    ),
    "identity_relay_collision": (
        "clusters:\n  nyc: {bootstrap: '127.0.0.1:1'}\n  sf: {bootstrap: '127.0.0.1:2'}\n  dr: {bootstrap: "
        "'127.0.0.1:3'}\n"
        + "flows:\n"
        + "  - {name: nyc-to-sf, source: nyc, target: sf, topics: {include: ['.*']}}\n"
        + "  - {name: sf-to-nyc, source: sf, target: nyc, topics: {include: ['.*']}}\n"
        + "  - {name: nyc-to-dr, source: nyc, target: dr, rename: identity, topics: {include: ['.*']}}\n"
        + "  - {name: sf-to-dr, source: sf, target: dr, topics: {include: ['.*']}}\n",
        "flows: flows nyc-to-dr and sf-to-dr could both write sf.* topics into dr",
    ),
    "same_pair_twice": (
        GOOD_CLUSTERS + GOOD_FLOW + "  - {name: again, source: nyc, target: sf, topics: {include: [x]}}\n",
        "flows[1]: flow 'again' mirrors nyc -> sf like flow 'nyc-to-sf'",
    ),
    "exactly_once_commit_interval_too_long": (
        GOOD_CLUSTERS + GOOD_FLOW + "    exactly_once: true\n    commit_interval: 30s\n",
        "flows[0].commit_interval: refused: with exactly_once a transaction stays open for commit_interval",
    ),
    "exactly_once_transaction_timeout_too_short": (
        GOOD_CLUSTERS + GOOD_FLOW + "    exactly_once: true\n    producer: {transaction.timeout.ms: 2000}\n",
        "flows[0].producer.transaction.timeout.ms: refused: with exactly_once",
    ),
    "exactly_once_transaction_timeout_above_broker_max": (
        GOOD_CLUSTERS + GOOD_FLOW + "    exactly_once: true\n    producer: {transaction.timeout.ms: 3600000}\n",
        "flows[0].producer.transaction.timeout.ms: '3600000' refused",
    ),
    "transaction_timeout_without_exactly_once": (
        GOOD_CLUSTERS + GOOD_FLOW + "    producer: {transaction.timeout.ms: 120000}\n",
        "flows[0].producer.transaction.timeout.ms: refused: the producer is transactional only with exactly_once",
    ),
    "exactly_once_own_transactional_id": (
        GOOD_CLUSTERS + GOOD_FLOW + "    exactly_once: true\n    producer: {transactional.id: mine}\n",
        "flows[0].producer.transactional.id: refused: transactional.id cannot be set here",
    ),
    "bool_as_duration": (
        GOOD_CLUSTERS + GOOD_FLOW + "canary: {max_latency: yes}\n",
        "canary.max_latency: expected a duration",
    ),
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


# ---------------------------------------------------------------------------- client settings the guarantees rest on


def _flow_with(section: str, key: str, value: str) -> str:
    return GOOD_CLUSTERS + GOOD_FLOW + f"    {section}: {{{key}: {value}}}\n"


GUARANTEE_CASES = {
    # (section, key, YAML value): the refused setting's reason, as printed
    "acks": ("producer", "acks", "1", "flows[0].producer.acks: '1' refused: acks must be all"),
    "acks_zero": ("producer", "acks", "0", "flows[0].producer.acks: '0' refused: acks must be all"),
    "request_required_acks_alias": (
        "producer",
        "request.required.acks",
        "1",
        "flows[0].producer.request.required.acks: '1' refused: acks (which request.required.acks sets) must be all",
    ),
    "topic_prefixed_acks": (
        "producer",
        "topic.acks",
        "1",
        "flows[0].producer.topic.acks: '1' refused: acks (which topic.acks sets)",
    ),
    "idempotence_off": (
        "producer",
        "enable.idempotence",
        "false",
        "flows[0].producer.enable.idempotence: 'false' refused: enable.idempotence must stay true",
    ),
    "gapless_off": (
        "producer",
        "enable.gapless.guarantee",
        "F",
        "flows[0].producer.enable.gapless.guarantee: 'F' refused: enable.gapless.guarantee must stay true",
    ),
    "message_timeout": (
        "producer",
        "message.timeout.ms",
        "30000",
        "flows[0].producer.message.timeout.ms: '30000' refused: message.timeout.ms must stay 0",
    ),
    "delivery_timeout_alias": (
        "producer",
        "delivery.timeout.ms",
        "120000",
        "flows[0].producer.delivery.timeout.ms: '120000' refused: message.timeout.ms (which delivery.timeout.ms sets) "
        "must stay 0",
    ),
    "retries_limited": (
        "producer",
        "retries",
        "3",
        "flows[0].producer.retries: '3' refused: retries must stay unlimited",
    ),
    "retries_alias": (
        "producer",
        "message.send.max.retries",
        "0",
        "flows[0].producer.message.send.max.retries: '0' refused: retries (which message.send.max.retries sets)",
    ),
    "max_in_flight_6": (
        "producer",
        "max.in.flight.requests.per.connection",
        "6",
        "flows[0].producer.max.in.flight.requests.per.connection: '6' refused: max.in.flight.requests.per.connection "
        "must be 1-5",
    ),
    "max_in_flight_alias": (
        "producer",
        "max.in.flight",
        "100",
        "flows[0].producer.max.in.flight: '100' refused: max.in.flight.requests.per.connection (which max.in.flight "
        "sets)",
    ),
    "lifo": (
        "producer",
        "queuing.strategy",
        "lifo",
        "flows[0].producer.queuing.strategy: 'lifo' refused: queuing.strategy must stay fifo",
    ),
    "only_error_reports": (
        "producer",
        "delivery.report.only.error",
        "true",
        "flows[0].producer.delivery.report.only.error: 'true' refused",
    ),
    "transactional": (
        "producer",
        "transactional.id",
        "tx-1",
        "flows[0].producer.transactional.id: refused: transactional.id cannot be set here",
    ),
    "producer_auto_create": (
        "producer",
        "allow.auto.create.topics",
        "true",
        "flows[0].producer.allow.auto.create.topics: 'true' refused: allow.auto.create.topics must stay false",
    ),
    "producer_bootstrap": (
        "producer",
        "bootstrap.servers",
        "'10.0.0.1:9092'",
        "flows[0].producer.bootstrap.servers: refused: bootstrap.servers cannot be set here",
    ),
    "read_uncommitted": (
        "consumer",
        "isolation.level",
        "read_uncommitted",
        "flows[0].consumer.isolation.level: 'read_uncommitted' refused: isolation.level must stay read_committed",
    ),
    "auto_commit": (
        "consumer",
        "enable.auto.commit",
        "true",
        "flows[0].consumer.enable.auto.commit: 'true' refused: enable.auto.commit must stay false",
    ),
    "auto_commit_legacy_alias": (
        "consumer",
        "auto.commit.enable",
        "true",
        "flows[0].consumer.auto.commit.enable: 'true' refused: enable.auto.commit (which auto.commit.enable sets)",
    ),
    "auto_offset_store": (
        "consumer",
        "enable.auto.offset.store",
        "1",
        "flows[0].consumer.enable.auto.offset.store: '1' refused: enable.auto.offset.store must stay false",
    ),
    "reset_latest": (
        "consumer",
        "auto.offset.reset",
        "latest",
        "flows[0].consumer.auto.offset.reset: 'latest' refused: auto.offset.reset must stay error or earliest",
    ),
    "group_id": ("consumer", "group.id", "other", "flows[0].consumer.group.id: refused: group.id cannot be set here"),
    "static_member": (
        "consumer",
        "group.instance.id",
        "w1",
        "flows[0].consumer.group.instance.id: refused: group.instance.id is not supported",
    ),
    "unknown_assignor": (
        "consumer",
        "partition.assignment.strategy",
        "sticky",
        "flows[0].consumer.partition.assignment.strategy: 'sticky' refused: partition.assignment.strategy must be one "
        "assignor of cooperative-sticky, roundrobin, range",
    ),
    "assignor_case": (
        "consumer",
        "partition.assignment.strategy",
        "Cooperative-Sticky",
        "flows[0].consumer.partition.assignment.strategy: 'Cooperative-Sticky' refused",
    ),
    "mixed_assignors": (
        "consumer",
        "partition.assignment.strategy",
        "'cooperative-sticky,range'",
        "flows[0].consumer.partition.assignment.strategy: 'cooperative-sticky,range' refused",
    ),
    "consumer_protocol": (
        "consumer",
        "group.protocol",
        "consumer",
        "flows[0].consumer.group.protocol: 'consumer' refused: group.protocol must stay classic",
    ),
    "consumer_auto_create": (
        "consumer",
        "allow.auto.create.topics",
        "true",
        "flows[0].consumer.allow.auto.create.topics: 'true' refused",
    ),
}


@pytest.mark.parametrize("case", sorted(GUARANTEE_CASES))
def test_overrides_that_switch_a_guarantee_off_are_refused(case: str, tmp_path: Path, capsys) -> None:
    section, key, value, expected = GUARANTEE_CASES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(_flow_with(section, key, value))
    rc = main(["validate", "--offline", "-c", str(path)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith(f"Error: {expected}"), err
    assert "(remove it; the mirror sets what it needs)" in err
    assert len(err.strip().splitlines()) == 1, err


def test_a_cluster_client_setting_that_reaches_the_mirror_is_refused_too(tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        GOOD_CLUSTERS.replace(
            'sf: {bootstrap: "127.0.0.1:19192"}',
            'sf: {bootstrap: "127.0.0.1:19192", client: {request.required.acks: 1}}',
        )
        + GOOD_FLOW
    )
    assert main(["validate", "--offline", "-c", str(path)]) == 2
    assert capsys.readouterr().err.startswith(
        "Error: clusters.sf.client.request.required.acks: '1' refused: acks (which request.required.acks sets) must be "
        "all"
    )


TIMING_CASES = {
    # the fence fires after session - heartbeat ms without a loop: 0 or less fences every loop
    "heartbeat_past_session": (
        "heartbeat.interval.ms",
        "12000",
        "flows[0].consumer.heartbeat.interval.ms: refused: heartbeat.interval.ms (12000) must be at most a third of "
        "session.timeout.ms (10000)",
    ),
    "session_too_short": (
        "session.timeout.ms",
        "5000",
        "flows[0].consumer.session.timeout.ms: refused: heartbeat.interval.ms (2000) must be at most a third of "
        "session.timeout.ms (5000)",
    ),
    "not_a_number": (
        "session.timeout.ms",
        "ten",
        "flows[0].consumer.session.timeout.ms: 'ten' is not a whole number of milliseconds",
    ),
    "short_poll_interval": (
        "max.poll.interval.ms",
        "10000",
        "flows[0].consumer.max.poll.interval.ms: refused: below 60000",
    ),
}


@pytest.mark.parametrize("case", sorted(TIMING_CASES))
def test_consumer_timings_that_would_fence_every_loop_are_refused(case: str, tmp_path: Path, capsys) -> None:
    """A heartbeat at or above the session timeout would make the fence fire on every loop (duplicates without bound):
    refused at load.
    """
    key, value, expected = TIMING_CASES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(_flow_with("consumer", key, value))
    rc = main(["validate", "--offline", "-c", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"Error: {expected}"), err
    assert len(err.strip().splitlines()) == 1, err


def test_timings_within_the_rules_are_accepted_and_the_drain_fits_the_poll_interval() -> None:
    from mirror.config import MIN_MAX_POLL_INTERVAL_MS, parse
    from mirror.engine.worker import DRAIN_TIMEOUT

    body = (
        GOOD_FLOW
        + "    consumer: {session.timeout.ms: 45000, heartbeat.interval.ms: 3000, max.poll.interval.ms: 300000}\n"
    )
    assert parse(GOOD_CLUSTERS + body, env={}).flows[0].consumer["session.timeout.ms"] == 45000
    assert MIN_MAX_POLL_INTERVAL_MS >= 2 * DRAIN_TIMEOUT * 1000


def test_overrides_that_keep_the_guarantees_are_accepted() -> None:
    from mirror.config import parse

    body = GOOD_FLOW + (
        "    producer: {acks: all, request.required.acks: -1, enable.idempotence: true, enable.gapless.guarantee: "
        "'T',\n"
        "               message.timeout.ms: 0, max.in.flight: 5, queue.buffering.max.ms: 50, linger.ms: 20, retries: "
        "2147483647,\n"
        "               allow.auto.create.topics: false, compression.type: zstd}\n"
        "    consumer: {isolation.level: READ_COMMITTED, enable.auto.commit: false, enable.auto.offset.store: 0,\n"
        "               auto.offset.reset: smallest, partition.assignment.strategy: cooperative-sticky, "
        "group.protocol: classic,\n"
        "               enable.partition.eof: true, fetch.min.bytes: 1048576}\n"
    )
    config = parse(GOOD_CLUSTERS + body, env={})
    assert config.flows[0].producer["max.in.flight"] == 5
    assert config.flows[0].consumer["enable.partition.eof"] is True


# ---------------------------------------------------------------------------- every problem at once

MANY_MISTAKES = """\
clusters:
  nyc: {bootstrap: "127.0.0.1:19092"}
  sf: {bootstrap: "localhost"}
flows:
  - name: nyc-to-la
    source: nyc
    target: la
    topics: {include: ["orders.*"]}
    producer: {acks: 1}
  - name: b
    source: nyc
    target: sf
    tragets: x
    topics: {include: ["(unclosed"]}
  - name: nyc-to-la
    source: nyc
    target: nyc
    topics: {include: ["x"]}
canary: {interval: soon}
"""


def test_every_problem_is_listed_one_line_each_with_its_key() -> None:
    from mirror.config import parse
    from mirror.errors import ConfigProblems

    with pytest.raises(ConfigProblems) as info:
        parse(MANY_MISTAKES, env={})
    assert str(info.value).splitlines() == [
        "8 problems in the config:",
        "  clusters.sf.bootstrap: 'localhost' is not a host:port list (e.g. 127.0.0.1:9092) "
        "(see clusters.NAME.bootstrap in docs/config.md)",
        "  flows[1].topics.include[0]: invalid regex '(unclosed': missing ), unterminated subpattern at position 0 "
        "(see flows[].topics.include in docs/config.md)",
        "  flows[1].tragets: unknown key (did you mean `target`? see the keys of flows[] in docs/config.md)",
        "  canary.interval: 'soon' is not a duration; write e.g. 10s, 500ms or 5m "
        "(see canary.interval in docs/config.md)",
        "  flows[0].producer.acks: '1' refused: acks must be all: a source offset is committed once the target "
        "acknowledged the records,"
        " and with fewer acks a target broker failure loses acknowledged records (remove it; the mirror sets what it "
        "needs)",
        "  flows[0].target: unknown cluster 'la' (clusters defined: nyc, sf)",
        "  flows[2].target: source and target are both 'nyc' (a flow mirrors between two different clusters)",
        "  flows[2].name: duplicate flow name 'nyc-to-la' (also flows[0]) (give each flow its own name)",
    ]
    assert info.value.exit_code == 2
    assert [p.key for p in info.value.problems][:2] == ["clusters.sf.bootstrap", "flows[1].topics.include[0]"]


def test_unset_variables_are_listed_with_the_other_problems_without_echoes() -> None:
    from mirror.config import parse
    from mirror.errors import ConfigProblems

    text = (
        "clusters:\n  nyc: {bootstrap: '${MIRROR_TEST_A}'}\n  sf: {bootstrap: '${MIRROR_TEST_B}'}\n"
        + GOOD_FLOW
        + "metrics: {port: lots}\n"
    )
    with pytest.raises(ConfigProblems) as info:
        parse(text, env={})
    assert [str(p) for p in info.value.problems] == [
        "clusters.nyc.bootstrap: environment variable MIRROR_TEST_A is not set (export MIRROR_TEST_A, or write "
        "${MIRROR_TEST_A:-default})",
        "clusters.sf.bootstrap: environment variable MIRROR_TEST_B is not set (export MIRROR_TEST_B, or write "
        "${MIRROR_TEST_B:-default})",
        "metrics.port: Input should be a valid integer, unable to parse string as an integer "
        "(see metrics.port in docs/config.md)",
    ]


def test_the_cli_prints_every_problem_and_exits_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "bad.yaml"
    path.write_text(MANY_MISTAKES)
    proc = subprocess.run(
        [sys.executable, "-m", "mirror", "validate", "--offline", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "Error: 8 problems in the config:"
    assert len(lines) == 9 and all(line.startswith("  ") for line in lines[1:])
    assert "  flows[0].producer.acks: '1' refused: acks must be all" in proc.stderr
    assert "  flows[2].name: duplicate flow name 'nyc-to-la' (also flows[0])" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_usable_clusters_is_one_problem_not_one_per_flow() -> None:
    from mirror.config import parse
    from mirror.errors import ConfigError, ConfigProblems

    with pytest.raises(ConfigError) as info:
        parse(GOOD_FLOW, env={})
    assert not isinstance(info.value, ConfigProblems)
    assert str(info.value) == "clusters: required key is missing (add it; see docs/config.md)"
