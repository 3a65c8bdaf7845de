"""races between the offset map's rows and its tip.

`translate` trusts the rows only up to the tip they were stored with. A reader that takes
the rows and the tip from two different store writes must take the tip first: a tip read
after the rows may come from a newer write, vouch for rows the reader does not have, and
let the old delta run past the records of the newer transactions (a skip).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from failover.gather import FlowContext, build_plan
from failover.plan import Method
from mirror.config import parse
from mirror.domain.acks import AckBatch
from mirror.domain.offsetmap import Checkpoint
from mirror.errors import OffsetStoreError
from mirror.kafka.admin import PendingOffsets, Watermarks
from mirror.run.recorder import OffsetMapRecorder
from mirror.store import SqliteStore

CONFIG = """\
clusters:
  nyc: {bootstrap: "127.0.0.1:19092"}
  sf: {bootstrap: "127.0.0.1:19192"}
flows:
  - name: f
    source: nyc
    target: sf
    topics: {include: ["t"]}
    groups: ["app"]
"""

# 5 transactions of 4 records on source partition t[0], each followed by its commit marker:
# records at 0-3, 5-8, 10-13, 15-18, 20-23; their copies at target 0-19.
LAYOUT = {t * 5 + i: t * 4 + i for t in range(5) for i in range(4)}


def batch(first: int, last: int) -> AckBatch:
    """The acknowledgement of records first..last: a sync wherever the delta changes."""
    syncs, delta = [], None
    for s in range(first, last + 1):
        if s in LAYOUT and LAYOUT[s] - s != delta:
            syncs.append((s, LAYOUT[s]))
            delta = LAYOUT[s] - s
    return AckBatch(
        "f", "t", 0, "nyc.t", first, last + 1, count=sum(1 for s in range(first, last + 1) if s in LAYOUT), syncs=syncs
    )


class RacingStore:
    """A store in which the mirror's next flush lands right after the reader's k-th read."""

    def __init__(self, store: SqliteStore, flush_after: int, flush: Any) -> None:
        self._store, self._left, self._flush = store, flush_after, flush

    def _read(self, name: str, *args: Any) -> Any:
        out = getattr(self._store, name)(*args)
        self._left -= 1
        if self._left == 0:
            self._flush()
        return out

    def floor_sync(self, *a: Any) -> Any:
        return self._read("floor_sync", *a)

    def gaps(self, flow: str) -> Any:
        return self._store.gaps(flow)

    def next_sync(self, *a: Any) -> Any:
        return self._read("next_sync", *a)

    def tip(self, *a: Any) -> Any:
        return self._read("tip", *a)

    def tips(self, *a: Any) -> Any:  # the bulk read of the tips (one read, like tip)
        return self._read("tips", *a)

    def windows(self, *a: Any) -> Any:  # the bulk read of the rows (one read, like floor + next)
        return self._read("windows", *a)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class FakeAdmin:
    def __init__(
        self, topics: set[str], marks: dict[tuple[str, int], Watermarks], groups: dict[str, dict[tuple[str, int], int]]
    ) -> None:
        self._topics, self._marks, self._groups = topics, marks, groups

    def topics(self) -> dict[str, int]:
        return dict.fromkeys(self._topics, 1)

    def request_topics(self) -> Any:
        return self.topics

    def require_visible(self, patterns: Any, listed: Any, need: str = "Read", literal: Any = ()) -> None:
        """Every topic is visible here."""

    def group_offsets(self, group: str, partitions: Any = None) -> dict[tuple[str, int], int]:
        got = self._groups.get(group, {})
        return {k: v for k, v in got.items() if partitions is None or k in set(partitions)}

    def request_group_offsets(self, group: str, partitions: Any = None, **_: Any) -> PendingOffsets[int]:
        return PendingOffsets(lambda: self.group_offsets(group, partitions))

    def watermarks(self, parts: Any) -> dict[tuple[str, int], Watermarks]:
        return {k: self._marks[k] for k in parts}

    def end_offsets(self, parts: Any) -> dict[tuple[str, int], int]:
        return {k: self._marks[k].high for k in parts}

    def request_end_offsets(self, parts: Any) -> PendingOffsets[int]:
        return PendingOffsets(lambda: self.end_offsets(parts))


@pytest.mark.parametrize("flush_after", [1, 2, 3, 4, 5])
def test_a_plan_never_skips_when_the_mirror_stores_rows_while_it_reads_them(tmp_path: Path, flush_after: int) -> None:
    # The mirror stored the rows of transactions 1-2 (tip: source 8); it has copied all
    # five, and stores transactions 3-5 while `failover plan` reads the offset map.
    sqlite = SqliteStore(tmp_path / "o.db")
    rec = OffsetMapRecorder(sqlite, "f", registry=None)
    rec.on_acked([batch(0, 8)])
    rec.flush()
    rec.on_acked([batch(10, 23)])
    store = RacingStore(sqlite, flush_after, rec.flush)

    position = 13  # the group read up to record 12; record 13's copy is at target 11
    config = parse(CONFIG, env={})
    ctx = FlowContext(config, config.flows[0], lambda: store)  # type: ignore[arg-type, return-value]
    ctx._admins["nyc"] = FakeAdmin({"t"}, {("t", 0): Watermarks(0, 25)}, {"app": {("t", 0): position}})  # type: ignore[assignment]
    ctx._admins["sf"] = FakeAdmin({"nyc.t"}, {("nyc.t", 0): Watermarks(0, 20)}, {})  # type: ignore[assignment]

    plan = build_plan(ctx, "app", Method.TRANSLATE)
    (part,) = plan.partitions
    assert part.target_offset <= LAYOUT[position], (
        f"plan starts the group at {part.target_offset}: it skips record {position} (at {LAYOUT[position]})"
    )
    sqlite.close()


class FailingWrites:
    """The store answers reads and deletes, but writing rows fails (a flapping store)."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def write_syncs(self, *a: Any, **kw: Any) -> None:
        from mirror.errors import OffsetStoreError

        raise OffsetStoreError("offset store: cannot write offset syncs: database is locked")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_restart_whose_first_store_write_fails_leaves_no_skipping_translation(tmp_path: Path) -> None:
    from mirror.domain.offsetmap import translate
    from mirror.store import sync_window

    # Source t[0]: records 0-9, an aborted transaction and its marker at 10-29, records 30-39.
    # The first run copied all 20 records (target 0-19), stored their rows and tip, and
    # crashed before committing past 5.
    sqlite = SqliteStore(tmp_path / "o.db")
    first = OffsetMapRecorder(sqlite, "f", registry=None)
    first.on_acked([AckBatch("f", "t", 0, "nyc.t", 0, 40, count=20, syncs=[(0, 0), (30, 10)])])
    first.flush()
    # The restart re-mirrors from 5: records 5-9 to 20-24, 30-39 to 25-34. Its first
    # store write trims the first run's rows above 5, and then fails.
    second = OffsetMapRecorder(FailingWrites(sqlite), "f", registry=None)  # type: ignore[arg-type]
    second.on_acked([AckBatch("f", "t", 0, "nyc.t", 5, 40, count=15, syncs=[(5, 20), (30, 25)])])
    with pytest.raises(OffsetStoreError):
        second.flush()

    # Meanwhile a checkpoint (and the offset sync) translates a group at source 35: its
    # records 35-39 are on the target twice, at 15-19 and at 30-34 (end 35).
    position, target_end = 35, 35
    tip = sqlite.tip("f", "t", 0)
    tr = translate(sync_window(sqlite, "f", "t", 0, position), position, target_end, tip=tip)
    assert tr.target_offset <= 15, (
        f"translated to {tr.target_offset} with tip {tip}: records 35-39 are skipped (both copies)"
    )
    sqlite.close()


