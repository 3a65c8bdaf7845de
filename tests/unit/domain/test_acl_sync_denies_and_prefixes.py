"""ACL sync and promotion never grant more than the source: DENYs kept, prefixes not widened (no network)."""

from __future__ import annotations

from mirror.domain.acl_sync import Acl, AclFilter, AclScope, promotion_acls, wanted_acls
from mirror.domain.naming import RenamePolicy


def acl(name="orders", op="Read", perm="allow", who="User:app", pattern="literal", kind="topic") -> Acl:
    return Acl(kind, name, pattern, who, "*", op, perm)


def covers(a: Acl, topic: str) -> bool:
    return a.kind == "topic" and (a.name == topic if a.pattern == "literal" else topic.startswith(a.name))


SCOPE = AclScope(source="nyc", rename=RenamePolicy.PREFIX, topics=["orders"], group_patterns=["billing"])


def denied_on(acls, topic: str, who: str = "User:app") -> bool:
    return any(a.permission == "deny" and a.principal == who and covers(a, topic) for a in acls)


def test_a_deny_all_on_the_source_is_not_lost_while_its_read_allow_is_copied():
    # Source: User:app may not read `orders` (DENY All beats ALLOW Read). The target must not let it.
    wanted = wanted_acls(SCOPE, [acl(), acl(op="All", perm="deny")])
    assert acl("nyc.orders") in wanted
    assert denied_on(wanted, "nyc.orders"), "DENY All dropped: the copied ALLOW Read wins on the target"


def test_a_deny_on_the_wildcard_topic_is_not_lost_while_a_read_allow_is_copied():
    wanted = wanted_acls(SCOPE, [acl(), acl("*", perm="deny")])
    assert acl("nyc.orders") in wanted
    assert denied_on(wanted, "nyc.orders"), "DENY Read on topic '*' dropped: the copied ALLOW wins"


def test_acl_filters_never_drop_a_deny_while_keeping_the_allow_it_overrides():
    scope = AclScope("nyc", RenamePolicy.PREFIX, ["orders"], ["billing"], filters=[AclFilter(principal="User:app")])
    wanted = wanted_acls(scope, [acl(), acl(perm="deny", who="User:*")])
    assert acl("nyc.orders") in wanted
    assert denied_on(wanted, "nyc.orders", who="User:*"), "a DENY for User:* filtered out, its ALLOW copied"


def test_identity_prefixed_copy_does_not_cover_target_topics_the_flow_does_not_mirror():
    # identity: the target's own `ops-local` is no copy, yet prefix `o` on the target covers it.
    scope = AclScope("nyc", RenamePolicy.IDENTITY, ["orders"], ["billing"])
    wanted = wanted_acls(scope, [acl("o", pattern="prefixed")])
    assert wanted, "the prefixed ACL covering `orders` is wanted"
    assert not any(covers(a, "ops-local") for a in wanted), f"grants Read on a target-local topic: {list(wanted)}"


def test_prefixed_copy_does_not_cover_a_source_topic_the_flow_does_not_mirror():
    # `other` exists on nyc and is not mirrored by this flow; `nyc.o` covers its name on the target.
    wanted = wanted_acls(SCOPE, [acl("o", pattern="prefixed")])
    assert wanted
    assert not any(covers(a, "nyc.other") for a in wanted), f"covers the unmirrored nyc.other: {list(wanted)}"


def test_promotion_keeps_a_deny_all_that_overrides_the_promoted_write():
    out = promotion_acls(
        [acl(op="Write", who="User:prod"), acl(op="All", perm="deny", who="User:prod")], {"orders": "nyc.orders"}
    )
    assert acl("nyc.orders", op="Write", who="User:prod") in out
    assert denied_on(out, "nyc.orders", who="User:prod"), "DENY All dropped: the promoted Write wins"


def test_failback_promotion_does_not_widen_a_prefix_to_source_topics_never_moved():
    # The DR cluster's `nyc.o` covers only copies from nyc; named back to `o` it covers nyc's own
    # `other`, which this flow never mirrored (nor moves back): Write granted there.
    out = promotion_acls([acl("nyc.o", op="Write", who="User:prod", pattern="prefixed")], {"nyc.orders": "orders"})
    assert out
    assert not any(covers(a, "other") for a in out), f"Write granted on the unmoved `other`: {out}"


def test_identity_promotion_does_not_grant_write_on_target_topics_never_moved():
    out = promotion_acls([acl("o", op="Write", who="User:prod", pattern="prefixed")], {"orders": "orders"})
    assert out
    assert not any(covers(a, "ops-local") for a in out), f"Write granted on the target's own ops-local: {out}"


def test_a_principal_only_denied_write_does_not_get_its_transactional_id_grants_promoted():
    source = [
        acl(op="Write", perm="deny", who="User:blocked"),
        acl("txn-", op="Write", who="User:blocked", pattern="prefixed", kind="transactional-id"),
    ]
    out = promotion_acls(source, {"orders": "nyc.orders"})
    assert not [a for a in out if a.permission == "allow"], f"ALLOWs promoted for a producer only denied: {out}"


def test_a_literal_copy_a_prefixed_twin_on_the_target_grants_is_not_made_again():
    from mirror.domain.acl_sync import plan_sync

    twin = acl("nyc.o", pattern="prefixed")
    plan = plan_sync([acl("nyc.orders")], owned=[], on_target=[twin])
    assert plan.create == () and plan.in_sync == 1
    # ...unless the twin is the sync's own stale copy, going this round: then the literal is made.
    plan = plan_sync([acl("nyc.orders")], owned=[twin], on_target=[twin])
    assert plan.remove == (twin,) and plan.create == (acl("nyc.orders"),)
