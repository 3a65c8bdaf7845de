"""`--promote`'s record and its undo: bad input is one line, only what was added goes (no network)."""

from __future__ import annotations

import json
from pathlib import Path

from failover.promote import Direction, demote, plan_promotions, promote, recorded
from mirror import config
from mirror.cli import main
from mirror.errors import ClusterUnavailable
from tests.unit.failover.test_promote import YAML, FakeCluster, acl


def _backup(tmp_path: Path, rows: list) -> Path:
    path = tmp_path / "b.json"
    doc = {"version": 1, "kind": "site-backup", "plan_id": None, "config": "x", "time_ms": 1, "groups": []}
    path.write_text(json.dumps({**doc, "promoted_acls": rows}))
    return path


def test_import_of_a_backup_with_a_damaged_promoted_acl_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(YAML)
    backup = _backup(tmp_path, [{"cluster": "sf", "acl": "not json"}])
    try:
        code = main(["failover", "import", "-c", str(cfg), "--backup", str(backup), "--yes"])
    except ValueError as exc:  # json.JSONDecodeError escapes main: a traceback to the operator
        raise AssertionError(f"a damaged promoted_acls entry escapes as {exc!r}") from exc
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "promoted_acls" in err, err


class FailsOn(FakeCluster):
    def create_bindings(self, acls):
        raise ClusterUnavailable("cluster 'sf' did not answer within 30s while trying to create ACLs")


def test_the_undo_does_not_remove_a_grant_promotion_recorded_but_never_created(tmp_path: Path) -> None:
    cfg = config.parse(YAML, env={})
    clusters = {"nyc": FakeCluster([acl("orders")], ["orders"]), "sf": FailsOn(), "la": FakeCluster()}
    todo = plan_promotions(cfg, {("nyc", "sf")}, clusters.__getitem__)
    backup = _backup(tmp_path, [])
    try:
        promote(backup, todo, clusters.__getitem__)  # recorded, then the creation fails
    except ClusterUnavailable:
        pass
    hand = acl("nyc.orders")
    clusters["sf"].acls.add(hand)  # the operator grants it by hand, the promotion having failed
    demote(recorded(json.loads(backup.read_text())), clusters.__getitem__)
    assert hand in clusters["sf"].acls, "import --backup removed a grant --promote never created"


IDENTITY = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: f, source: nyc, target: sf, rename: identity, topics: {include: ["orders.*"]}}
"""


def test_identity_failback_does_not_promote_grants_of_dr_topics_never_mirrored(tmp_path: Path) -> None:
    # sf's own `orders.sf-local` (made there, never mirrored) matches the flow's pattern; with
    # identity names it cannot be told from a copy by its name, yet nyc does list what it holds.
    cfg = config.parse(IDENTITY, env={})
    local = acl("orders.sf-local", who="User:sf-app")
    clusters = {
        "nyc": FakeCluster([], ["orders"]),
        "sf": FakeCluster([acl("orders"), local], ["orders", "orders.sf-local"]),
    }
    todo = plan_promotions(cfg, {("nyc", "sf")}, clusters.__getitem__, Direction.FAILBACK)
    assert acl("orders") in [p.acl for p in todo]
    assert local not in [p.acl for p in todo], "Write on nyc for a topic never mirrored from nyc"


def test_import_of_a_backup_naming_an_unknown_cluster_names_the_backup(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(YAML)
    backup = _backup(tmp_path, [{"cluster": "tokyo", "acl": acl("nyc.orders").key()}])
    code = main(["failover", "import", "-c", str(cfg), "--backup", str(backup), "--yes"])
    err = capsys.readouterr().err
    assert code == 2 and str(backup) in err and "tokyo" in err and "--cluster" not in err, err


def test_a_failed_promotion_keeps_recorded_what_the_cluster_did_create(tmp_path: Path) -> None:
    class CreatesThenFails(FakeCluster):
        def create_bindings(self, acls):
            super().create_bindings(acls)  # applied by the broker, the answer lost
            raise ClusterUnavailable("cluster 'sf' did not answer within 30s while trying to create ACLs")

    cfg = config.parse(YAML, env={})
    clusters = {"nyc": FakeCluster([acl("orders")], ["orders"]), "sf": CreatesThenFails(), "la": FakeCluster()}
    todo = plan_promotions(cfg, {("nyc", "sf")}, clusters.__getitem__)
    backup = _backup(tmp_path, [])
    try:
        promote(backup, todo, clusters.__getitem__)
    except ClusterUnavailable:
        pass
    assert [p.acl for p in recorded(json.loads(backup.read_text()))] == [acl("nyc.orders")]
