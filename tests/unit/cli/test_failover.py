"""`mirror failover apply` (single group) over the in-memory fake of our Admin port."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from mirror.cli import failover as failover_cli
from mirror.cli import main
from mirror.errors import AuthorizationFailed
from tests.unit.failover.test_apply import _plan
from tests.unit.failover.test_siteapply import FakeAdmin

APPLY = ["failover", "apply", "--flow", "f", "--group", "g", "--translate", "--yes"]


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    """The target cluster `sf` of flow f, group g at offset 5; the plan moves it to 42."""
    fake = FakeAdmin()
    fake.offsets["g"] = {("nyc.orders", 0): 5}

    @contextmanager
    def context(app, config_path, flow):  # type: ignore[no-untyped-def]
        yield SimpleNamespace(flow=SimpleNamespace(target="sf"), target=fake)

    monkeypatch.setattr(failover_cli, "_flow_context", context)
    monkeypatch.setattr(failover_cli, "build_plan", lambda ctx, group, method, at_ms=None: _plan())
    return fake


def test_a_failed_apply_prints_the_restore_command_as_written_on_success(tmp_path, capsys, admin):
    """At 3 a.m. the line is copied as it stands: the restore command needs -c and --yes."""
    admin.fail_at = 1
    cfg, backup = tmp_path / "m.yaml", tmp_path / "b.json"
    assert main([*APPLY, "-c", str(cfg), "--backup", str(backup)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(f"(restore: mirror failover import -c {cfg} --cluster sf {backup} --yes)"), line
    assert backup.exists()


def test_the_restore_command_does_not_replace_the_errors_own_advice(tmp_path, capsys, admin):
    """A refusal's hint (a grant to add, a retry that is usual) still ends the line."""

    def refuse(group, offsets):  # type: ignore[no-untyped-def]
        raise AuthorizationFailed("cluster 'sf' refused to set offsets of group 'g'", hint="grant Read on group g")

    admin.alter_group_offsets = refuse  # type: ignore[method-assign]
    assert main([*APPLY, "-c", str(tmp_path / "m.yaml"), "--backup", str(tmp_path / "b.json")]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "mirror failover import" in line and line.endswith("(grant Read on group g)"), line


def test_an_error_before_the_backup_prints_no_restore_command(tmp_path, capsys, admin, monkeypatch):
    """A group still in use is refused before anything is written: even when the error's text
    happens to contain the --backup path (here: named like the group), no restore is offered
    (review-last E1)."""
    admin.members["g"] = 1
    monkeypatch.chdir(tmp_path)
    assert main([*APPLY, "-c", "m.yaml", "--backup", "g"]) == 3
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "restore" not in line and not (tmp_path / "g").exists(), line


def test_output_files_are_named_out_with_the_old_spelling_hidden(capsys):
    """One name per meaning: `--out FILE` writes a file in every failover command; export's
    `-o/--output` still works but is not offered any more."""
    assert main(["failover", "export", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--out FILE" in text and "--output" not in text and "-o," not in text
    for spelling in ("--out", "-o", "--output"):
        assert main(["failover", "export", "-c", "missing.yaml", "--cluster", "x", "--group", "g", spelling, "f"]) == 2
        assert "missing.yaml" in capsys.readouterr().err  # parsed; stopped at the config, not at the flag


def test_plan_file_given_with_the_single_group_flags_is_a_usage_error(capsys):
    assert main(["failover", "apply", "--plan", "p.json", "--group", "g", "--yes"]) == 2
    assert "--plan" in capsys.readouterr().err
