"""Review of truth-config: a topic the flow selects whose target name Kafka would refuse.

`match_topics` now leaves it out for every caller, and `mirror lag` / the exporter gather
through it: the topic, never mirrored, vanishes from the flow's lag and from its groups'
records at risk, with nothing said (the one ERROR line is `mirror run`'s only).
"""

from __future__ import annotations

from typing import Any

from mirror import config
from mirror.domain.naming import MAX_TOPIC_NAME
from mirror.monitor.gather import gather_flow
from tests.unit.monitor.test_gather import FakeAdmin

BODY = """\
clusters:
  nyc: {bootstrap: "127.0.0.1:19092"}
  sf: {bootstrap: "127.0.0.1:19192"}
flows:
  - {name: f, source: nyc, target: sf, topics: {include: ["t.*"]}, groups: ["billing"]}
"""

# A legal source name (at most 249) whose prefixed target name ("nyc." + it) is not.
LONG = "t" + "x" * (MAX_TOPIC_NAME - 3)


class GroupSource(FakeAdmin):
    """The source, where group billing has read 5 of the 10 records of each partition."""

    def list_groups(self) -> list[str]:
        return ["billing"]

    def group_offsets(self, group: str, partitions: object = None) -> dict[tuple[str, int], int]:
        return {(LONG, 0): 5, ("t", 0): 5} if group == "billing" else {}


def test_a_selected_topic_too_long_to_mirror_is_not_silently_left_out_of_lag() -> None:
    assert len(LONG) <= MAX_TOPIC_NAME < len("nyc." + LONG)
    cfg = config.parse(BODY, env={})
    lag: Any = gather_flow(
        cfg,
        cfg.flows[0],
        source=GroupSource({"t": 1, LONG: 1}),  # type: ignore[arg-type]
        target=FakeAdmin({"nyc.t": 1}),  # type: ignore[arg-type]
    )
    shown = [p.source_topic for p in lag.partitions]
    assert LONG in shown or any(LONG in e for e in lag.errors), (shown, lag.errors)
    # On a failover now, billing would miss all 5 records it has not read of LONG (it has no
    # target topic at all), and 5 of t if the mirror had read nothing: 10, not 5.
    (billing,) = lag.groups
    assert billing.unmirrored == 10, billing
