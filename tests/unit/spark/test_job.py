"""The end of a Spark run's query: `--until-caught-up` reports caught up only with the group
committed. The real source Admin over an AdminClient fake (no network, no Spark)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import KafkaError

from mirror.config import parse
from mirror.engine.status import FlowState
from mirror.errors import ClusterUnavailable
from mirror.spark.job import SparkFlow
from tests.unit.kafka.fakes import Coordinator
from tests.unit.spark.test_commits import commits_over
from tests.unit.spark.test_store_outage import CONFIG


class Ended:
    """A query that completed its last batch (`Trigger.AvailableNow`), ending at offset 100 of orders[0]."""

    isActive = False
    lastProgress = {"sources": [{"endOffset": json.dumps({"orders": {"0": 100}})}]}

    def exception(self) -> Any:
        return None


# `SparkFlow._await` (the loop `run` watches a query with) and `_commits` are reached into: `run`
# needs a Spark session. Not yet a public seam: the end of a run must settle the owed group commit
# before it reports caught up, and these drive that end with a finished query and a fake group.
def caught_up_run(client: Coordinator, timeout: float) -> SparkFlow:
    config = parse(CONFIG, env={})
    job = SparkFlow(config, config.flow("f"), until_caught_up=True)
    job._commits = commits_over(client, timeout=timeout)
    return job


def test_the_last_batch_commit_refused_is_made_before_the_run_reports_caught_up() -> None:
    client = Coordinator(*[KafkaError.NOT_COORDINATOR] * 3)
    job = caught_up_run(client, timeout=5.0)
    job._commits.commit({("orders", 0): 100})  # the last batch's own commit, refused
    assert job._await(Ended(), []) is False
    assert client.group == {("orders", 0): 100}
    assert job.status.state is FlowState.CAUGHT_UP


def test_a_run_whose_group_commit_never_gets_through_fails_instead_of_exit_0_behind() -> None:
    client = Coordinator(*[KafkaError.COORDINATOR_LOAD_IN_PROGRESS] * 1000)
    job = caught_up_run(client, timeout=0.3)
    with pytest.raises(ClusterUnavailable, match="mirror.f"):
        job._await(Ended(), [])
    assert client.group == {} and job.status.state is not FlowState.CAUGHT_UP


def test_a_stop_while_the_owed_commit_is_insisted_on_stops_the_run_not_fails_it() -> None:
    """SIGTERM or Ctrl-C as the last batch ends, the source refusing the group's commit: the
    run stops as asked (not caught up, nothing lost: the next run resumes from the group),
    instead of insisting for the source's whole timeout and then failing with exit 1."""
    client = Coordinator(*[KafkaError.NOT_COORDINATOR] * 1000)
    config = parse(CONFIG, env={})
    job = SparkFlow(config, config.flow("f"), until_caught_up=True)
    job._commits = commits_over(client, timeout=3.0)
    job._commits.stop = job.stop  # as `SparkFlow.run` hands it over
    job._commits.commit({("orders", 0): 100})  # the last batch's own commit, refused
    job.stop.set()
    assert job._await(Ended(), []) is False
    assert job.status.state is FlowState.STOPPING
    assert client.group == {} and len(client.asked) <= 3  # no retrying once stopped