def test_a_checkpoint_from_before_a_target_reset_is_not_trusted_for_the_new_topic(tmp_path: Path) -> None:
    # The group (at source 500) was checkpointed at target 1000 of the old target topic.
    # The topic was then recreated and the mirror copied source 0-599 into the new one again
    # (target 0-599), rows not stored yet; the source is gone before the checkpointer ran
    # again. The old 1000, clamped to the new end, would start the group at 600 and skip
    # records 500-599: so a reset forgets the partition's checkpoints with its rows, and
    # the plan, with neither, starts at the target's log start (re-reads, never skips).
    from failover.plan import PartitionFacts, plan_partition

    sqlite = SqliteStore(tmp_path / "o.db")
    rec = OffsetMapRecorder(sqlite, "f", registry=None)
    rec.on_acked([AckBatch("f", "t", 0, "nyc.t", 0, 600, count=600, syncs=[(0, 500)])])
    rec.flush()
    sqlite.write_checkpoints("f", [Checkpoint("billing", "t", 0, 500, 1000, 1), Checkpoint("billing", "t", 1, 7, 7, 1)])
    rec.on_reset("f", [("t", 0)])
    rec.flush()
    assert sqlite.syncs("f", "t", 0) == [] and sqlite.tip("f", "t", 0) is None
    assert [(c.topic, c.partition) for c in sqlite.checkpoints("f", "billing")] == [
        ("t", 1)
    ]  # the other partition keeps its own
    facts = PartitionFacts("t", "nyc.t", 0, 0, 600, source_offset=500, source_end=600, syncs=[], checkpoint_offset=None)
    assert plan_partition(Method.TRANSLATE, facts).target_offset <= 500
    sqlite.close()
