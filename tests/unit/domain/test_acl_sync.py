"""Which source ACLs a flow copies, renamed, and what a sync round changes (no network)."""

from __future__ import annotations

from mirror.domain.acl_sync import (
    Acl,
    AclFilter,
    AclScope,
    failback_topics,
    plan_sync,
    promotion_acls,
    wanted_acls,
)
from mirror.domain.naming import RenamePolicy


def acl(kind="topic", name="orders", pattern="literal", op="Read", perm="allow", who="User:app") -> Acl:
    return Acl(kind, name, pattern, who, "*", op, perm)


SCOPE = AclScope(
    source="nyc",
    rename=RenamePolicy.PREFIX,
    topics=["orders", "orders.eu", "users"],
    group_patterns=["billing.*"],
    groups=["billing-eu"],
)


def test_literal_prefixed_and_group_acls_are_copied_renamed_a_topic_prefix_as_literals():
    source = [
        acl(name="orders"),
        acl(name="orders.", pattern="prefixed", op="Describe"),
        acl(kind="group", name="billing-eu"),
        acl(kind="group", name="bill", pattern="prefixed", who="User:b"),
    ]
    assert set(wanted_acls(SCOPE, source)) == {
        acl(name="nyc.orders"),
        acl(name="nyc.orders.eu", op="Describe"),  # the mirrored topics `orders.` covers, not the prefix
        acl(kind="group", name="billing-eu"),  # groups keep their names
        acl(kind="group", name="billing-eu", who="User:b"),  # the checkpointed groups `bill` covers
    }


def test_identity_keeps_the_names():
    scope = AclScope("nyc", RenamePolicy.IDENTITY, ["orders"], [])
    source = [acl(), acl(name="ord", pattern="prefixed", who="User:b")]
    assert sorted(wanted_acls(scope, source)) == sorted([acl(), acl(who="User:b")])


def test_deny_is_copied_as_deny():
    assert list(wanted_acls(SCOPE, [acl(perm="deny")])) == [acl(name="nyc.orders", perm="deny")]


def test_write_and_other_operations_are_not_copied_before_a_failover():
    ops = ["Write", "Alter", "Delete", "Create", "All", "AlterConfigs", "DescribeConfigs", "IdempotentWrite"]
    assert wanted_acls(SCOPE, [acl(op=op) for op in ops]) == {}


def test_acls_beyond_the_flow_are_not_copied():
    source = [
        acl(name="payments"),  # not mirrored
        acl(name="*"),  # wildcard: every topic, mirrored or not
        acl(name="pay", pattern="prefixed"),  # covers no mirrored topic
        acl(pattern="match"),
        acl(kind="group", name="audit"),  # not a checkpointed group
        acl(kind="group", name="aud", pattern="prefixed"),
        acl(kind="transactional-id", name="orders"),
        acl(kind="cluster", name="kafka-cluster", op="Describe"),
    ]
    assert wanted_acls(SCOPE, source) == {}


def test_filters_narrow_by_principal_and_resource():
    scope = AclScope(
        "nyc",
        RenamePolicy.PREFIX,
        ["orders", "users"],
        [],
        filters=[AclFilter(principal="User:app-.*"), AclFilter(principal="User:ops", resource="users")],
    )
    source = [acl(who="User:app-1"), acl(who="User:other"), acl(who="User:ops"), acl(name="users", who="User:ops")]
    assert sorted(wanted_acls(scope, source)) == sorted(
        [acl(name="nyc.orders", who="User:app-1"), acl(name="nyc.users", who="User:ops")]
    )


def test_plan_creates_the_missing_and_removes_only_its_own():
    a, b, c, hand = acl(name="a"), acl(name="b"), acl(name="c"), acl(name="hand")
    plan = plan_sync(wanted=[a, b], owned=[b, c], on_target=[b, c, hand])
    assert plan.create == (a,)
    assert plan.remove == (c,)  # the sync's own, the source lost it
    assert plan.in_sync == 1
    assert hand not in plan.remove  # never the sync's: never touched


