"""`TargetReplay` (engine/replay.py): at an assignment, the partitions whose target provably
holds their first records start past them, and the ledger acknowledges those records as if
they were copied now (commit and offset map). Our own ports are faked in memory: the admins'
watermarks and the bulk range reads; no Kafka."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mirror import config
from mirror.domain.ledger import Ledger
from mirror.domain.replay import SourceRecord, StoredRecord, held_size
from mirror.domain.route import HEADER_ORIGIN, route
from mirror.engine.partition import AssignedPartition
from mirror.engine.replay import TargetReplay, starts_of
from mirror.errors import MirrorError
from mirror.kafka import OFFSET_BEGINNING
from mirror.kafka.admin import Watermarks
from tests.unit.engine.fakes import TEXT

KEY = ("orders", 0)
TARGET = ("nyc.orders", 0)


@dataclass
class Logs:
    """Both clusters' partitions: records by partition, each log from offset `low`."""

    records: dict[tuple[str, int], list[StoredRecord]] = field(default_factory=dict)
    reads: list[dict[tuple[str, int], tuple[int, int]]] = field(default_factory=list)
    fail: bool = False

    def marks(self, parts: Any, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        out = {}
        for tp in parts:
            recs = self.records.get(tp, [])
            out[tp] = Watermarks(recs[0].offset if recs else 0, recs[-1].offset + 1 if recs else 0)
        return out

    def read(
        self, _name: str, _cluster: Any, ranges: Any, _timeout: float, max_bytes: int | None = None
    ) -> dict[tuple[str, int], list[StoredRecord]]:
        if self.fail:
            raise MirrorError("read timed out")
        self.reads.append(dict(ranges))
        return capped(
            {
                tp: [r for r in self.records.get(tp, []) if start <= r.offset < end]
                for tp, (start, end) in ranges.items()
            },
            max_bytes,
        )


def capped(
    found: dict[tuple[str, int], list[StoredRecord]], max_bytes: int | None
) -> dict[tuple[str, int], list[StoredRecord]]:
    """What `read_ranges` returns of these records with `max_bytes`: it ends once the records
    taken cost that much (here the partitions read one after the other)."""
    if max_bytes is None:
        return found
    out: dict[tuple[str, int], list[StoredRecord]] = {tp: [] for tp in found}
    spent = 0
    for tp in sorted(found):
        for rec in found[tp]:
            if spent >= max_bytes:
                return out
            out[tp].append(rec)
            spent += held_size(rec)
    return out


class Admin:
    def __init__(self, logs: Logs) -> None:
        self.watermarks = logs.marks


class Admins:
    def __init__(self, logs: Logs) -> None:
        self.source = self.target = Admin(logs)


def setup(provenance: bool = True) -> tuple[TargetReplay, Ledger[AssignedPartition], Logs]:
    cfg = config.parse(TEXT, env={})
    flow = cfg.flows[0].model_copy(update={"provenance_headers": provenance})
    ledger: Ledger[AssignedPartition] = Ledger(flow.name)
    ledger.assign(KEY, AssignedPartition(route(flow, "orders", 0)))
    logs = Logs()
    replay = TargetReplay(
        flow,
        cfg.clusters[flow.source],
        cfg.clusters[flow.target],
        admins=Admins(logs),  # type: ignore[arg-type]
        ledger=ledger,
        read=logs.read,
    )
    return replay, ledger, logs


def source(count: int) -> list[StoredRecord]:
    return [StoredRecord(o, 1000 + o, b"k%d" % o, b"v%d" % o, []) for o in range(count)]


def copies(ledger: Ledger[AssignedPartition], recs: list[StoredRecord], at: int = 0) -> list[StoredRecord]:
    r = ledger.parts[KEY].route
    out = []
    for i, rec in enumerate(recs):
        c: SourceRecord = rec.compared()
        out.append(StoredRecord(at + i, c[1], c[2], c[3], [(HEADER_ORIGIN, (r.origin or b"") + b"%d" % c[0])]))
    return out


def test_a_partition_whose_target_holds_its_first_records_starts_past_them() -> None:
    replay, ledger, logs = setup()
    recs = source(100)
    logs.records[KEY] = recs
    logs.records[TARGET] = copies(ledger, recs[:60], at=5)  # a kill after 60 copies, before any commit
    assert replay.skip({KEY: OFFSET_BEGINNING}) == {KEY: 60}
    part = ledger.parts[KEY]
    assert part.acked_next == 60 and part.position() == 60  # committed as if copied
    (batch,) = ledger.take_batches()
    assert (batch.first_offset, batch.next_offset, batch.count) == (0, 60, 60)
    assert batch.syncs == [(0, 5)]  # the offset map: source 0.. at target 5..
    assert batch.bytes == sum(len(r.key or b"") + len(r.value or b"") for r in recs[:60])
    # Bulk: the tails, then the source records and the copies, one read each.
    assert logs.reads == [{TARGET: (64, 65)}, {KEY: (0, 60)}, {TARGET: (5, 65)}]


def test_from_a_committed_offset_only_the_copies_past_it_are_skipped() -> None:
    replay, ledger, logs = setup()
    recs = source(100)
    logs.records[KEY] = recs
    logs.records[TARGET] = copies(ledger, recs[:70])
    assert replay.skip({KEY: 40}) == {KEY: 70}
    (batch,) = ledger.take_batches()
    assert (batch.first_offset, batch.next_offset, batch.count, batch.syncs) == (40, 70, 30, [(40, 40)])


def test_without_provenance_headers_nothing_is_read_or_skipped() -> None:
    replay, ledger, logs = setup(provenance=False)
    logs.records[KEY] = source(10)
    logs.records[TARGET] = copies(ledger, source(10))
    assert replay.skip({KEY: OFFSET_BEGINNING}) == {}
    assert logs.reads == [] and ledger.parts[KEY].acked_next is None


def test_a_copy_that_does_not_match_skips_nothing() -> None:
    replay, ledger, logs = setup()
    recs = source(10)
    logs.records[KEY] = recs
    other = [StoredRecord(r.offset, r.timestamp_ms, r.key, b"other", r.headers) for r in recs]
    logs.records[TARGET] = copies(ledger, other)
    assert replay.skip({KEY: 0}) == {}
    assert ledger.parts[KEY].acked_next is None and ledger.take_batches() == []


def test_a_record_by_hand_after_the_copies_skips_nothing() -> None:
    replay, ledger, logs = setup()
    recs = source(10)
    logs.records[KEY] = recs
    logs.records[TARGET] = [*copies(ledger, recs), StoredRecord(10, 5, b"hand", b"made", [])]
    assert replay.skip({KEY: 0}) == {}
    assert logs.reads == [{TARGET: (10, 11)}]  # the tail only


def test_a_failed_read_skips_nothing() -> None:
    replay, ledger, logs = setup()
    logs.records[KEY] = source(10)
    logs.records[TARGET] = copies(ledger, source(10))
    logs.fail = True
    assert replay.skip({KEY: 0}) == {}
    assert ledger.parts[KEY].acked_next is None


def test_a_source_whose_start_is_gone_skips_nothing() -> None:
    # Retention removed the source's first records since: the consumer reports that gap; a
    # skip would step over it.
    replay, ledger, logs = setup()
    recs = source(10)
    logs.records[TARGET] = copies(ledger, recs)
    logs.records[KEY] = recs[3:]
    assert replay.skip({KEY: 0}) == {}


def test_nothing_is_skipped_for_a_partition_with_records_in_flight() -> None:
    replay, ledger, logs = setup()
    recs = source(10)
    logs.records[KEY] = recs
    logs.records[TARGET] = copies(ledger, recs)
    from mirror.domain.ledger import Segment

    ledger.parts[KEY].begin(Segment(0))
    assert replay.skip({KEY: 0}) == {}


def test_starts_of_takes_the_chosen_start_else_the_committed_offset() -> None:
    a, b, c = ("t", 0), ("t", 1), ("t", 2)
    assert starts_of({a: OFFSET_BEGINNING}, {a: None, b: 7, c: None}, [a, b, c]) == {a: OFFSET_BEGINNING, b: 7}
    assert starts_of({}, None, [a]) == {}


def test_a_caught_up_partition_reads_no_tail() -> None:
    # A restart of a caught-up mirror (10,000 partitions at their ends): nothing left to copy,
    # so nothing to skip, and not one target record is read.
    replay, ledger, logs = setup()
    recs = source(10)
    logs.records[KEY] = recs
    logs.records[TARGET] = copies(ledger, recs)
    assert replay.skip({KEY: 10}) == {}
    assert logs.reads == []


def test_the_reads_inside_the_assign_callback_are_bounded_in_time_together() -> None:
    # `skip` runs inside the group's assign callback. Only the tails' read is bounded (10 s);
    # the source records' and the copies' reads each get the cluster's whole timeout (30 s by
    # default), so one assignment may block the worker's loop 70 s in these reads alone
    # (plus two watermark requests and the committed offsets), past the smallest
    # max.poll.interval.ms the config accepts (60 s): the group may drop the member, and the
    # next assignment runs the same check again.
    from mirror.config import MIN_MAX_POLL_INTERVAL_MS

    replay, ledger, logs = setup()
    recs = source(100)
    logs.records[KEY] = recs
    logs.records[TARGET] = copies(ledger, recs[:60])
    timeouts: list[float] = []
    plain = logs.read

    def timed(
        name: str, cluster: Any, ranges: Any, timeout: float, *cap: int
    ) -> dict[tuple[str, int], list[StoredRecord]]:
        timeouts.append(timeout)
        return plain(name, cluster, ranges, timeout, *cap)

    replay._read = timed
    assert replay.skip({KEY: 0}) == {KEY: 60}
    budget = MIN_MAX_POLL_INTERVAL_MS / 1000 / 2  # the callback reads committed offsets and watermarks too
    assert sum(timeouts) <= budget, f"reads inside the assign callback may take {sum(timeouts):g}s ({timeouts})"


def test_the_records_held_to_compare_are_bounded_in_bytes() -> None:
    # MAX_COMPARED counts records, not bytes: 250,000 records of 1 MiB would be 250 GiB of
    # source records and as much again of copies, held at once inside the assign callback
    # (a worker killed by the OOM killer restarts into the same check). 300 records of 1 MiB
    # here (one shared value, so the test itself holds 1 MiB).
    replay, ledger, logs = setup()
    big = b"x" * (1 << 20)
    recs = [StoredRecord(o, 1000 + o, b"k%d" % o, big, []) for o in range(400)]
    logs.records[KEY] = recs
    logs.records[TARGET] = copies(ledger, recs[:300])
    held = 0
    plain = logs.read

    def counted(
        name: str, cluster: Any, ranges: Any, timeout: float, *cap: int
    ) -> dict[tuple[str, int], list[StoredRecord]]:
        nonlocal held
        out = plain(name, cluster, ranges, timeout, *cap)
        held += sum(len(r.key or b"") + len(r.value or b"") for rs in out.values() for r in rs)
        return out

    replay._read = counted
    replay.skip({KEY: 0})
    cap = 256 << 20
    assert held <= cap, f"one assignment held {held >> 20} MiB of records to compare"


def test_a_recreated_source_topic_of_alike_events_is_not_skipped_on_a_log_append_time_target() -> None:
    # Deleted and created again while stopped, unnoticed (no offset store keeps topic ids:
    # `RecreatedTopics.of` is None), so the group has no offset and the partition starts at
    # the beginning. The new topic's 20 events are alike in key and value with the old one's;
    # the target stamps LogAppendTime, so the old copies of offsets 0..9 pass for copies of the
    # new records 0..9, which are skipped and committed without ever being copied.
    replay, ledger, logs = setup()
    origin = ledger.parts[KEY].route.origin or b""
    logs.records[KEY] = [StoredRecord(o, 50_000 + o, None, b"tick", []) for o in range(20)]
    logs.records[TARGET] = [
        StoredRecord(i, 9_000 + i, None, b"tick", [(HEADER_ORIGIN, origin + b"%d" % i)], log_append_time=True)
        for i in range(10)
    ]
    assert replay.skip({KEY: OFFSET_BEGINNING}) == {}
    assert ledger.parts[KEY].acked_next is None


def _fake_clock(monkeypatch: Any) -> list[float]:
    """The check's clock, moved by hand: `now[0] += 29.0` is a request taking 29 s."""
    import types

    import mirror.engine.replay_reads as replay_reads

    now = [0.0]
    monkeypatch.setattr(replay_reads, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    return now


def test_the_watermark_requests_inside_the_assign_callback_are_bounded_by_the_checks_deadline(
    monkeypatch: Any,
) -> None:
    # The check's one deadline (CHECK_TIMEOUT, 10 s) bounds its reads only. Before them it asks
    # both clusters for watermarks, each bounded by the cluster's own timeout (30 s by default):
    # two slow clusters that answer just in time keep the assign callback ~60 s in the check
    # alone (past the smallest max.poll.interval.ms the config accepts, 60 s, with the committed
    # offsets and topic ids the callback reads besides). A fake clock: each watermark request
    # takes 29 s.
    from mirror.config import MIN_MAX_POLL_INTERVAL_MS

    now = _fake_clock(monkeypatch)
    replay, ledger, logs = setup()
    recs = source(100)
    logs.records[KEY] = recs
    logs.records[TARGET] = copies(ledger, recs[:60])
    plain = logs.marks

    def slow(parts: Any, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        now[0] += 29.0
        return plain(parts, committed_only)

    replay._admins.source.watermarks = slow  # type: ignore[attr-defined]
    replay.skip({KEY: 0})
    budget = MIN_MAX_POLL_INTERVAL_MS / 1000 / 2  # the callback reads committed offsets and topic ids too
    assert now[0] <= budget, f"the check kept the assign callback {now[0]:g}s"


def _behind_and_another(watermark_failure: Any) -> tuple[TargetReplay, Logs, tuple[str, int]]:
    """KEY behind (60 of its 100 records copied) and orders[1] started too, whose target
    partition's watermark request runs `watermark_failure` (and raises what it raises)."""
    replay, ledger, logs = setup()
    other = ("orders", 1)
    ledger.assign(other, AssignedPartition(route(replay.flow, "orders", 1)))
    recs = source(100)
    logs.records[KEY] = recs
    logs.records[TARGET] = copies(ledger, recs[:60])
    plain = logs.marks

    def marks(parts: Any, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        parts = list(parts)
        if ("nyc.orders", 1) in parts:
            watermark_failure()
        return plain(parts, committed_only)

    replay._admins.source = Admin(logs)  # type: ignore[attr-defined]
    replay._admins.target = Admin(logs)  # type: ignore[attr-defined]
    replay._admins.target.watermarks = marks  # type: ignore[attr-defined]
    return replay, logs, other


def test_a_started_partition_the_target_lacks_with_nothing_to_copy_does_not_stop_the_others() -> None:
    # A source partition with nothing to copy whose target partition does not exist yet (the
    # source grew, the target not yet) fails a request naming it: the partitions behind still skip.
    def unknown() -> None:
        raise MirrorError("cluster 'sf': list offsets of nyc.orders[1]: Broker: Unknown topic or partition")

    replay, _, new = _behind_and_another(unknown)
    assert replay.skip({KEY: OFFSET_BEGINNING, new: OFFSET_BEGINNING}) == {KEY: 60}


def test_a_caught_up_partition_whose_target_answers_slowly_does_not_stop_the_skips_of_those_behind(
    monkeypatch: Any,
) -> None:
    # Were the target's watermarks asked for every started partition, the caught-up ones too, a
    # caught-up partition's target partition whose leader is moving (its ListOffsets retried
    # until the cluster's timeout, 30 s by default: kafka/admin/offsets.py) then holds up the
    # whole request past the check's 10 s deadline, and the partition behind, whose target
    # answers at once, skips nothing. Asked for the partitions behind only (before), it skips
    # its 60 copies. A fake clock: the slow answer takes 29 s.
    now = _fake_clock(monkeypatch)

    def moving() -> None:
        now[0] += 29.0  # the leader moving: retried until the cluster's timeout
        raise MirrorError("cluster 'sf': list offsets of nyc.orders[1]: Broker: Leader not available")

    replay, logs, caught_up = _behind_and_another(moving)
    logs.records[caught_up] = source(10)  # all 10 copied and committed: it starts at 10
    assert replay.skip({KEY: OFFSET_BEGINNING, caught_up: 10}) == {KEY: 60}
