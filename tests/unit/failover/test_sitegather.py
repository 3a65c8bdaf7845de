"""Why a site plan moves no group: one line per flow (pure: the flows and what was found)."""

from __future__ import annotations

from types import SimpleNamespace

from failover.plan import Method
from failover.sitegather import SiteRequest, nothing_to_move
from mirror.errors import ExitCode


def _flow(name: str, source: str, groups: list[str]) -> SimpleNamespace:
    return SimpleNamespace(name=name, source=source, target="sf", groups=groups)


def test_each_flow_says_why_it_moves_nothing() -> None:
    flows = [
        _flow("a", "nyc", ["billing.*"]),
        _flow("b", "nyc2", ["pay.*"]),
        _flow("c", "nyc", []),
        _flow("d", "nyc", ["ops.*"]),
    ]
    config = SimpleNamespace(flows=flows)
    ctxs = [SimpleNamespace(flow=f, config=config) for f in flows]
    found = {"a": [], "b": [], "c": [], "d": ["ops-1", "ops-2"]}
    req = SiteRequest("nyc", None, ["billing-eu.*"], Method.TRANSLATE, None, 0, "/x.yaml")
    err = nothing_to_move(req, ctxs, found, {"nyc2"})  # type: ignore[arg-type]
    assert err.exit_code == ExitCode.UNSAFE
    first, *lines = str(err).splitlines()
    assert first == "the plan would move no group from 'nyc'; nothing was written:"
    assert lines == [
        "  flow a (nyc -> sf): no group on 'nyc' and no stored checkpoint matches billing.* and --group billing-eu.*",
        "  flow b (nyc2 -> sf): cluster 'nyc2' did not answer, and no stored checkpoint is of a group matching "
        "pay.* and --group billing-eu.*",
        "  flow c (nyc -> sf): it names no groups to fail over (flows[2].groups is empty)",
        "  flow d (nyc -> sf): 2 group(s) match ops.* and --group billing-eu.* but none read its topics: ops-1, ops-2",
    ]


def test_a_plan_whose_every_group_is_refused_moves_nothing_and_says_why_per_group() -> None:
    """Apply refuses a plan with any refused group; one whose groups are all refused would
    move nothing, so `plan` itself refuses it (exit 3), naming each group's reason."""
    from failover.site import SiteGroup
    from failover.sitegather import every_group_refused

    a = SiteGroup("billing", "sf", ["nyc"])
    a.refused = "still active on 'sf' (2 members)"
    b = SiteGroup("audit", "sf", ["nyc"])
    b.refused = "cannot be planned: no committed offsets"
    err = every_group_refused("nyc", [a, b])
    assert err is not None and err.exit_code == ExitCode.UNSAFE
    assert str(err).splitlines() == [
        "the plan would move no group from 'nyc': every group is refused; nothing was written:",
        "  billing: still active on 'sf' (2 members)",
        "  audit: cannot be planned: no committed offsets",
    ]
    ok = SiteGroup("ok", "sf", ["nyc"])
    assert every_group_refused("nyc", [a, ok]) is None
