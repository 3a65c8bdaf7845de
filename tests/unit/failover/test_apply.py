"""Single-group apply against the in-memory fake of our Admin port: a failed write names the
backup it already wrote."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from failover.apply import apply_plan
from failover.plan import Method, PartitionPlan, Plan, Truth
from mirror.errors import ClusterUnavailable, ExitCode
from tests.unit.failover.test_siteapply import FakeAdmin


def _plan() -> Plan:
    return Plan(
        flow="f",
        group="g",
        method=Method.TRANSLATE,
        truth=Truth.SOURCE,
        partitions=[PartitionPlan("orders", "nyc.orders", 0, source_offset=40, target_offset=42, unmirrored=0)],
    )


def test_a_failed_offset_write_names_the_backup_it_wrote_first(tmp_path):
    """The target stops answering as the new offsets are written: the one-line error keeps its
    cause and exit code, and says where the group's previous offsets are, for the restore."""
    admin = FakeAdmin()
    admin.offsets["g"] = {("nyc.orders", 0): 5}
    admin.fail_at = 1
    backup = tmp_path / "backup.json"
    with pytest.raises(ClusterUnavailable) as failed:
        apply_plan(SimpleNamespace(flow=SimpleNamespace(target="sf"), target=admin), _plan(), backup, now_ms=1)  # type: ignore[arg-type]
    message = str(failed.value)
    assert failed.value.exit_code == ExitCode.FAILURE and "\n" not in message
    assert "did not answer" in message and str(backup) in message
    saved = json.loads(backup.read_text())
    assert saved["group"] == "g" and admin.offsets["g"] == {("nyc.orders", 0): 5}


def test_an_earlier_backup_is_moved_aside_not_overwritten(tmp_path):
    """A retry after a write that timed out but landed (or a drill re-run into its old report
    folder) would export already-moved offsets over the only record of where the group was:
    the earlier file is kept beside, under a new name (review-last E2)."""
    admin = FakeAdmin()
    admin.offsets["g"] = {("nyc.orders", 0): 5}
    backup = tmp_path / "backup.json"
    backup.write_text('{"the": "first apply\'s backup"}')
    path, _ = apply_plan(SimpleNamespace(flow=SimpleNamespace(target="sf"), target=admin), _plan(), backup, now_ms=7)  # type: ignore[arg-type]
    assert path == backup and json.loads(backup.read_text())["group"] == "g"
    (aside,) = [p for p in tmp_path.iterdir() if p != backup]
    assert aside.name.startswith("backup.json.") and aside.read_text() == '{"the": "first apply\'s backup"}'
    assert admin.offsets["g"] == {("nyc.orders", 0): 42}
