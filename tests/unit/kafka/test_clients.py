"""Clients made from a cluster's settings: a setting librdkafka refuses is a `ConfigError` naming it."""

from __future__ import annotations

import pytest

from mirror.config import ClusterConfig
from mirror.errors import ConfigError, ExitCode
from mirror.kafka import Admin, make_consumer, make_producer
from mirror.kafka.clients import check_settings


def test_a_cluster_setting_librdkafka_does_not_know_names_its_key():
    cluster = ClusterConfig(bootstrap="127.0.0.1:1", client={"no.such.property": "x"})
    for make in (
        lambda: Admin("sf", cluster),
        lambda: make_consumer("sf", cluster, {"group.id": "g"}),
        lambda: make_producer("sf", cluster, {}),
        lambda: check_settings("sf", cluster),
    ):
        with pytest.raises(ConfigError) as caught:
            make()
        assert caught.value.key == "clusters.sf.client.no.such.property"
        assert caught.value.exit_code == ExitCode.USAGE
        assert 'No such configuration property: "no.such.property"' in str(caught.value)


def test_a_flow_setting_with_a_value_librdkafka_refuses_names_the_cluster_and_the_value():
    cluster = ClusterConfig(bootstrap="127.0.0.1:1")
    with pytest.raises(ConfigError) as caught:
        check_settings("sf", cluster, {"acks": "bogus"})
    assert "cluster 'sf'" in str(caught.value) and "request.required.acks" in str(caught.value)
    assert "consumer:/producer:" in (caught.value.hint or "")
