"""librdkafka security settings -> the Java client options of Spark's Kafka source."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.errors import ConfigError
from mirror.spark.clients import REDACT, java_kafka_options


def test_sasl_ssl_with_scram_becomes_a_jaas_line_and_a_pem_truststore():
    client = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "mirror",
        "sasl.password": 'p"w\\d',
        "ssl.ca.location": "/etc/ca.pem",
        "enable.ssl.certificate.verification": True,
    }
    assert java_kafka_options("src", client) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" '
        'password="p\\"w\\\\d";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/ca.pem",
    }


def test_plain_and_the_plural_mechanisms_key():
    out = java_kafka_options(
        "src",
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "p"},
    )
    assert out["sasl.mechanism"] == "PLAIN"
    assert (
        out["sasl.jaas.config"]
        == 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    )


def test_a_client_certificate_becomes_a_pem_keystore_of_the_files_content(tmp_path: Path):
    (tmp_path / "c.pem").write_text("-----BEGIN CERTIFICATE-----\nC\n-----END CERTIFICATE-----\n")
    (tmp_path / "k.pem").write_text("-----BEGIN PRIVATE KEY-----\nK\n-----END PRIVATE KEY-----\n")
    out = java_kafka_options(
        "dst",
        {
            "security.protocol": "SSL",
            "ssl.ca.location": str(tmp_path / "ca.pem"),
            "ssl.certificate.location": str(tmp_path / "c.pem"),
            "ssl.key.location": str(tmp_path / "k.pem"),
            "ssl.key.password": "kp",
            "ssl.endpoint.identification.algorithm": "none",
        },
    )
    assert (
        out["ssl.keystore.type"] == "PEM"
        and "CERTIFICATE" in out["ssl.keystore.certificate.chain"]
        and "PRIVATE KEY" in out["ssl.keystore.key"]
    )
    assert out["ssl.key.password"] == "kp" and out["ssl.endpoint.identification.algorithm"] == ""
    assert "ssl.key.location" not in out and "ssl.certificate.location" not in out


def test_plaintext_maps_to_nothing_and_other_settings_are_not_the_sources_business():
    assert java_kafka_options("src", {}) == {}
    assert java_kafka_options("src", {"client.id": "x", "socket.timeout.ms": 1000}) == {}


@pytest.mark.parametrize(
    ("client", "key"),
    [
        ({"sasl.oauthbearer.config": "x"}, "clusters.src.client.sasl.oauthbearer.config"),
        (
            {"sasl.mechanism": "OAUTHBEARER", "sasl.username": "u", "sasl.password": "s3cr3t"},
            "clusters.src.client.sasl.mechanism",
        ),
        ({"ssl.certificate.location": "/c.pem"}, "clusters.src.client.ssl.key.location"),
    ],
)
def test_a_setting_without_a_java_equivalent_is_refused_naming_it(client, key):
    with pytest.raises(ConfigError) as exc:
        java_kafka_options("src", client)
    assert exc.value.key == key and "s3cr3t" not in f"{exc.value} {exc.value.hint}"  # never the password


def test_the_redaction_pattern_covers_the_secret_options():
    import re

    for option in ("kafka.sasl.jaas.config", "kafka.ssl.keystore.key", "kafka.ssl.key.password"):
        assert re.search(REDACT, option), option
    assert not re.search(REDACT, "kafka.ssl.truststore.location")
