"""bench/load.py's group commit, against a consumer that answers as a loading coordinator does."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from bench import load


class LoadingCoordinator:
    """Refuses the first commits as a coordinator still loading its offsets does: librdkafka
    raises them with retriable() False on a synchronous commit."""

    def __init__(self, refusals: int, code: int = KafkaError.COORDINATOR_LOAD_IN_PROGRESS) -> None:
        self.refusals, self.code = refusals, code
        self.committed: list = []
        self.closed = False

    def commit(self, offsets, asynchronous: bool) -> None:
        if self.refusals:
            self.refusals -= 1
            raise KafkaException(KafkaError(self.code, "Commit failed: Broker: Coordinator load in progress"))
        self.committed.append({(tp.topic, tp.partition): tp.offset for tp in offsets})

    def close(self) -> None:
        self.closed = True


def test_commit_group_asks_again_while_the_coordinator_loads(monkeypatch):
    fake = LoadingCoordinator(refusals=2)
    monkeypatch.setattr(load, "_consumer", lambda bootstrap, **extra: fake)
    monkeypatch.setattr(load.time, "sleep", lambda s: None)
    load.commit_group("127.0.0.1:9", "g", "t", {0: 5, 1: 7})
    assert fake.committed == [{("t", 0): 5, ("t", 1): 7}] and fake.closed


def test_commit_group_raises_an_error_that_is_not_transient(monkeypatch):
    fake = LoadingCoordinator(refusals=1, code=KafkaError.GROUP_AUTHORIZATION_FAILED)
    monkeypatch.setattr(load, "_consumer", lambda bootstrap, **extra: fake)
    with pytest.raises(KafkaException):
        load.commit_group("127.0.0.1:9", "g", "t", {0: 5})
    assert not fake.committed and fake.closed


def test_a_deleted_topics_files_are_awaited_and_no_other_topics(tmp_path):
    (tmp_path / "t1.bench-load-small-0").mkdir()  # another topic whose name starts the same
    (tmp_path / "other-3").mkdir()
    assert load.await_files_deleted(tmp_path, "t1.bench-load", timeout=0)

    (tmp_path / "t1.bench-load-11.5f2c0a-delete").mkdir()  # renamed for the broker's deletion task
    assert not load.await_files_deleted(tmp_path, "t1.bench-load", timeout=0)
    (tmp_path / "t1.bench-load-11.5f2c0a-delete").rmdir()
    (tmp_path / "t1.bench-load-0").mkdir()  # not yet renamed
    assert not load.await_files_deleted(tmp_path, "t1.bench-load", timeout=0)
    (tmp_path / "t1.bench-load-0").rmdir()
    assert load.await_files_deleted(tmp_path, "t1.bench-load", timeout=0)
    assert load.await_files_deleted(tmp_path / "absent", "t1.bench-load", timeout=0)