def test_a_wanted_acl_someone_else_made_is_left_theirs():
    theirs = acl(name="x")
    plan = plan_sync(wanted=[theirs], owned=[], on_target=[theirs])
    assert plan.create == () and plan.foreign == (theirs,) and plan.in_sync == 1
    # Source drops it: not the sync's, so it stays.
    assert plan_sync(wanted=[], owned=[], on_target=[theirs]).remove == ()


def test_a_claimed_acl_already_gone_is_only_forgotten():
    gone = acl(name="gone")
    plan = plan_sync(wanted=[], owned=[gone], on_target=[])
    assert plan.remove == () and plan.forget == (gone,)


def test_two_workers_with_one_record_converge_without_undoing_each_other():
    """Worker A claims and creates; worker B, reading the same record, sees nothing to do."""
    wanted = [acl(name="nyc.orders")]
    first = plan_sync(wanted, owned=[], on_target=[])
    owned = set(first.create)  # claimed before created
    on_target = set(first.create)
    second = plan_sync(wanted, owned=owned, on_target=on_target)
    assert second.changes == 0 and second.in_sync == 1


def test_key_round_trips():
    a = acl(kind="group", name='we"ird', pattern="prefixed", perm="deny")
    assert Acl.from_key(a.key()) == a


def test_promotion_copies_write_of_moved_topics_and_the_producers_ids():
    source = [
        acl(op="Write", who="User:prod"),
        acl(name="ord", pattern="prefixed", op="Write", who="User:prod2"),
        acl(name="users", op="Write", who="User:other"),  # not moved
        acl(op="Read", who="User:prod"),  # the sync's job
        acl(kind="transactional-id", name="prod-", pattern="prefixed", op="Write", who="User:prod"),
        acl(kind="transactional-id", name="x", op="Write", who="User:other"),  # not a moved topic's producer
        acl(kind="cluster", name="kafka-cluster", op="IdempotentWrite", who="User:prod"),
    ]
    assert promotion_acls(source, {"orders": "nyc.orders"}) == sorted(
        [
            acl(name="nyc.orders", op="Write", who="User:prod"),
            acl(name="nyc.orders", op="Write", who="User:prod2"),  # the prefix, as the moved topics it covers
            acl(kind="transactional-id", name="prod-", pattern="prefixed", op="Write", who="User:prod"),
            acl(kind="cluster", name="kafka-cluster", op="IdempotentWrite", who="User:prod"),
        ]
    )


def test_failback_names_the_dr_topics_back_by_the_flows_rename():
    dr = {"nyc.orders": 3, "nyc.orders.eu": 1, "sf-own": 2, "la.orders": 1}
    assert failback_topics(dr, "nyc", RenamePolicy.PREFIX) == {"orders": 3, "orders.eu": 1}
    assert failback_topics({"orders": 3}, "nyc", RenamePolicy.IDENTITY) == {"orders": 3}


def test_failback_promotion_copies_the_dr_copies_write_back_under_the_source_names():
    dr = [
        acl(name="nyc.orders", op="Write", who="User:prod"),
        acl(name="nyc.ord", pattern="prefixed", op="Write", who="User:prod2"),
        acl(name="nyc.", pattern="prefixed", op="Write", who="User:wide"),  # covers the moved nyc.orders only
        acl(name="orders", op="Write", who="User:sf-local"),  # sf's own topic, not a copy
        acl(name="nyc.orders", op="Read", who="User:prod"),  # the sync's job
        acl(kind="cluster", name="kafka-cluster", op="IdempotentWrite", who="User:prod"),
    ]
    assert promotion_acls(dr, {"nyc.orders": "orders"}) == sorted(
        [
            acl(name="orders", op="Write", who="User:prod"),
            acl(name="orders", op="Write", who="User:prod2"),
            acl(name="orders", op="Write", who="User:wide"),
            acl(kind="cluster", name="kafka-cluster", op="IdempotentWrite", who="User:prod"),
        ]
    )
