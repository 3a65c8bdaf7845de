"""librdkafka client settings as the Java client options Spark's Kafka source takes (`kafka.*`).

A cluster's `client:` block is written for librdkafka (`mirror run`, and the Spark tasks'
producers, read it as is). Spark's Kafka source is the Java client: the same security
settings have other names there, and some have no name at all (a SASL user and password
are one JAAS line; PEM files are a keystore of type PEM). Pure: no pyspark, no I/O but
reading the PEM files named by the settings (their content, never their path, is what the
Java client takes for a key and certificate pair).

Paths must exist where the source is read (every executor), as for the tasks' producers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mirror.errors import ConfigError

# Spark redacts option values whose key or value matches spark.redaction.regex (its default
# catches "password", so the JAAS line); the private key's option must be redacted too.
REDACT = r"(?i)secret|password|token|access[.]?key|ssl[.]keystore[.]key|sasl[.]jaas"

_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Same name, same meaning in both clients.
_SAME = ("security.protocol", "ssl.key.password", "ssl.cipher.suites", "sasl.kerberos.service.name")
# librdkafka-only keys this mapping turns into others (handled below).
_MAPPED = {
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.endpoint.identification.algorithm",
}


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_kafka_options(
    cluster: str, client: Mapping[str, Any], read: Callable[[Path], str] = lambda p: p.read_text()
) -> dict[str, str]:
    """The `kafka.`-less Java client options for a cluster's librdkafka security settings.

    Only security settings are mapped (the source's reading is Spark's own business); a
    security setting with no Java equivalent here is refused, naming it, rather than
    silently connecting without it.
    """
    out: dict[str, str] = {}
    where = f"clusters.{cluster}.client"
    for key, value in client.items():
        if not key.startswith(("security.", "sasl.", "ssl.")):
            continue
        if key in _SAME:
            out[key] = str(value)
        elif key not in _MAPPED:
            raise ConfigError(
                f"{where}.{key}",
                "has no Java client equivalent that `mirror spark run` knows",
                hint=(
                    "the Spark source is a Java client: use security.protocol, "
                    "sasl.mechanism/username/password, ssl.ca/certificate/key.location"
                ),
            )
    mechanism = str(client.get("sasl.mechanism", client.get("sasl.mechanisms", ""))).upper()
    if mechanism:
        out["sasl.mechanism"] = mechanism
    if "sasl.username" in client or "sasl.password" in client:
        module = _JAAS_MODULES.get(mechanism or "GSSAPI")
        if module is None:
            raise ConfigError(
                f"{where}.sasl.mechanism",
                f"{mechanism or 'GSSAPI (the default)'} with sasl.username/password is not supported by `mirror spark "
                "run`",
                hint="use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
            )
        user, password = str(client.get("sasl.username", "")), str(client.get("sasl.password", ""))
        out["sasl.jaas.config"] = f"{module} required username={_jaas_quote(user)} password={_jaas_quote(password)};"
    if "ssl.ca.location" in client:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = str(client["ssl.ca.location"])
    cert_at, key_at = client.get("ssl.certificate.location"), client.get("ssl.key.location")
    if (cert_at is None) != (key_at is None):
        missing = "ssl.key.location" if key_at is None else "ssl.certificate.location"
        raise ConfigError(
            f"{where}.{missing}", "is needed with the other half of the client certificate for `mirror spark run`"
        )
    if cert_at is not None and key_at is not None:
        out["ssl.keystore.type"] = "PEM"
        try:
            out["ssl.keystore.certificate.chain"] = read(Path(str(cert_at)))
            out["ssl.keystore.key"] = read(Path(str(key_at)))
        except OSError as exc:
            raise ConfigError(
                f"{where}.ssl.certificate.location", f"cannot read the client certificate or key: {exc.strerror}"
            ) from None
    algo = client.get("ssl.endpoint.identification.algorithm")
    if algo is not None:
        out["ssl.endpoint.identification.algorithm"] = "" if str(algo).lower() == "none" else str(algo)
    return out
