"""The ACL sync loop removes only ACLs it created, and keeps what the one DR copy left needs (no network)."""

from __future__ import annotations

from mirror import config
from mirror.errors import ClusterUnavailable
from mirror.run.aclsync import AclSyncer
from mirror.store.sqlite import SqliteStore
from tests.unit.run.test_aclsync import FakeCluster, _setup, _syncer, read

TWO_FLOWS = """\
clusters: {nyc: {bootstrap: "a:1"}, la: {bootstrap: "c:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: a, source: nyc, target: sf, groups: ["billing"], topics: {include: ["orders.*"]}, sync_acls: true}
  - {name: b, source: la, target: sf, groups: ["billing"], topics: {include: ["orders.*"]}, sync_acls: true}
offset_store: {kind: sqlite, path: PATH}
"""


class FailingOnce(FakeCluster):
    """A target whose first CreateAcls does not get through (a timeout, a broker restart)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = True

    def create_bindings(self, acls):
        if self.fail:
            self.fail = False
            raise ClusterUnavailable("cluster 'sf' did not answer within 30s while trying to create ACLs")
        super().create_bindings(acls)


def test_a_claim_whose_creation_failed_does_not_make_a_later_hand_made_acl_the_syncs(tmp_path):
    # the flow: nyc -> sf, orders.* mirrored
    cfg, src, _, store = _setup(tmp_path, [read("orders")])
    dst = FailingOnce()
    syncer = _syncer(cfg, store, src, dst)
    syncer.safe_tick(1.0)  # claimed, then the creation failed: nothing on the target
    assert dst.acls == set()
    hand = read("nyc.orders")
    dst.acls.add(hand)  # the operator, seeing consumers refused, grants it by hand
    syncer.tick()
    src.acls.clear()  # the source drops its ACL
    syncer.tick()
    assert hand in dst.acls, "the sync removed an ACL it never created (its failed claim was kept)"


def test_a_flow_does_not_remove_a_shared_target_acl_another_flow_still_copies(tmp_path):
    # Groups keep their names, so two flows into sf want the same group ACL there.
    cfg = config.parse(TWO_FLOWS.replace("PATH", str(tmp_path / "o.db")), env={})
    store = SqliteStore(tmp_path / "o.db")
    billing = read("billing", kind="group")
    nyc, la, sf = FakeCluster([billing], ["orders"]), FakeCluster([billing], ["orders"]), FakeCluster()
    flow_a = AclSyncer(cfg, cfg.flows[0], store, source=nyc, target=sf)
    flow_b = AclSyncer(cfg, cfg.flows[1], store, source=la, target=sf)
    flow_a.tick()
    flow_b.tick()  # present already: flow b leaves it to flow a
    nyc.acls.clear()  # nyc drops it; la still has it and flow b still copies it
    flow_a.tick()
    assert billing in sf.acls, "flow a removed the group ACL flow b's source still grants"


class DeletesThen(FakeCluster):
    """A target whose DeleteAcls is followed, before the deleting worker forgets, by `then()`."""

    then = staticmethod(lambda: None)

    def delete_bindings(self, acls):
        super().delete_bindings(acls)
        self.then()


def test_two_workers_racing_a_source_deletion_leave_no_unrecorded_copy(tmp_path):
    # Worker 2 read the source before it dropped the ACL and the target after worker 1 deleted
    # the copy: it re-creates it (its claim is already there), then worker 1 forgets the claim.
    cfg, src, _, store = _setup(tmp_path, [read("orders")])
    dst = DeletesThen()
    one = _syncer(cfg, store, src, dst)
    one.tick()
    stale = FakeCluster([read("orders")], ["orders", "payments"])  # worker 2's earlier view of nyc
    two = _syncer(cfg, store, stale, dst)
    dst.then = two.tick
    src.acls.clear()
    one.tick()
    copy = read("nyc.orders")
    assert copy not in dst.acls or copy.key() in store.synced_acls("f"), (
        "a copy the source no longer has is left on the target with no record: never removed"
    )


def test_a_source_topic_deleted_does_not_take_the_read_grant_off_the_copy_that_is_kept(tmp_path):
    # Without sync_topic_deletes the target copy stays ("the DR copy may be the only one left"),
    # and Kafka keeps the source's ACLs of a deleted topic; yet the sync stops wanting the copy's
    # READ and removes it, so nobody may read the one copy left.
    cfg, src, dst, store = _setup(tmp_path, [read("orders")])
    dst._topics["nyc.orders"] = 1  # the DR copy the mirror made
    syncer = _syncer(cfg, store, src, dst)
    syncer.tick()
    src._topics.pop("orders")  # deleted on the source, by mistake; its ACL is still there
    syncer.tick()
    assert read("nyc.orders") in dst.acls, "the kept DR copy lost its consumers' READ"
    dst._topics.pop("nyc.orders")  # the copy deleted too: its grant goes
    syncer.tick()
    assert read("nyc.orders") not in dst.acls


class EmptyOnce(FakeCluster):
    """A target whose DescribeAcls once answers nothing although its DescribeCluster allowed it
    (the grant changed between the two requests, or another broker answered before the ACL
    change reached it): what librdkafka makes of a refused DescribeAcls."""

    def __init__(self, acls=()) -> None:
        super().__init__(acls)
        self.empty = False

    def describe_acls(self, need="Describe"):
        if self.empty:
            self.empty = False
            return []
        return super().describe_acls(need)


def test_one_empty_target_listing_does_not_make_hand_made_acls_the_syncs(tmp_path):
    cfg, src, _, store = _setup(tmp_path, [read("orders")])
    hand = read("nyc.orders")
    dst = EmptyOnce([hand])  # made by hand before the sync ran: someone else's
    syncer = _syncer(cfg, store, src, dst)
    syncer.tick()
    assert store.synced_acls("f") == set()
    dst.empty = True
    syncer.tick()  # "missing": claimed and created (CreateAcls of an existing binding succeeds)
    src.acls.clear()
    syncer.tick()
    assert hand in dst.acls, "a hand-made ACL was claimed after one empty listing, then removed"


def test_the_last_flow_claiming_a_shared_copy_removes_it(tmp_path):
    cfg = config.parse(TWO_FLOWS.replace("PATH", str(tmp_path / "o.db")), env={})
    store = SqliteStore(tmp_path / "o.db")
    billing = read("billing", kind="group")
    nyc, la, sf = FakeCluster([billing], ["orders"]), FakeCluster([billing], ["orders"]), FakeCluster()
    flow_a = AclSyncer(cfg, cfg.flows[0], store, source=nyc, target=sf)
    flow_b = AclSyncer(cfg, cfg.flows[1], store, source=la, target=sf)
    flow_a.tick()
    flow_b.tick()
    assert store.synced_acls("b") == {billing.key()}  # a copy another flow made: shared, not hand-made
    nyc.acls.clear()
    flow_a.tick()
    assert store.synced_acls("a") == set() and billing in sf.acls
    la.acls.clear()
    flow_b.tick()
    assert billing not in sf.acls and store.synced_acls("b") == set()


def test_a_second_empty_listing_in_a_row_is_believed(tmp_path, caplog):
    cfg, src, dst, store = _setup(tmp_path, [read("orders")])
    syncer = _syncer(cfg, store, src, dst)
    syncer.tick()
    dst.acls.clear()  # really emptied (by hand): the first empty listing is doubted, the second is not
    with caplog.at_level("WARNING"):
        assert syncer.tick().changes == 0
    assert "round skipped" in caplog.text
    syncer.tick()
    assert read("nyc.orders") in dst.acls
