from __future__ import annotations

import json
from pathlib import Path

import pytest

from failover import offsets_file
from failover.offsets_file import GroupOffsets
from mirror.errors import UsageError


def test_write_read_roundtrip(tmp_path: Path) -> None:
    doc = GroupOffsets("sf", "billing", 123, {("nyc.orders", 1): 7, ("nyc.orders", 0): 42})
    path = tmp_path / "b.json"
    offsets_file.write(path, doc)
    assert offsets_file.read(path) == doc
    assert json.loads(path.read_text())["offsets"][0] == {"topic": "nyc.orders", "partition": 0, "offset": 42}


@pytest.mark.parametrize("text", ["not json", "[]", '{"version": 9}', '{"version": 1, "cluster": "sf"}'])
def test_bad_files_are_usage_errors(tmp_path: Path, text: str) -> None:
    path = tmp_path / "b.json"
    path.write_text(text)
    with pytest.raises(UsageError):
        offsets_file.read(path)


def test_a_missing_key_is_named(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text('{"version": 1, "cluster": "sf", "group": "g"}')
    with pytest.raises(UsageError, match="no 'offsets' key"):
        offsets_file.read(path)


def test_a_plan_given_as_a_backup_is_named_with_the_flag(tmp_path: Path) -> None:
    """`import --backup PLAN`: the plan is not what it restores from; say which file it is and
    which command takes it, under the flag that was given."""
    from failover.siteapply import read_backup
    from tests.unit.failover.test_site import _site

    path = tmp_path / "p.json"
    path.write_text(_site().to_text())
    with pytest.raises(UsageError) as err:
        read_backup(path)
    assert str(err.value).startswith("--backup: ") and "apply --plan" in str(err.value), str(err.value)
