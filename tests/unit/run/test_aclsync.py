"""The ACL sync loop over in-memory clusters and a real SQLite store: what it claims, creates,
removes and leaves alone, and how a refusal is reported (no network)."""

from __future__ import annotations

import logging
import threading

from mirror import config
from mirror.domain.acl_sync import Acl
from mirror.errors import AuthorizationFailed
from mirror.metrics import RunMetrics
from mirror.run.aclsync import AclSyncer
from mirror.store.sqlite import SqliteStore

YAML = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: f, source: nyc, target: sf, groups: ["billing"], topics: {include: ["orders.*"]}, sync_acls: true}
offset_store: {kind: sqlite, path: PATH}
"""


class FakeCluster:
    """The admin calls the sync makes, on a set of ACLs; `refuse` names a missing cluster grant."""

    def __init__(self, acls=(), topics=()) -> None:
        self.acls = set(acls)
        self._topics = dict.fromkeys(topics, 1)
        self.refuse: str | None = None
        self.created: list[Acl] = []

    def topics(self):
        return dict(self._topics)

    def describe_acls(self, need="Describe"):
        if self.refuse:
            raise AuthorizationFailed(f"missing {self.refuse} on the cluster")
        return sorted(self.acls)

    def create_bindings(self, acls):
        self.created += acls
        self.acls |= set(acls)

    def delete_bindings(self, acls):
        self.acls -= set(acls)


def read(name, who="User:app", op="Read", perm="allow", pattern="literal", kind="topic"):
    return Acl(kind, name, pattern, who, "*", op, perm)


def _setup(tmp_path, source_acls):
    cfg = config.parse(YAML.replace("PATH", str(tmp_path / "o.db")), env={})
    src, dst = FakeCluster(source_acls, ["orders", "payments"]), FakeCluster()
    store = SqliteStore(tmp_path / "o.db")
    return cfg, src, dst, store


def _syncer(cfg, store, src, dst, metrics=None):
    return AclSyncer(cfg, cfg.flows[0], store, metrics, source=src, target=dst)


def test_a_round_copies_renamed_claims_first_and_a_restart_agrees(tmp_path):
    cfg, src, dst, store = _setup(tmp_path, [read("orders"), read("orders", op="Write"), read("payments")])
    plan = _syncer(cfg, store, src, dst).tick()
    assert dst.acls == {read("nyc.orders")} and plan.create == (read("nyc.orders"),)
    assert store.synced_acls("f") == {read("nyc.orders").key()}
    # A second worker (or a restart) with the same store: nothing to do.
    again = _syncer(cfg, store, src, dst).tick()
    assert again.changes == 0 and again.in_sync == 1


def test_removed_at_the_source_goes_but_a_hand_made_acl_stays(tmp_path):
    cfg, src, dst, store = _setup(tmp_path, [read("orders"), read("orders", who="User:ops")])
    hand = read("nyc.orders", who="User:ops")
    dst.acls.add(hand)  # there before the sync: someone else's
    syncer = _syncer(cfg, store, src, dst)
    syncer.tick()
    assert hand not in dst.created
    src.acls.clear()
    plan = syncer.tick()
    assert plan.remove == (read("nyc.orders"),)
    assert dst.acls == {hand}
    assert store.synced_acls("f") == set()


def test_metrics_count_rounds_copies_and_removals(tmp_path):
    cfg, src, dst, store = _setup(tmp_path, [read("orders"), read("billing", kind="group", perm="deny")])
    m = RunMetrics.create()
    syncer = _syncer(cfg, store, src, dst, m.acl_sync)
    syncer.tick()
    src.acls = {read("orders")}
    syncer.tick()
    value = m.registry.get_sample_value
    assert value("mirror_acl_sync_rounds_total", {"flow": "f"}) == 2
    assert value("mirror_acl_sync_created_total", {"flow": "f"}) == 2
    assert value("mirror_acl_sync_removed_total", {"flow": "f"}) == 1
    assert value("mirror_acl_sync_in_sync", {"flow": "f"}) == 1


def test_a_refused_round_is_one_warning_naming_the_grant_and_changes_nothing(tmp_path, caplog):
    cfg, src, dst, store = _setup(tmp_path, [read("orders")])
    m = RunMetrics.create()
    syncer = _syncer(cfg, store, src, dst, m.acl_sync)
    syncer.tick()
    src.refuse = "Describe"  # a refused DescribeAcls must never read as "the source has none"
    with caplog.at_level(logging.WARNING, logger="mirror.run.aclsync"):
        syncer.safe_tick(1.0)
        syncer.safe_tick(1.0)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and all("missing Describe on the cluster" in w for w in warnings)
    assert dst.acls == {read("nyc.orders")}
    assert m.registry.get_sample_value("mirror_acl_sync_refused_total", {"flow": "f"}) == 2


def test_run_stops_on_the_event(tmp_path):
    cfg, src, dst, store = _setup(tmp_path, [read("orders")])
    stop = threading.Event()
    t = threading.Thread(target=_syncer(cfg, store, src, dst).run, args=(stop,))
    t.start()
    stop.set()
    t.join(10)
    assert not t.is_alive() and dst.acls == {read("nyc.orders")}  # the first round runs at once
