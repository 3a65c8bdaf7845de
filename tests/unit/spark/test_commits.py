"""The Spark driver's group commits while the source's group coordinator moves (a rolling
restart of the source cluster): the real source Admin over an AdminClient fake that answers
each partition of a commit with the error a broker gives then (NOT_COORDINATOR), later with
none. No network, no Spark."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import KafkaError

from mirror.config import ClusterConfig
from mirror.domain.topics import TopicMapping
from mirror.errors import AuthorizationFailed, ClusterUnavailable, KafkaOperationError
from mirror.kafka.admin import Admin
from mirror.spark.commits import GroupCommits
from tests.unit.kafka.fakes import Coordinator

GROUP = "mirror.f"


class Target:
    def topic_ids(self, topics: Any) -> dict[str, str]:
        return {t: "id-1" for t in topics}


def commits_over(client: Coordinator, timeout: float = 1.0) -> GroupCommits:
    source = Admin("src", ClusterConfig(bootstrap="127.0.0.1:1", timeout=timeout), client=client)
    commits = GroupCommits("f", GROUP, source, Target())
    commits.use([TopicMapping("orders", "src.orders", 2)], {"src.orders": "id-1"})
    return commits


A, B = ("orders", 0), ("orders", 1)


def test_a_commit_refused_while_the_coordinator_moves_does_not_fail_and_the_next_commit_makes_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A batch's commit meets NOT_COORDINATOR (raised, it would fail the Spark query): the
    batch carries on; the next commit, here the next batch's with only partition 0 in it,
    commits partition 1's position too, so the group is not left behind for good."""
    client = Coordinator(KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
    commits = commits_over(client)
    with caplog.at_level(logging.INFO, logger="mirror.spark.commits"):
        commits.commit({A: 100, B: 50})
        assert commits.positions == {}  # not committed: the group's known position is unchanged
        commits.commit({A: 90})  # a lower position (a replayed batch) never moves it backwards
        commits.commit({A: 120})
    assert client.asked == [{A: 100, B: 50}, {A: 100, B: 50}, {A: 120, B: 50}]
    assert client.group == {A: 120, B: 50}
    assert commits.positions == {A: 120, B: 50}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once per outage, not once per commit
    assert "Not coordinator" in warnings[0] and GROUP in warnings[0]
    assert any("again" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)  # the recovery
    commits.commit({A: 120, B: 50})  # nothing ahead: no request
    assert len(client.asked) == 3


def test_a_refusal_that_is_not_a_moving_coordinator_still_fails_in_one_line() -> None:
    """A group with live members (UNKNOWN_MEMBER_ID) or a missing grant is no outage."""
    commits = commits_over(Coordinator(KafkaError.UNKNOWN_MEMBER_ID))
    with pytest.raises(KafkaOperationError) as failed:
        commits.commit({A: 100})
    assert not isinstance(failed.value, ClusterUnavailable)
    assert "Unknown member" in str(failed.value) and "\n" not in str(failed.value)
    with pytest.raises(AuthorizationFailed):
        commits_over(Coordinator(KafkaError.GROUP_AUTHORIZATION_FAILED)).commit({A: 100})


def test_settle_commits_what_is_owed_before_the_run_says_caught_up() -> None:
    """The last batch of `--until-caught-up` met a moving coordinator: the run ends right
    after it, so the owed commit is retried until the coordinator answers."""
    client = Coordinator(KafkaError.NOT_COORDINATOR, KafkaError.NOT_COORDINATOR, KafkaError.NOT_COORDINATOR)
    commits = commits_over(client, timeout=5.0)
    commits.commit({A: 100, B: 50})
    commits.settle()
    assert client.group == {A: 100, B: 50}
    assert commits.positions == {A: 100, B: 50}


def test_settle_fails_in_one_line_when_the_coordinator_never_answers() -> None:
    """Never exit 0 with the group silently behind."""
    client = Coordinator(*[KafkaError.COORDINATOR_NOT_AVAILABLE] * 1000)
    commits = commits_over(client, timeout=0.3)
    commits.commit({A: 100})
    with pytest.raises(ClusterUnavailable) as failed:
        commits.settle()
    message = str(failed.value)
    assert GROUP in message and "Coordinator not available" in message and "\n" not in message
    assert client.group == {}


def test_a_new_query_keeps_what_is_owed_past_its_start_and_drops_what_it_mirrors_again() -> None:
    """exactly_once starts a query from the target's progress, ahead of the group, and commits
    the group up to it first: refused then, it is still owed once the query starts (an idle
    partition would otherwise keep the group behind for good). A partition the query
    mirrors from the beginning (a new target topic) owes nothing from before."""
    client = Coordinator(KafkaError.NOT_COORDINATOR)
    commits = commits_over(client)
    commits.start({A: 10, B: 10}, ())  # the group's offsets
    commits.commit({A: 100, B: 50})  # up to the progress: refused
    commits.start({A: 100, B: 50}, [B])  # the query starts at the progress; B from the beginning
    commits.commit({})
    assert client.group == {A: 100}


def test_a_rewind_refused_while_the_coordinator_moves_is_sent_again_before_the_query_starts() -> None:
    """A new target topic: the group goes back to 0 before the query starts (crash safety),
    so the rewind is insisted on, not owed."""
    client = Coordinator(KafkaError.NOT_COORDINATOR, KafkaError.NOT_COORDINATOR)
    commits = commits_over(client, timeout=5.0)
    commits.start({A: 100}, ())
    commits.rewind([A])
    assert client.group == {A: 0} and commits.positions == {A: 0}
    with pytest.raises(ClusterUnavailable):
        commits_over(Coordinator(*[KafkaError.NOT_COORDINATOR] * 1000), timeout=0.3).rewind([A])


def test_a_partition_rewound_for_a_new_incarnation_owes_nothing_from_the_old_one() -> None:
    """A commit refused in one query, then the next query finds the target topic new (or the
    source topic re-created): the partition is rewound to 0 and mirrored again from the
    beginning. The old incarnation's owed position must not follow it: committed into the
    new one, a crash would resume past records the new topic never received."""
    client = Coordinator(KafkaError.NOT_COORDINATOR)
    commits = commits_over(client, timeout=5.0)
    commits.start({A: 10, B: 10}, ())
    commits.commit({A: 500, B: 500})  # refused: owed
    commits.start({B: 500}, ())  # the new query: A is reset (neither `at` nor `earliest`)
    commits.rewind([A])
    commits.commit({A: 100})  # the new query's first batch copied 100 records of A
    assert client.group[A] == 100
