"""The exactly-once progress helpers that need no broker: offsets, parsing, error classes."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from mirror.kafka import progress
from mirror.kafka.progress import (
    Progress,
    TransactionFailed,
    _parse,
    new_writer_id,
    progress_offsets,
    transact,
)


def test_progress_offsets_carry_the_writer_or_release():
    held = progress_offsets({("t", 0): 10, ("t", 3): 7}, "mirror.f.abc")
    assert [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in held] == [
        ("t", 0, 10, "mirror.f.abc"),
        ("t", 3, 7, "mirror.f.abc"),
    ]
    assert [tp.metadata for tp in progress_offsets({("t", 0): 1}, None)] == [""]


def test_parse_skips_partitions_without_progress_and_reads_a_release_as_no_writer():
    got = _parse(
        [
            TopicPartition("t", 0, 5, metadata="mirror.f.abc"),
            TopicPartition("t", 1, -1001),
            TopicPartition("t", 2, 9, metadata=""),
        ]
    )
    assert got == {("t", 0): Progress(5, "mirror.f.abc"), ("t", 2): Progress(9, None)}


def test_writer_ids_are_new_each_time_and_name_the_flow():
    a, b = new_writer_id("f"), new_writer_id("f")
    assert a != b and a.startswith("mirror.f.") and b.startswith("mirror.f.")


def _raising(*errors: KafkaError):
    calls = []

    def call(timeout: float) -> str:
        calls.append(timeout)
        if len(calls) <= len(errors):
            raise KafkaException(errors[len(calls) - 1])
        return "done"

    return call, calls


def test_retriable_errors_are_retried_then_succeed():
    call, calls = _raising(KafkaError(KafkaError._TIMED_OUT, "slow", retriable=True))
    assert transact("commit", call, 5) == "done" and len(calls) == 2


@pytest.mark.parametrize(
    ("error", "fenced"),
    [
        (KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True), True),
        (KafkaError(KafkaError.PRODUCER_FENCED, "fenced"), True),
        (KafkaError(KafkaError._STATE, "abort needed", txn_requires_abort=True), False),
        (KafkaError(KafkaError._INVALID_ARG, "not retriable"), False),
    ],
)
def test_failures_say_whether_the_producer_can_go_on(error, fenced):
    call, _ = _raising(error)
    with pytest.raises(TransactionFailed) as failed:
        transact("commit", call, 5)
    assert failed.value.fenced is fenced
    assert failed.value.message.startswith("commit: ")


def test_a_call_that_never_returns_abandons_the_producer(monkeypatch):
    monkeypatch.setattr(progress, "HANG_GRACE", 0.05)
    release = threading.Event()
    try:
        with pytest.raises(TransactionFailed) as failed:
            transact("send the progress", lambda t: release.wait(30), 0.1)
        assert failed.value.fenced and "abandoned" in str(failed.value)
    finally:
        release.set()
