"""`--promote` against in-memory clusters: only what the target lacks is added, recorded in the
backup before it is created, and removed again from the record alone."""

from __future__ import annotations

import json
from pathlib import Path

from failover.promote import Direction, demote, plan_pairs, plan_promotions, promote, recorded, start_backup
from failover.site import ApplyGroup, PlanDoc
from failover.siteapply import read_backup
from mirror import config
from mirror.cli import main
from mirror.domain.acl_sync import Acl

YAML = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}, la: {bootstrap: "c:1"}}
flows:
  - {name: f, source: nyc, target: sf, groups: [billing], topics: {include: ["orders.*"]}}
  - {name: g, source: la, target: sf, topics: {include: ["orders.*"]}}
"""


def acl(name, op="Write", who="User:prod", kind="topic") -> Acl:
    return Acl(kind, name, "literal", who, "*", op, "allow")


class FakeCluster:
    def __init__(self, acls=(), topics=()) -> None:
        self.acls = set(acls)
        self._topics = dict.fromkeys(topics, 1)

    def topics(self):
        return dict(self._topics)

    def describe_acls(self, need="Describe"):
        return sorted(self.acls)

    def create_bindings(self, acls):
        self.acls |= set(acls)

    def delete_bindings(self, acls):
        self.acls -= set(acls)


def test_promote_adds_what_the_target_lacks_records_it_and_demote_removes_only_that(tmp_path: Path) -> None:
    cfg = config.parse(YAML, env={})
    already = acl("nyc.orders", who="User:other")
    clusters = {
        "nyc": FakeCluster([acl("orders"), acl("orders", who="User:other"), acl("payments")], ["orders", "payments"]),
        "la": FakeCluster([acl("orders", who="User:la")], ["orders"]),  # flow g is not in the plan
        "sf": FakeCluster([already]),
    }
    plan = PlanDoc("id", "nyc", "/x.yaml", [ApplyGroup("billing", "sf", ["nyc"], {}, {}, None, None)])
    todo = plan_promotions(cfg, plan_pairs(plan), clusters.__getitem__)
    assert [(p.cluster, p.acl) for p in todo] == [("sf", acl("nyc.orders"))]

    backup = tmp_path / "b.json"
    backup.write_text(json.dumps({"kind": "site-backup", "groups": []}))
    promote(backup, todo, clusters.__getitem__)
    assert clusters["sf"].acls == {already, acl("nyc.orders")}
    doc = json.loads(backup.read_text())
    assert recorded(doc) == todo

    demote(recorded(doc), clusters.__getitem__)
    assert clusters["sf"].acls == {already}  # someone else's stays


def test_promote_without_a_site_plan_is_a_usage_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(YAML)
    assert main(["failover", "apply", "-c", str(path), "--flow", "f", "--yes", "--promote"]) == 2
    assert "--promote needs --plan" in capsys.readouterr().err


def test_failback_promotes_the_dr_copies_grants_back_and_its_backup_undoes_only_that(tmp_path: Path) -> None:
    cfg = config.parse(YAML, env={})
    already = acl("orders", who="User:other")
    clusters = {
        # The old primary need not list the topics: they are named back from the DR cluster's.
        "nyc": FakeCluster([already]),
        "sf": FakeCluster(
            [acl("nyc.orders"), acl("nyc.orders", who="User:other"), acl("nyc.payments"), acl("la.orders")],
            ["nyc.orders", "nyc.payments", "la.orders"],
        ),
        "la": FakeCluster(),
    }
    todo = plan_promotions(cfg, {("nyc", "sf")}, clusters.__getitem__, Direction.FAILBACK)
    assert [(p.cluster, p.acl) for p in todo] == [("nyc", acl("orders"))]  # payments is not mirrored

    backup = tmp_path / "failback.json"
    start_backup(backup, "/x.yaml", 1)
    promote(backup, todo, clusters.__getitem__)
    assert clusters["nyc"].acls == {already, acl("orders")}
    assert read_backup(backup) == (None, [])  # `failover import --backup` takes it: no group to restore
    start_backup(backup, "/x.yaml", 2)  # a second run appends to the first run's record
    assert recorded(json.loads(backup.read_text())) == todo

    demote(recorded(json.loads(backup.read_text())), clusters.__getitem__)
    assert clusters["nyc"].acls == {already}


def test_failback_backup_without_promote_yes_is_a_usage_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(YAML)
    assert main(["failback", "-c", str(path), "--flow", "f", "--promote", "--backup", str(tmp_path / "b")]) == 2
    assert "--backup records the ACLs --promote --yes adds" in capsys.readouterr().err
