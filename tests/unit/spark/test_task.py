"""A task's data path as it streams: chunks produced as they arrive, the target's
tail read only where it may hold copies already, the offset map's pairs unchanged. Driven
through `mirror_chunks` with the in-memory target partition of test_task_replay (no Spark,
no Kafka)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

import mirror.spark.task as task
from mirror.spark.task import delta_changes, mirror_chunks
from tests.unit.spark.test_task_replay import TOPIC, TargetPartition, install, plan, rows


def chunked(batch: list[Any], size: int) -> list[list[Any]]:
    return [batch[i : i + size] for i in range(0, len(batch), size)]


def test_each_chunk_is_produced_before_the_next_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task holds one chunk (Arrow batch), not its slice of the micro-batch: when chunk k+1
    is asked for, every record of chunk k is already with the producer."""
    target = TargetPartition()
    install(monkeypatch, target)
    seen: list[int] = []

    def chunks() -> Iterator[list[Any]]:
        for chunk in chunked(rows(range(50)), 10):
            seen.append(target.high)  # records handed to the producer when this chunk is asked for
            yield chunk

    (result,) = list(mirror_chunks(plan(), chunks()))
    assert seen == [0, 10, 20, 30, 40]
    assert (result.produced, result.skipped, result.first_offset, result.next_offset) == (50, 0, 0, 50)
    assert [r[1] for r in target.records] == [b"v%d" % o for o in range(50)]


def test_a_settled_partition_never_reads_the_targets_tail_unless_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tail is read on a partition's first batch of a query and on a retried task only."""
    target = TargetPartition()
    install(monkeypatch, target)
    reads: list[tuple[int, int]] = []
    fake = task.read_range

    def counting(*a: Any, **k: Any) -> Any:
        reads.append((a[4], a[5]))
        return fake(*a, **k)

    monkeypatch.setattr(task, "read_range", counting)
    settled = replace(plan(), settled=frozenset({(TOPIC, 0)}))
    list(mirror_chunks(plan(), [rows(range(10))]))  # first batch: the target is empty, nothing to read
    list(mirror_chunks(settled, [rows(range(10, 20))]))
    assert reads == []
    list(mirror_chunks(settled, [rows(range(20, 30))], retried=True))
    assert reads == [(19, 20)]  # the target's last record, once


def test_a_retried_task_skips_what_its_failed_attempt_produced_and_streams_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attempt 0 produced 100..139 of 100..199 and failed; attempt 1 (retried) skips exactly
    those, produces 140..199, and its pairs are those of every record, as `mirror run`'s."""
    target = TargetPartition(records=[(b"x", b"x", 0, None)] * 3)  # three foreign records first
    install(monkeypatch, target)
    settled = replace(plan(), settled=frozenset({(TOPIC, 0)}))
    list(mirror_chunks(settled, [rows(range(100, 140))]))  # what the failed attempt got out
    (result,) = list(mirror_chunks(settled, chunked(rows(range(100, 200)), 15), retried=True))
    assert (result.produced, result.skipped, result.placed, result.next_offset) == (60, 40, True, 200)
    assert [r[1] for r in target.records[3:]] == [b"v%d" % o for o in range(100, 200)]
    assert result.syncs == delta_changes([(o, o - 97) for o in range(100, 200)]) == [(100, 3)]


def test_a_slice_already_whole_on_the_target_is_skipped_to_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    target = TargetPartition()
    install(monkeypatch, target)
    list(mirror_chunks(plan(), [rows(range(30))]))
    (result,) = list(mirror_chunks(plan(), chunked(rows(range(30)), 7)))
    assert (result.produced, result.skipped, result.next_offset, result.placed) == (0, 30, 30, True)
    assert target.high == 30


def test_pairs_are_those_of_every_record_when_the_source_offsets_have_gaps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compacted or transactional sources skip offsets: each gap is a new delta, kept."""
    target = TargetPartition()
    install(monkeypatch, target)
    offsets = [0, 1, 2, 5, 6, 9, 20, 21]
    (result,) = list(mirror_chunks(plan(), chunked(rows(offsets), 3)))
    assert result.syncs == delta_changes([(o, i) for i, o in enumerate(offsets)]) == [(0, 0), (5, 3), (9, 5), (20, 6)]


def test_a_chunk_of_another_partition_fails_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, TargetPartition())
    other = [(TOPIC, 1, 0, 0, b"k", b"v", None)]
    with pytest.raises(task.MirrorError, match="one Kafka partition per task"):
        list(mirror_chunks(plan(), [rows(range(3)), other]))
