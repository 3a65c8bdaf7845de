"""MM2 properties -> topology: parsing, pairs, clients, secrets, policies, leftovers."""

from __future__ import annotations

import pytest

from mirror.config import parse
from mirror.domain.mm2_config import DEFAULT_TOPICS_EXCLUDE, group_pattern, parse_properties, translate
from mirror.errors import ConfigError

BASE = """\
clusters = nyc, sf
nyc.bootstrap.servers = 10.0.0.1:9092
sf.bootstrap.servers = 10.0.1.1:9092
nyc->sf.enabled = true
"""


def test_properties_format() -> None:
    text = (
        "# comment\n! also\na=1\nb : two words\nc three\nlong = x,\\\n    y\nesc = a\\=b\\u0041\\\\\n  "
        "spaced.key   =   v  \n"
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "two words",
        "c": "three",
        "long": "x,y",
        "esc": "a=bA\\",
        "spaced.key": "v  ",
    }


def test_one_flow_per_enabled_pair_with_mm2_defaults() -> None:
    t = translate(parse_properties(BASE + "sf->nyc.enabled = false\n"))
    assert [f.name for f in t.flows] == ["nyc-to-sf"]
    (flow,) = t.config["flows"]
    assert flow["topics"] == {"include": [".*"], "exclude": DEFAULT_TOPICS_EXCLUDE}
    assert flow["rename"] == "prefix"
    assert t.config["clusters"]["nyc"] == {"bootstrap": "10.0.0.1:9092"}
    mm2 = t.flows[0]
    assert (mm2.offsets_topic, mm2.offset_syncs_topic, mm2.checkpoints_topic, mm2.connect_group) == (
        "mm2-offsets.nyc.internal",
        "mm2-offset-syncs.sf.internal",
        "nyc.checkpoints.internal",
        "nyc-mm2",
    )
    assert not mm2.offset_syncs_on_target and not mm2.read_committed
    # The file it describes loads as a valid topology.
    parse(__import__("yaml").safe_dump(t.config), env={})


def test_pair_settings_win_over_top_level_ones() -> None:
    t = translate(
        parse_properties(
            BASE + "topics = a.*\nnyc->sf.topics = orders.*, pay\ntopics.exclude = x\ngroups = billing.*\n"
            "nyc->sf.emit.checkpoints.interval.seconds = 5\nsync.group.offsets.enabled = true\n"
            "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
        )
    )
    flow = t.config["flows"][0]
    assert flow["topics"] == {"include": ["orders.*", "pay"], "exclude": ["x"]}
    assert flow["checkpoint_interval"] == "5s" and flow["sync_group_offsets"] is True
    assert flow["rename"] == "identity"
    assert t.untranslated == []


def test_group_pattern_keeps_mm2_excludes_out() -> None:
    import re

    pat = re.compile(group_pattern([".*"], ["console-consumer-.*", "connect-.*"]))
    assert pat.fullmatch("billing") and not pat.fullmatch("connect-x") and not pat.fullmatch("console-consumer-1")
    assert re.compile(group_pattern(["a.*"], [])).fullmatch("ab")


def test_secrets_become_variables_never_values() -> None:
    props = BASE + (
        "nyc.security.protocol = SASL_SSL\nnyc.sasl.mechanism = SCRAM-SHA-512\n"
        "nyc.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="mirror" password="s3cret!";\n'
        "nyc.ssl.truststore.location = /etc/ca.pem\nnyc.ssl.truststore.type = PEM\n"
        "sf.security.protocol = SSL\nsf.ssl.keystore.location = /etc/k.p12\nsf.ssl.keystore.type = PKCS12\n"
        "sf.ssl.keystore.password = ${env:SF_KS}\nsf.ssl.key.password = hunter2\n"
    )
    t = translate(parse_properties(props))
    nyc, sf = t.config["clusters"]["nyc"]["client"], t.config["clusters"]["sf"]["client"]
    assert nyc == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "mirror",
        "sasl.password": "${NYC_SASL_PASSWORD}",
        "ssl.ca.location": "/etc/ca.pem",
    }
    assert sf["ssl.keystore.password"] == "${SF_KS}" and sf["ssl.key.password"] == "${SF_SSL_KEY_PASSWORD}"
    assert set(t.env) == {"NYC_SASL_PASSWORD", "SF_KS", "SF_SSL_KEY_PASSWORD"}
    text = repr(t.config) + repr(t.env) + repr(t.untranslated)
    assert "s3cret" not in text and "hunter2" not in text


