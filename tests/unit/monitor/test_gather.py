"""`gather_flow` and a missing grant: `mirror lag` (strict) stops with it, the exporter reports it and goes on."""

from __future__ import annotations

from typing import Any

import pytest

from mirror import config
from mirror.errors import AuthorizationFailed
from mirror.kafka import PendingOffsets, Watermarks
from mirror.monitor.gather import gather_flow

BODY = """\
clusters:
  nyc: {bootstrap: "127.0.0.1:19092"}
  sf: {bootstrap: "127.0.0.1:19192"}
flows:
  - {name: f, source: nyc, target: sf, topics: {include: ["t"]}, groups: ["billing"]}
"""


def _denied(what: str) -> AuthorizationFailed:
    return AuthorizationFailed(f"cluster 'sf': User:mirror is not allowed to {what}")


class FakeAdmin:
    """Our Admin port, in memory: `hidden` topics and `denied` groups answer as Kafka does for
    a principal without Describe (left out of listings, refused by name)."""

    def __init__(self, topics: dict[str, int], hidden: set[str] = frozenset(), denied: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self._topics, self.hidden, self.denied = topics, hidden, denied

    def topics(self) -> dict[str, int]:
        return {t: n for t, n in self._topics.items() if t not in self.hidden}

    def require_visible(self, patterns: Any, listed: Any, need: str = "Read", literal: Any = ()) -> None:
        if any(p in self.hidden for p in patterns):
            raise _denied("see topic")

    def hidden_topics(self, names: Any) -> list[str]:
        return sorted(n for n in names if n in self.hidden)

    def watermarks(self, parts: Any) -> dict[tuple[str, int], Watermarks]:
        return {k: Watermarks(0, 10) for k in parts}

    def end_offsets(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], int]:
        return {k: 10 for k in parts}

    def request_watermarks(self, parts: Any, committed_only: bool = True) -> PendingOffsets[Watermarks]:
        return PendingOffsets(lambda: self.watermarks(parts))

    def request_end_offsets(self, parts: Any, committed_only: bool = True) -> PendingOffsets[int]:
        return PendingOffsets(lambda: self.end_offsets(parts))

    def list_groups(self) -> list[str]:
        return []  # "billing" exists nowhere the principal may see

    def group_offsets(self, group: str, partitions: object = None) -> dict[tuple[str, int], int]:
        if group in self.denied:
            raise _denied(f"read offsets of group {group!r}: missing Describe on group {group!r}")
        return {}

    def request_group_offsets(self, group: str, partitions: object = None) -> PendingOffsets[int]:
        return PendingOffsets(lambda: self.group_offsets(group, partitions))

    def group_members(self, group: str) -> int:
        return 0


def _cfg() -> config.Config:
    return config.parse(BODY, env={})


@pytest.mark.parametrize(("source", "target", "said"), [
    (FakeAdmin({"t": 1}), FakeAdmin({"nyc.t": 1}, hidden={"nyc.t"}), "missing Describe on topic 'nyc.t'"),
    (FakeAdmin({"t": 1}, denied={"billing"}), FakeAdmin({"nyc.t": 1}), "missing Describe on group 'billing'"),
    (FakeAdmin({"t": 1}), FakeAdmin({"nyc.t": 1}, denied={"billing"}), "missing Describe on group 'billing'"),
])
def test_a_missing_grant_is_raised_by_lag_and_reported_by_the_exporter(source, target, said):
    cfg = _cfg()
    flow = cfg.flows[0]
    with pytest.raises(AuthorizationFailed) as info:
        gather_flow(cfg, flow, source=source, target=target, strict=True)  # type: ignore[arg-type]
    assert said in str(info.value)
    lag = gather_flow(cfg, flow, source=source, target=target)  # type: ignore[arg-type]
    assert [p.source_topic for p in lag.partitions] == ["t"]  # what could be gathered still is
    assert len(lag.errors) == 1 and said in lag.errors[0]


def test_nothing_denied_nothing_said():
    cfg = _cfg()
    lag = gather_flow(cfg, cfg.flows[0], source=FakeAdmin({"t": 1}), target=FakeAdmin({"nyc.t": 1}), strict=True)  # type: ignore[arg-type]
    assert lag.errors == [] and [p.target_end for p in lag.partitions] == [10]


def test_a_source_pattern_it_cannot_see_stops_lag_and_the_exporter_alike():
    cfg = _cfg()
    for strict in (True, False):  # nothing can be said of the flow without its source topics
        with pytest.raises(AuthorizationFailed):
            gather_flow(cfg, cfg.flows[0], source=FakeAdmin({"t": 1}, hidden={"t"}), target=FakeAdmin({}), strict=strict)  # type: ignore[arg-type]
