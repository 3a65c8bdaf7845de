"""ProducerPool: one producer per batch size, renewed whole, its purges told apart."""

from __future__ import annotations

from typing import Any

from mirror import config
from mirror.domain.route import route
from mirror.engine.partition import AssignedPartition
from mirror.engine.producers import SIZE_CHECK_SLACK, ProducerPool
from tests.unit.engine.fakes import TEXT


class Made:
    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings, self.purged = settings, 0

    def purge(self, in_queue: bool = True, in_flight: bool = True) -> None:
        self.purged += 1


def pool() -> tuple[ProducerPool, list[Made]]:
    cfg = config.parse(TEXT, env={})
    made: list[Made] = []

    def make(name: str, cluster: Any, settings: Any) -> Made:
        made.append(Made(dict(settings)))
        return made[-1]

    return ProducerPool(cfg.flows[0], cfg.clusters["sf"], {"batch.size": 100_000}, make), made


def test_a_topic_whose_limit_is_below_the_batch_size_gets_a_producer_of_its_own_and_the_others_share_one():
    p, made = pool()
    p.set_limits({"small": 20_000, "large": 1_000_000})
    small, large, other = p.for_topic("small"), p.for_topic("large"), p.for_topic("unknown")
    assert large is other is made[0] and small is not large
    assert small.settings["batch.size"] < 20_000 and made[0].settings["batch.size"] == 100_000
    part = p.fit(AssignedPartition(route(config.parse(TEXT, env={}).flows[0], "orders", 0)))
    assert part.limit is None and part.producer is made[0]  # nyc.orders: no limit known


def test_a_partition_fitted_to_a_limited_topic_checks_records_above_the_slack():
    p, _ = pool()
    flow = config.parse(TEXT, env={}).flows[0]
    p.set_limits({"nyc.orders": 50_000})
    part = p.fit(AssignedPartition(route(flow, "orders", 0)))
    assert (part.limit, part.room) == (50_000, 50_000 - SIZE_CHECK_SLACK)


def test_only_renewing_the_producers_clears_a_fatal_error():
    p, made = pool()
    p.died()
    p.purge(lambda timeout: None)
    assert p.dead and made[0].purged == 1
    p.renew()
    assert not p.dead and len(made) == 2 and list(p) == [made[1]]


def test_reports_served_during_a_purge_are_the_purges():
    p, _ = pool()
    seen: list[bool] = []
    p.purge(lambda timeout: seen.append(p.purging))
    assert seen == [True] and not p.purging