def test_what_cannot_be_carried_over_is_listed() -> None:
    t = translate(
        parse_properties(
            BASE + "tasks.max = 4\nnyc.ssl.truststore.location = /etc/ts.jks\noffset.storage.replication.factor = 3\n"
            "emit.heartbeats.enabled = true\nsomething.odd = 1\n"
        )
    )
    reasons = {u.key: u.reason for u in t.untranslated}
    assert set(reasons) == {
        "tasks.max",
        "nyc.ssl.truststore.location",
        "offset.storage.replication.factor",
        "emit.heartbeats.enabled",
        "something.odd",
    }
    assert "--workers" in reasons["tasks.max"] and "PEM" in reasons["nyc.ssl.truststore.location"]


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("replication.policy.separator = _\n", "replication.policy.separator"),
        ("replication.policy.class = com.example.Custom\n", "replication.policy.class"),
    ],
)
def test_unsupported_policies_name_their_key(extra: str, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        translate(parse_properties(BASE + extra))
    assert err.value.key == key


def test_files_that_describe_nothing_to_take_over() -> None:
    with pytest.raises(ConfigError) as err:
        translate(parse_properties("clusters = a\n"))
    assert err.value.key == "clusters"
    with pytest.raises(ConfigError) as err:
        translate(parse_properties(BASE.replace("true", "false")))
    assert err.value.key == "A->B.enabled"
    with pytest.raises(ConfigError) as err:
        translate(parse_properties("clusters = a, b\na.bootstrap.servers = x:1\na->b.enabled = true\n"))
    assert err.value.key == "b.bootstrap.servers"


def test_consumer_and_producer_overrides_most_specific_wins() -> None:
    t = translate(
        parse_properties(
            BASE + "consumer.fetch.max.bytes = 1\nnyc.consumer.fetch.max.bytes = 2\nsf.producer.linger.ms = 7\n"
            "nyc.consumer.isolation.level = read_committed\n"
        )
    )
    flow = t.config["flows"][0]
    assert flow["consumer"] == {"fetch.max.bytes": "2"} and flow["producer"] == {"linger.ms": "7"}
    assert t.flows[0].read_committed


def test_identity_policy_with_its_own_separator_names_mm2s_topics_with_it() -> None:
    t = translate(
        parse_properties(
            BASE + "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy\n"
            "replication.policy.separator = _\n"
        )
    )
    mm2 = t.flows[0]
    assert (mm2.offset_syncs_topic, mm2.checkpoints_topic) == (
        "mm2-offset-syncs_sf_internal",
        "nyc_checkpoints_internal",
    )
    assert t.config["flows"][0]["rename"] == "identity"


@pytest.mark.parametrize(
    "settings",
    [
        # MM2's source consumer reads `source.consumer.*` last
        "nyc->sf.source.consumer.isolation.level = read_committed\n",
        "source.consumer.isolation.level = read_committed\n",
        # `nyc.consumer.*` reaches MM2 as `source.consumer.*`, which wins over the pair's `consumer.*`
        "nyc.consumer.isolation.level = read_committed\nnyc->sf.consumer.isolation.level = read_uncommitted\n",
    ],
)
def test_any_way_mm2_may_have_read_committed_reads_the_source_read_committed(settings: str) -> None:
    # Judged read_uncommitted, the import reads aborted records MM2 never copied and places
    # the records after them past their copies (a failover there skips them).
    assert translate(parse_properties(BASE + settings)).flows[0].read_committed
