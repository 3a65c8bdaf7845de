"""configs/alerts.yaml is valid and its alerts fire (and stay quiet) as intended, per promtool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: run `make setup` (installs the Debian package prometheus)")
    return path


def test_alert_rules_are_valid(promtool):
    out = subprocess.run(
        [promtool, "check", "rules", str(ROOT / "configs/alerts.yaml")], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_alert_rules_unit_tests_pass(promtool):
    out = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yaml"],
        cwd=ROOT / "tests/promtool",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_rule_is_tested_and_has_a_runbook():
    import yaml

    rules = [r for g in yaml.safe_load((ROOT / "configs/alerts.yaml").read_text())["groups"] for r in g["rules"]]
    tested = {
        t["alertname"]
        for case in yaml.safe_load((ROOT / "tests/promtool/alerts_test.yaml").read_text())["tests"]
        for t in case["alert_rule_test"]
    }
    for rule in rules:
        assert rule["alert"] in tested, f"{rule['alert']} has no promtool test"
        assert (ROOT / rule["annotations"]["runbook"]).exists(), f"{rule['alert']}: runbook missing"
