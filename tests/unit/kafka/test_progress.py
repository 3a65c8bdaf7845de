"""The exactly-once progress helpers that need no broker: offsets, parsing, error classes."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from mirror.config import ClusterConfig
from mirror.errors import AuthorizationFailed, MirrorError
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


def test_a_fence_that_never_returns_fails_within_its_bound(monkeypatch):
    """fence()'s init_transactions can block past its timeout as the other transactional
    calls can (librdkafka #5456): the claim calling it must fail, not hang the worker."""
    monkeypatch.setattr(progress, "HANG_GRACE", 0.05)
    release = threading.Event()

    class StuckProducer:
        def __init__(self, settings):
            self.settings = settings

        def init_transactions(self, timeout):
            release.wait(30)

        def flush(self, timeout):
            return 0

    monkeypatch.setattr(progress, "Producer", StuckProducer)
    cluster = ClusterConfig(bootstrap="127.0.0.1:1")
    done = threading.Event()
    outcome: list[BaseException] = []

    def run():
        try:
            progress.fence("sf", cluster, "mirror.p.zombie", 0.1)
        except BaseException as exc:  # noqa: BLE001  # handed to the test's thread
            outcome.append(exc)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    try:
        assert done.wait(5), "fence() still blocked after 5 s"
        assert outcome and isinstance(outcome[0], MirrorError), outcome
        assert "mirror.p.zombie" in str(outcome[0])
    finally:
        release.set()


def test_progress_metadata_names_the_source_topic_and_reads_back():
    offsets = progress_offsets({("nyc.orders", 0): 7, ("nyc.orders", 1): 3}, "mirror.p.1", {("nyc.orders", 0): "s1"})
    assert [tp.metadata for tp in offsets] == ["mirror.p.1;src=s1", "mirror.p.1"]
    released = progress_offsets({("nyc.orders", 0): 7}, None, {("nyc.orders", 0): "s1"})
    assert _parse(offsets + released) == {
        ("nyc.orders", 0): Progress(7, None, "s1"),
        ("nyc.orders", 1): Progress(3, "mirror.p.1", None),
    }
    assert progress.parse_metadata("mirror.p.1;src=s1") == ("mirror.p.1", "s1")
    assert progress.parse_metadata("mirror.p.1") == ("mirror.p.1", None)  # written before the source id


class _Admin:
    refused = False

    def __init__(self, name: str, cluster: ClusterConfig) -> None:
        self.timeout = cluster.timeout

    def group_state(self, group: str) -> str:
        if _Admin.refused:
            raise AuthorizationFailed(f"not allowed: missing Describe on group {group!r}")
        return "EMPTY"


@pytest.mark.parametrize("refused", [True, False])
def test_a_progress_read_that_times_out_tells_a_refused_group_apart(monkeypatch, refused):
    """A consumer without Describe on the group only times out (librdkafka retries the coordinator
    lookup silently); the read asks an admin, briefly, and names the grant `mirror acls` lists."""

    def timing_out(consumer, tps, timeout):
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get committed offsets"))

    monkeypatch.setattr(progress, "committed_offsets", timing_out)
    monkeypatch.setattr(progress, "Admin", _Admin)
    monkeypatch.setattr(_Admin, "refused", refused)
    group = progress.ProgressGroup("sf", ClusterConfig(bootstrap="127.0.0.1:1", timeout=30), "mirror-eos.f")
    try:
        if refused:
            with pytest.raises(AuthorizationFailed, match=r"missing Read on group 'mirror-eos.f'"):
                group.read([("t", 0)], 1)
        else:
            with pytest.raises(progress.ProgressPending):
                group.read([("t", 0)], 1)
            with pytest.raises(MirrorError, match="did not answer"):
                group.read([("t", 0)], 1, stable=False)
        # The group's own admin client: the invariant is that the access check asks briefly
        # (ACCESS_CHECK_TIMEOUT), not for the cluster's whole timeout after a read timed out.
        assert group._admin is not None and group._admin.timeout == progress.ACCESS_CHECK_TIMEOUT
    finally:
        group.close()
