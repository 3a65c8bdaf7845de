"""`CheckReads` (engine/replay_reads.py): the replay check's reads share one deadline and one
byte budget. In-memory reads, no Kafka."""

from __future__ import annotations

from typing import Any

import pytest

from mirror import config
from mirror.domain.replay import StoredRecord
from mirror.engine.replay_reads import RECORD_OVERHEAD, CheckReads
from mirror.errors import KafkaOperationError
from mirror.kafka import OFFSET_BEGINNING
from tests.unit.engine.fakes import TEXT
from tests.unit.engine.test_replay import KEY, TARGET, capped, copies, setup

CLUSTER = next(iter(config.parse(TEXT, env={}).clusters.values()))


def records(count: int, value: bytes) -> list[StoredRecord]:
    return [StoredRecord(o, 1000 + o, None, value, []) for o in range(count)]


def test_a_read_past_the_checks_deadline_raises_and_reads_nothing() -> None:
    asked: list[Any] = []
    reads = CheckReads(lambda *a: asked.append(a) or {}, timeout=0.0)
    with pytest.raises(KafkaOperationError, match="ran out"):
        reads("x", CLUSTER, {("t", 0): (0, 1)})
    assert asked == []


def test_each_read_gets_what_is_left_of_the_one_deadline() -> None:
    timeouts: list[float] = []

    def read(_n: str, _c: Any, _r: Any, timeout: float) -> dict[Any, Any]:
        timeouts.append(timeout)
        return {}

    reads = CheckReads(read, timeout=5.0)
    reads("x", CLUSTER, {})
    reads("x", CLUSTER, {})
    assert 0 < timeouts[1] <= timeouts[0] <= 5.0


def reader(recs: list[StoredRecord]) -> Any:
    """A read of these records (partition ("t", 0)) that ends at its byte cap as `read_ranges` does."""

    def read(_n: str, _c: Any, ranges: Any, _t: float, max_bytes: int | None = None) -> dict[Any, list[StoredRecord]]:
        return capped({k: [r for r in recs if s <= r.offset < e] for k, (s, e) in ranges.items()}, max_bytes)

    return read


def test_prefixes_stop_at_the_byte_budget_and_say_where() -> None:
    recs = records(100, b"x" * (1024 - RECORD_OVERHEAD))  # 1 KiB each, as counted
    reads = CheckReads(reader(recs), max_bytes=10 * 1024)
    got, upto = reads.prefixes("x", CLUSTER, {("t", 0): (0, 100)})
    assert [r.offset for r in got[("t", 0)]] == list(range(10)) and upto[("t", 0)] == 10


def test_prefixes_of_mixed_sizes_hold_at_most_one_record_past_the_budget() -> None:
    # Small records first, then large ones: no size learnt from the first ones sizes the read.
    recs = records(10, b"s") + [StoredRecord(o, 1000 + o, None, b"x" * 4096, []) for o in range(10, 100)]
    reads = CheckReads(reader(recs), max_bytes=16 * 1024)
    got, upto = reads.prefixes("x", CLUSTER, {("t", 0): (0, 100)})
    assert [r.offset for r in got[("t", 0)]] == list(range(upto[("t", 0)])) and upto[("t", 0)] < 100
    assert sum(len(r.value or b"") + RECORD_OVERHEAD for r in got[("t", 0)]) <= 16 * 1024 + 4096 + RECORD_OVERHEAD


def test_prefixes_read_whole_say_each_spans_end() -> None:
    recs = records(5, b"v")
    reads = CheckReads(reader(recs), max_bytes=1 << 20)
    got, upto = reads.prefixes("x", CLUSTER, {("t", 0): (0, 7)})  # offsets 5, 6: no records (markers)
    assert len(got[("t", 0)]) == 5 and upto[("t", 0)] == 7


