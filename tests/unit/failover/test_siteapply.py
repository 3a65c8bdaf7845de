"""Site apply and restore against an in-memory fake of our Admin port: refusal, one backup,
resume after a failure halfway without moving anything twice, the whole site back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from failover.site import ApplyGroup, PlanDoc
from failover.siteapply import apply_site, read_backup, restore_backup
from mirror.errors import ClusterUnavailable, ExitCode, UnsafeOperation

Key = tuple[str, int]


class _Pending:
    def __init__(self, value: dict[Key, int]) -> None:
        self.value = value

    def result(self) -> dict[Key, int]:
        return self.value


class FakeAdmin:
    timeout = 1.0

    def __init__(self) -> None:
        self.offsets: dict[str, dict[Key, int]] = {}
        self.members: dict[str, int] = {}
        self.alters: list[tuple[str, dict[Key, int]]] = []
        self.fail_at: int | None = None  # the n-th alter (1-based) fails like a broker not answering

    def request_group_offsets(
        self, group: str, partitions: Any = None, strict: bool = False, described: bool = False
    ) -> _Pending:
        now = self.offsets.get(group, {})
        return _Pending({k: o for k, o in now.items() if partitions is None or k in set(partitions)})

    def group_offsets(self, group: str, partitions: Any = None) -> dict[Key, int]:
        return self.request_group_offsets(group, partitions).result()

    def group_states(self) -> dict[str, str]:
        return {**{g: "EMPTY" for g in self.offsets}, **{g: "STABLE" for g, n in self.members.items() if n}}

    def prepare_groups(self, groups: list[str]) -> dict[str, str]:
        states = self.group_states()
        return {g: states.get(g, "DEAD") for g in groups}

    def group_members(self, group: str) -> int:
        return self.members.get(group, 0)

    def alter_group_offsets(self, group: str, offsets: dict[Key, int]) -> None:
        self.request_alter_group_offsets(group, offsets)()

    def request_alter_group_offsets(self, group: str, offsets: dict[Key, int]) -> Any:
        """Sent at once, like the real one; its answer (or failure) when waited for."""
        if self.fail_at is not None and len(self.alters) + 1 == self.fail_at:
            self.fail_at = None

            def fail() -> None:
                raise ClusterUnavailable("cluster 'sf' did not answer within 1s while trying to set offsets")

            return fail
        self.alters.append((group, dict(offsets)))
        self.offsets.setdefault(group, {}).update(offsets)
        return lambda: None

    def delete_groups(self, groups: list[str]) -> None:
        for g in groups:
            self.offsets.pop(g, None)


def _plan(n: int = 5) -> PlanDoc:
    groups = [
        ApplyGroup(
            f"g{i}", "sf", ["nyc"], {("nyc.t", 0): 100 + i, ("nyc.t", 1): 200 + i}, {("nyc.t", 0): i}, None, None
        )
        for i in range(n)
    ]
    return PlanDoc("abc123", "nyc", "/x.yaml", groups)


@pytest.fixture
def sf() -> FakeAdmin:
    admin = FakeAdmin()
    for i in range(5):
        admin.offsets[f"g{i}"] = {("nyc.t", 0): i, ("other", 0): 7}  # ("other", 0): not in the plan, kept in the backup
    return admin


def test_failure_halfway_then_a_second_run_finishes_without_moving_anything_twice(
    sf: FakeAdmin, tmp_path: Path
) -> None:
    backup = tmp_path / "plan.backup.json"
    lines: list[str] = []
    sf.fail_at = 3
    with pytest.raises(ClusterUnavailable) as err:
        apply_site(_plan(), lambda _c: sf, backup, lines.append, 1)  # type: ignore[arg-type,return-value]
    assert "moved at least 2 of 5 groups; run the same command again" in str(err.value)
    plan_id, saved = read_backup(backup)
    assert plan_id == "abc123" and {g.group: g.offsets for g in saved} == {
        f"g{i}": {("nyc.t", 0): i, ("other", 0): 7} for i in range(5)
    }

    lines.clear()
    result = apply_site(_plan(), lambda _c: sf, backup, lines.append, 2)  # type: ignore[arg-type,return-value]
    # The commits are in flight together: those sent after the failed one landed too.
    assert result.resumed and result.already == ["g0", "g1", "g3", "g4"] and result.moved == ["g2"]
    assert "resuming" in lines[0] and "kept from that run" in lines[0]
    assert sorted(g for g, _ in sf.alters) == ["g0", "g1", "g2", "g3", "g4"]  # each group set once, ever
    assert read_backup(backup)[1] == saved  # the first run's backup, not the half-moved state
    assert all(sf.offsets[f"g{i}"] == {("nyc.t", 0): 100 + i, ("nyc.t", 1): 200 + i, ("other", 0): 7} for i in range(5))

    again = apply_site(_plan(), lambda _c: sf, backup, lines.append, 3)  # type: ignore[arg-type,return-value]
    assert again.moved == [] and len(again.already) == 5 and len(sf.alters) == 5

    restore_backup(saved, lambda _c: sf, lines.append)  # type: ignore[arg-type,return-value]
    assert all(sf.offsets[f"g{i}"] == {("nyc.t", 0): i, ("other", 0): 7} for i in range(5))


def test_a_group_that_moved_or_came_back_refuses_the_whole_plan(sf: FakeAdmin, tmp_path: Path) -> None:
    backup = tmp_path / "b.json"
    sf.offsets["g3"][("nyc.t", 0)] = 42  # committed on the target since the plan
    sf.members["g1"] = 2
    with pytest.raises(UnsafeOperation) as err:
        apply_site(_plan(), lambda _c: sf, backup, print, 1)  # type: ignore[arg-type,return-value]
    assert err.value.exit_code == ExitCode.UNSAFE
    assert "g3: committed on sf since the plan (nyc.t[0])" in str(err.value) and "g1: active on sf (STABLE)" in str(
        err.value
    )
    assert not backup.exists() and sf.alters == []


def test_a_plan_with_refused_groups_is_refused(sf: FakeAdmin, tmp_path: Path) -> None:
    plan = _plan(2)
    plan.groups[1] = ApplyGroup("g1", "sf", ["nyc"], {}, {}, None, "still active (1 on the source)")
    with pytest.raises(UnsafeOperation, match="refuses 1 group"):
        apply_site(plan, lambda _c: sf, tmp_path / "b.json", print, 1)  # type: ignore[arg-type,return-value]
    assert sf.alters == []


def test_a_backup_of_another_plan_is_never_overwritten(sf: FakeAdmin, tmp_path: Path) -> None:
    backup = tmp_path / "b.json"
    backup.write_text(json.dumps({"kind": "site-backup", "plan_id": "other", "groups": []}))
    with pytest.raises(Exception, match="belongs to another plan"):
        apply_site(_plan(), lambda _c: sf, backup, print, 1)  # type: ignore[arg-type,return-value]
    assert sf.alters == []


def test_restore_refuses_while_a_group_is_active(sf: FakeAdmin, tmp_path: Path) -> None:
    apply_site(_plan(), lambda _c: sf, tmp_path / "b.json", print, 1)  # type: ignore[arg-type,return-value]
    _, saved = read_backup(tmp_path / "b.json")
    sf.members["g4"] = 1
    with pytest.raises(UnsafeOperation, match="g4"):
        restore_backup(saved, lambda _c: sf, print)  # type: ignore[arg-type,return-value]
    assert sf.offsets["g0"][("nyc.t", 0)] == 100  # nothing restored


def test_a_plan_moving_no_group_is_refused(sf: FakeAdmin, tmp_path: Path) -> None:
    """An old or hand-made plan with no group: "moved 0 group(s)", exit 0, would be a false fine."""
    backup = tmp_path / "b.json"
    with pytest.raises(UnsafeOperation) as err:
        apply_site(PlanDoc("abc123", "nyc", "/x.yaml", []), lambda _c: sf, backup, print, 1)  # type: ignore[arg-type,return-value]
    assert err.value.exit_code == ExitCode.UNSAFE and "moves no group" in str(err.value)
    assert not backup.exists() and sf.alters == []
