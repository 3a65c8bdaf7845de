"""`mirror dev up --broker-config KEY=VALUE`: pairs parsed, the last of a key wins, mistakes named."""

from __future__ import annotations

import click
import pytest

from mirror.cli.dev import parse_broker_config


def test_broker_config_pairs_and_mistakes():
    assert parse_broker_config(("auto.create.topics.enable=false", "num.partitions=3", "num.partitions=4")) == {
        "auto.create.topics.enable": "false",
        "num.partitions": "4",
    }
    for bad in ("novalue", "=x", "two words=1"):
        with pytest.raises(click.BadParameter, match="KEY=VALUE"):
            parse_broker_config((bad,))


def test_dev_grant_without_secured_dev_clusters_is_one_line(tmp_path, capsys, monkeypatch):
    """No `dev up --security` under --home: say so (exit 2), no traceback."""
    from pathlib import Path

    from mirror.cli import main

    monkeypatch.setenv("MIRROR_CONFIG", str(Path(__file__).resolve().parents[3] / "configs" / "dev.yaml"))
    assert main(["dev", "grant", "--home", str(tmp_path / "dev")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "no secured dev clusters" in line and str(tmp_path / "dev") in line and "--security" in line