def test_a_partition_read_in_part_skips_only_the_part_proven(monkeypatch: pytest.MonkeyPatch) -> None:
    import mirror.engine.replay_reads as replay_reads

    monkeypatch.setattr(replay_reads, "MAX_BYTES", 20 * 1024)
    replay, ledger, logs = setup()
    big = b"x" * (1024 - RECORD_OVERHEAD - 4)
    recs = [StoredRecord(o, 1000 + o, b"k%03d" % o, big, []) for o in range(100)]
    logs.records[KEY] = recs
    logs.records[TARGET] = copies(ledger, recs[:80])
    held = 0
    plain = logs.read

    def counted(name: str, cluster: Any, ranges: Any, timeout: float, *cap: int) -> dict[Any, list[StoredRecord]]:
        nonlocal held
        out = plain(name, cluster, ranges, timeout, *cap)
        held += sum(len(r.key or b"") + len(r.value or b"") + RECORD_OVERHEAD for rs in out.values() for r in rs)
        return out

    replay._read = counted
    moved = replay.skip({KEY: OFFSET_BEGINNING})
    assert 0 < moved[KEY] < 80
    assert held <= 21 * 1024  # source records and copies within the budget, and the tail
    (batch,) = ledger.take_batches()
    assert (batch.first_offset, batch.next_offset, batch.syncs) == (0, moved[KEY], [(0, 0)])


def test_a_small_last_copy_does_not_size_a_round_of_large_records(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first round of source reads is sized by the target's last copy: here a tombstone
    # (a short key, no value), counted as RECORD_OVERHEAD bytes. The records before it are
    # large, so that one round reads (MAX_BYTES / 2) / RECORD_OVERHEAD records of any size
    # at once, inside the assign callback: with the real 64 MiB budget and 1 MiB records,
    # 131,072 records (128 GiB). Scaled down here: a 64 KiB budget and 64 KiB records (one
    # shared value, so the test itself holds 64 KiB).
    import mirror.engine.replay_reads as replay_reads

    budget = 64 * 1024
    monkeypatch.setattr(replay_reads, "MAX_BYTES", budget)
    replay, ledger, logs = setup()
    big = b"x" * (64 * 1024)
    recs = [StoredRecord(o, 1000 + o, b"k%03d" % o, big, []) for o in range(399)]
    recs.append(StoredRecord(399, 1399, b"k399", None, []))  # the last record: a tombstone
    logs.records[KEY] = recs
    logs.records[TARGET] = copies(ledger, recs)
    held = 0
    plain = logs.read

    def counted(name: str, cluster: Any, ranges: Any, timeout: float, *cap: int) -> dict[Any, list[StoredRecord]]:
        nonlocal held
        out = plain(name, cluster, ranges, timeout, *cap)
        held += sum(len(r.key or b"") + len(r.value or b"") for rs in out.values() for r in rs)
        return out

    replay._read = counted
    replay.skip({KEY: OFFSET_BEGINNING})
    # The budget, overshot by one record per partition and read at most.
    assert held <= budget + 2 * len(big), f"one check held {held >> 10} KiB against a {budget >> 10} KiB budget"


def test_a_request_that_outlasts_the_deadline_is_given_up_on() -> None:
    # A watermark request bounded only by its cluster's timeout: the check stops waiting when
    # its own deadline is spent (the request ends in the background) and raises, skipping nothing.
    import threading

    answered = threading.Event()
    reads = CheckReads(lambda *a: {}, timeout=0.05)
    with pytest.raises(KafkaOperationError, match="ran out waiting for the source's watermarks"):
        reads.within("source's watermarks", lambda: answered.wait(30.0))
    answered.set()


def test_a_request_that_fails_raises_its_own_error() -> None:
    def fail() -> None:
        raise KafkaOperationError("cluster unreachable")

    with pytest.raises(KafkaOperationError, match="unreachable"):
        CheckReads(lambda *a: {}).within("target's watermarks", fail)
    assert CheckReads(lambda *a: {}).within("target's watermarks", lambda: 7) == 7
