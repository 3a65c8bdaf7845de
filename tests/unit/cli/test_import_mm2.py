"""`mirror import-mm2` without clusters: the file it writes, and bad input (exit 2, one line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.cli import main
from mirror.config import load

MM2 = """\
clusters = nyc, sf
nyc.bootstrap.servers = 127.0.0.1:19092
sf.bootstrap.servers = 127.0.0.1:19192
nyc.security.protocol = SASL_SSL
nyc.sasl.mechanism = SCRAM-SHA-512
nyc.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="do-not-copy";
nyc->sf.enabled = true
nyc->sf.topics = orders.*
tasks.max = 8
"""  # noqa: E501 (a real MM2 jaas.config line: properties values are one line)


def test_config_only_writes_a_valid_file_without_secrets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    props, out = tmp_path / "mm2.properties", tmp_path / "mirror.yaml"
    props.write_text(MM2)
    assert main(["import-mm2", "--mm2-config", str(props), "--out", str(out), "--config-only"]) == 0
    text = out.read_text()
    assert "do-not-copy" not in text and "${NYC_SASL_PASSWORD}" in text and "tasks.max" in text
    printed = capsys.readouterr().out
    assert "export NYC_SASL_PASSWORD" in printed and "do-not-copy" not in printed
    config = load(out, env={"NYC_SASL_PASSWORD": "x"})
    assert [f.name for f in config.flows] == ["nyc-to-sf"] and config.clusters["nyc"].client["sasl.password"] == "x"
    # An existing file is not overwritten without --force.
    assert main(["import-mm2", "--mm2-config", str(props), "--out", str(out), "--config-only"]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["import-mm2", "--mm2-config", str(props), "--out", str(out), "--config-only", "--force"]) == 0


def test_bad_input_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import-mm2", "--mm2-config", str(tmp_path / "missing.properties"), "--config-only"]) == 2
    assert "--mm2-config" in capsys.readouterr().err
    props = tmp_path / "mm2.properties"
    props.write_text(MM2 + "replication.policy.separator = _\n")
    assert main(["import-mm2", "--mm2-config", str(props), "--out", str(tmp_path / "m.yaml"), "--config-only"]) == 2
    err = capsys.readouterr().err
    assert "replication.policy.separator" in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_taking_over_needs_the_secrets_exported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NYC_SASL_PASSWORD", raising=False)
    props = tmp_path / "mm2.properties"
    props.write_text(MM2)
    assert main(["import-mm2", "--mm2-config", str(props), "--out", str(tmp_path / "m.yaml"), "--yes"]) == 2
    assert "NYC_SASL_PASSWORD" in capsys.readouterr().err


def test_taking_over_needs_yes_and_writes_nothing_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The take-over sets the flows' groups' offsets: like every command that moves offsets, it
    asks for --yes, and refuses (exit 2) before writing anything, --json or not."""
    props, out = tmp_path / "mm2.properties", tmp_path / "m.yaml"
    props.write_text(MM2)
    for extra in ([], ["--json"]):
        assert main(["import-mm2", "--mm2-config", str(props), "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert "--yes" in err and "--config-only" in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()
    out.write_text("clusters: {}\n")
    assert main(["import-mm2", "--mm2-config", str(props), "-c", str(out)]) == 2
    assert "--yes" in capsys.readouterr().err
