"""`mirror dev up --broker-config KEY=VALUE`: pairs parsed, the last of a key wins, mistakes named."""

from __future__ import annotations

import click
import pytest

from mirror.cli.dev import parse_broker_config


def test_broker_config_pairs_and_mistakes():
    assert parse_broker_config(("auto.create.topics.enable=false", "num.partitions=3", "num.partitions=4")) == {
        "auto.create.topics.enable": "false", "num.partitions": "4",
    }
    for bad in ("novalue", "=x", "two words=1"):
        with pytest.raises(click.BadParameter, match="KEY=VALUE"):
            parse_broker_config((bad,))
