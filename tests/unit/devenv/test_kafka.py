"""The dev brokers' server.properties: Kafka's own defaults, plus the extra lines asked for."""

from __future__ import annotations

from pathlib import Path

from mirror.devenv.kafka import ClusterSpec, _server_properties


def test_server_properties_use_kafka_defaults_and_extra_lines_win():
    spec = ClusterSpec("nyc", 19092, Path("/tmp/x"))
    plain = _server_properties(spec)
    assert "auto.create.topics.enable" not in plain  # Kafka's default: on
    extra = _server_properties(spec, {"auto.create.topics.enable": "false", "num.partitions": "3"})
    props = {}
    for line in extra.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            props[k] = v  # java.util.Properties: the last line of a key wins
    assert props["auto.create.topics.enable"] == "false" and props["num.partitions"] == "3"
