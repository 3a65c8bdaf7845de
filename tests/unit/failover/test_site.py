"""The site plan document and apply's per-group decision (pure)."""

from __future__ import annotations

import json

import pytest

from failover.plan import Method, PartitionPlan, Plan, Truth
from failover.site import ApplyGroup, SiteGroup, SitePlan, State, classify, read_plan, source_moved
from mirror.errors import ExitCode, UnsafeOperation, UsageError


def _plan(flow: str, group: str, truth: Truth, *parts: tuple[int, int, int, int]) -> Plan:
    """parts: (partition, target offset, unmirrored, may_reread)."""
    return Plan(
        flow,
        group,
        Method.TRANSLATE,
        truth,
        [PartitionPlan("orders", "nyc.orders", p, 10, o, un, may_reread=rr) for p, o, un, rr in parts],
    )


def _site() -> SitePlan:
    a = SiteGroup(
        "billing",
        "sf",
        ["nyc"],
        [_plan("f1", "billing", Truth.SOURCE, (0, 5, 0, 0), (1, 7, 2, 0))],
        offsets={("nyc.orders", 0): 5, ("nyc.orders", 1): 7},
        source_seen={"nyc": {("orders", 0): 10}},
    )
    b = SiteGroup(
        "payroll",
        "sf",
        ["nyc"],
        [_plan("f1", "payroll", Truth.CHECKPOINTS, (0, 3, 1, 4))],
        offsets={("nyc.orders", 0): 3},
        checkpoint_time_ms=1_000,
        refused="still active (1 on the target)",
    )
    return SitePlan(
        "nyc",
        ["nyc"],
        None,
        Method.TRANSLATE,
        61_000,
        "/x/mirror.yaml",
        [("f1", "nyc", "sf"), ("f2", "nyc", "sf")],
        [a, b],
    )


def test_totals_per_flow_and_site_and_checkpoint_age() -> None:
    doc = _site().to_json()
    assert doc["totals"] == {"groups": 2, "refused": 1, "partitions": 3, "unmirrored": 3, "may_reread": 4}
    f1, f2 = doc["flows"]
    assert (f1["flow"], f1["groups"], f1["partitions"], f1["unmirrored"], f1["may_reread"], f1["refused"]) == (
        "f1",
        2,
        3,
        3,
        4,
        1,
    )
    assert (f2["groups"], f2["partitions"]) == (0, 0)
    payroll = doc["groups"][1]
    assert payroll["checkpoint_age_ms"] == 60_000 and payroll["truth"] == "checkpoints" and payroll["may_reread"] == 4
    assert doc["groups"][0]["checkpoint_age_ms"] is None


def test_plan_file_round_trip_and_id() -> None:
    doc = json.loads(json.dumps(_site().to_json()))
    back = read_plan(doc, "plan.json")
    assert back.id == doc["id"] and len(back.id) == 16 and back.site == "nyc" and back.config == "/x/mirror.yaml"
    billing = back.groups[0]
    assert billing.offsets == {("nyc.orders", 0): 5, ("nyc.orders", 1): 7}
    assert billing.source_seen == {"nyc": {("orders", 0): 10}} and back.groups[1].refused
    assert _site().to_json()["id"] == doc["id"]  # the same plan, the same id


@pytest.mark.parametrize("doc", [{}, {"kind": "site-failover-plan", "version": 1}, [], {"kind": "x"}])
def test_not_a_plan_is_a_usage_error_naming_the_flag(doc: object) -> None:
    with pytest.raises(UsageError) as err:
        read_plan(doc, "p.json")
    assert err.value.exit_code == ExitCode.USAGE and str(err.value).startswith("--plan: p.json")


G = ApplyGroup(
    "billing", "sf", ["nyc"], {("t", 0): 50, ("t", 1): 60, ("t", 2): 70}, {("t", 0): 10, ("t", 1): 20}, None, None
)


def test_classify() -> None:
    assert classify(G, {("t", 0): 10, ("t", 1): 20}) == (State.TODO, [])  # t[2] had no commit: still none
    assert classify(G, {("t", 0): 50, ("t", 1): 20}) == (State.PARTIAL, [])  # an earlier run moved t[0]
    assert classify(G, {("t", 0): 50, ("t", 1): 60, ("t", 2): 70, ("u", 0): 1}) == (State.DONE, [])
    assert classify(G, {("t", 0): 11, ("t", 1): 20, ("t", 2): 3}) == (State.CHANGED, [("t", 0), ("t", 2)])


def test_source_moved() -> None:
    assert source_moved({("s", 0): 5, ("s", 1): 6}, {("s", 0): 5, ("s", 1): 9}) == [("s", 1)]
    assert source_moved({("s", 0): 5}, {}) == []  # nothing committed now: deleted, not moved on


def test_a_plan_edited_after_it_was_written_is_refused() -> None:
    """The id is the hash of the rest: a plan changed by hand (an offset, a group renamed) is
    not the plan that was reviewed; apply refuses it (exit 3) instead of committing it."""
    for edit in ("offset", "group"):
        doc = json.loads(json.dumps(_site().to_json()))
        if edit == "offset":
            doc["groups"][0]["offsets"][0]["offset"] = 0
        else:
            doc["groups"][0]["group"] = "no-such-group"
        with pytest.raises(UnsafeOperation) as err:
            read_plan(doc, "p.json")
        assert err.value.exit_code == ExitCode.UNSAFE and "changed after it was written" in str(err.value), edit


def test_a_one_group_json_output_is_not_taken_for_a_plan_file() -> None:
    doc = _plan("f1", "billing", Truth.SOURCE, (0, 5, 0, 0)).to_json()
    with pytest.raises(UsageError) as err:
        read_plan(doc, "p.json")
    assert "--out" in str(err.value) and "--json" in str(err.value)


def test_a_plan_missing_a_key_names_it() -> None:
    doc = json.loads(json.dumps(_site().to_json()))
    del doc["groups"][0]["offsets"]
    with pytest.raises(UsageError, match="no 'offsets' key"):
        read_plan(doc, "p.json")
