"""The take-over's order and refusals, against in-memory clusters (our Admin port and the
range reader faked; the real MM2 run is tests/integration/test_import_mm2.py)."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mirror.config import parse
from mirror.domain.mm2_config import parse_properties, translate
from mirror.errors import UnsafeOperation
from mirror.kafka import Watermarks
from mirror.kafka.reader import TailRecord
from mirror.migrate import mm2 as migrate
from mirror.store import SqliteStore

NOW_MS = 1_800_000_000_000
PROPS = (
    "clusters = src, dst\nsrc.bootstrap.servers = 127.0.0.1:1\ndst.bootstrap.servers = "
    "127.0.0.1:2\nsrc->dst.enabled = true\nsrc->dst.topics = orders\nsrc->dst.groups = app\n"
)


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


@dataclass
class FakeCluster:
    name: str
    logs: dict[tuple[str, int], list[TailRecord]] = field(default_factory=dict)
    groups: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    members: dict[str, int] = field(default_factory=dict)
    grow: str | None = None  # a topic that gains a record each time its ends are read again
    calls: list[str] = field(default_factory=list)

    def topics(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t, p in self.logs:
            out[t] = max(out.get(t, 0), p + 1)
        return out

    def watermarks(self, parts, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        return {
            tp: Watermarks(
                self.logs[tp][0].offset if self.logs[tp] else 0, self.logs[tp][-1].offset + 1 if self.logs[tp] else 0
            )
            for tp in parts
        }

    def end_offsets(self, parts, committed_only: bool = True) -> dict[tuple[str, int], int]:
        if self.grow:
            self.logs[(self.grow, 0)].append(TailRecord(len(self.logs[(self.grow, 0)]), 0, b"x", b"x", []))
        return {tp: w.high for tp, w in self.watermarks(parts).items()}

    def group_members(self, group: str) -> int:
        return self.members.get(group, 0)

    def group_offsets(self, group: str, parts=None) -> dict[tuple[str, int], int]:
        return {tp: o for tp, o in self.groups.get(group, {}).items() if parts is None or tp in parts}

    def topic_ids(self, topics) -> dict[str, str]:
        return {t: f"id-{t}" for t in topics}

    def alter_group_offsets(self, group: str, offsets, *, metadata=None) -> None:
        self.calls.append(f"commit {group} {sorted(offsets.items())} {sorted((metadata or {}).values())}")
        self.groups.setdefault(group, {}).update(offsets)


def records(offsets, key=b"k", value=b"v", ts=0) -> list[TailRecord]:
    return [TailRecord(o, ts, key, value, []) for o in offsets]


def mm2_offset(topic: str, p: int, last: int) -> TailRecord:
    key = json.dumps(["MirrorSourceConnector", {"cluster": "src", "partition": p, "topic": topic}]).encode()
    return TailRecord(0, 0, key, json.dumps({"offset": last}).encode(), [])


def world(heartbeat_age_ms: int | None = 60_000) -> tuple[FakeCluster, FakeCluster]:
    """MM2 copied orders[0] source 0..9 (marker at 5) to target 0..8 and committed 9."""
    src = FakeCluster("src")
    dst = FakeCluster("dst")
    src.logs[("orders", 0)] = records([0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11])
    src.logs[("mm2-offset-syncs.dst.internal", 0)] = [
        TailRecord(0, 0, _s("orders") + struct.pack(">i", 0), struct.pack(">qq", 0, 0), [])
    ]
    dst.logs[("src.orders", 0)] = records(range(9))
    dst.logs[("mm2-offsets.src.internal", 0)] = [mm2_offset("orders", 0, 9)]
    cp_key = _s("app") + _s("src.orders") + struct.pack(">i", 0)
    dst.logs[("src.checkpoints.internal", 0)] = [TailRecord(0, 5, cp_key, struct.pack(">hqq", 0, 7, 0) + _s(""), [])]
    if heartbeat_age_ms is not None:
        dst.logs[("heartbeats", 0)] = [
            TailRecord(0, 0, _s("src") + _s("dst"), struct.pack(">hq", 0, NOW_MS - heartbeat_age_ms), [])
        ]
    return src, dst


def run(tmp_path: Path, src: FakeCluster, dst: FakeCluster, monkeypatch, **kw):
    clusters = {"src": src, "dst": dst}

    def read_range(name, cluster, topic, partition, start, end, timeout, until=None, *, isolation=None):
        return [r for r in clusters[name].logs[(topic, partition)] if start <= r.offset < end]

    def read_offsets(name, cluster, ranges, timeout, *, isolation=None):
        return {
            tp: [r.offset for r in read_range(name, cluster, *tp, start, end, timeout)]
            for tp, (start, end) in ranges.items()
        }

    monkeypatch.setattr(migrate, "read_range", read_range)
    monkeypatch.setattr(migrate, "read_offsets", read_offsets)
    t = translate(parse_properties(PROPS))
    config = parse(migrate.render(t, "mm2.properties"), env={})
    store = SqliteStore(tmp_path / "offsets.db")
    try:
        reports = migrate.take_over(
            config,
            t.flows,
            store,
            admin=clusters.__getitem__,
            clock=kw.pop("clock", lambda: NOW_MS / 1000),
            sleep=kw.pop("sleep", lambda s: None),
            **kw,
        )
        ((end, seen_ms),) = store.source_ends("src-to-dst").values()
        assert end == 12 and NOW_MS <= seen_ms <= NOW_MS + 60_000  # when it was read, after any wait
        return (
            reports,
            store.syncs("src-to-dst", "orders", 0),
            store.tip("src-to-dst", "orders", 0),
            store.checkpoints("src-to-dst", "app"),
        )
    finally:
        store.close()


def test_resumes_after_mm2s_last_commit_with_exact_rows_and_checkpoints(tmp_path: Path, monkeypatch) -> None:
    src, dst = world()
    (report,), rows, tip, cps = run(tmp_path, src, dst, monkeypatch)
    assert [(r.source_offset, r.target_offset) for r in rows] == [(0, 0), (6, 5)]
    assert (tip.source_offset, tip.target_offset) == (9, 8)
    assert [(c.topic, c.source_offset, c.target_offset) for c in cps] == [("orders", 7, 6)]  # MM2 said 0
    assert src.calls == ["commit mirror.src-to-dst [(('orders', 0), 10)] ['target-topic-id=id-src.orders']"]
    assert (report.partitions, report.copied, report.remaining, report.copied_twice) == (1, 10, 2, 0)


@dataclass
class FakeTime:
    """The import's clock and sleep: sleeping moves the clock; `beating` MM2 emits a
    heartbeat on `dst` every time the import sleeps (it still runs)."""

    dst: FakeCluster
    now: float = NOW_MS / 1000
    beating: bool = False
    slept: float = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds
        self.slept += seconds
        if self.beating:
            log = self.dst.logs[("heartbeats", 0)]
            beat = struct.pack(">hq", 0, int(self.now * 1000))
            log.append(TailRecord(len(log), 0, _s("src") + _s("dst"), beat, []))


def test_a_fresh_heartbeat_means_mm2_still_runs(tmp_path: Path, monkeypatch) -> None:
    """Heartbeats keep coming while the import waits: refused (exit 3) within --wait-quiet,
    nothing written."""
    src, dst = world(heartbeat_age_ms=3_000)
    t = FakeTime(dst, beating=True)
    lines: list[str] = []
    with pytest.raises(UnsafeOperation, match="still runs") as err:
        run(tmp_path, src, dst, monkeypatch, clock=t.clock, sleep=t.sleep, wait_quiet=40.0, progress=lines.append)
    # Refused as soon as 15 s of quiet cannot fit in what is left of the 40 s.
    assert "--wait-quiet 40s" in str(err.value) and 25 <= t.slept <= 40 and lines
    assert src.calls == []


def test_an_mm2_that_just_stopped_is_waited_for_until_its_heartbeats_go_quiet(tmp_path: Path, monkeypatch) -> None:
    """Stopped 3 s ago: the import waits (a progress line) until 15 s of quiet, then takes over."""
    src, dst = world(heartbeat_age_ms=3_000)
    t = FakeTime(dst)
    lines: list[str] = []
    (report,), *_ = run(tmp_path, src, dst, monkeypatch, clock=t.clock, sleep=t.sleep, progress=lines.append)
    assert report.partitions == 1 and src.calls
    assert 12 <= t.slept <= 16, t.slept  # 12 s to 15 s of quiet, then the 3 intervals of `_refuse_moving` overlap
    assert len(lines) == 1 and "3.0s old" in lines[0] and "quiet for 15s" in lines[0], lines


def test_a_wait_shorter_than_the_quiet_window_is_refused_without_waiting_for_nothing(
    tmp_path: Path, monkeypatch
) -> None:
    src, dst = world(heartbeat_age_ms=3_000)
    t = FakeTime(dst)
    with pytest.raises(UnsafeOperation, match="--wait-quiet"):
        run(tmp_path, src, dst, monkeypatch, clock=t.clock, sleep=t.sleep, wait_quiet=5.0)
    assert t.slept <= 5.0 and src.calls == []


def test_a_heartbeat_during_the_import_is_refused_whatever_the_clocks_say(tmp_path: Path, monkeypatch) -> None:
    src, dst = world(heartbeat_age_ms=3_600_000)  # MM2's clock an hour behind: its beats look old

    def beat(seconds: float) -> None:
        assert seconds > 2
        dst.logs[("heartbeats", 0)].append(
            TailRecord(1, 0, _s("src") + _s("dst"), struct.pack(">hq", 0, NOW_MS - 3_590_000), [])
        )

    with pytest.raises(UnsafeOperation, match="during the import"):
        run(tmp_path, src, dst, monkeypatch, sleep=beat)
    assert src.calls == []


def test_offsets_moving_during_the_import_are_refused(tmp_path: Path, monkeypatch) -> None:
    src, dst = world(heartbeat_age_ms=None)
    dst.grow = "mm2-offsets.src.internal"
    with pytest.raises(UnsafeOperation, match="moved while they were read"):
        run(tmp_path, src, dst, monkeypatch)
    assert src.calls == []


def test_a_topic_mm2_never_started_is_refused_unless_asked(tmp_path: Path, monkeypatch) -> None:
    src, dst = world()
    dst.logs[("mm2-offsets.src.internal", 0)] = []
    del dst.logs[("src.orders", 0)]
    with pytest.raises(UnsafeOperation, match="never started"):
        run(tmp_path, src, dst, monkeypatch)
    (report,), rows, _tip, _cps = run(tmp_path, src, dst, monkeypatch, copy_new_topics=True)
    assert report.partitions == 0 and rows == [] and src.calls == []


def test_a_flow_that_ran_already_is_refused(tmp_path: Path, monkeypatch) -> None:
    src, dst = world()
    src.groups["mirror.src-to-dst"] = {("orders", 0): 11}
    with pytest.raises(UnsafeOperation, match="already committed"):
        run(tmp_path, src, dst, monkeypatch)
    src.groups["mirror.src-to-dst"] = {("orders", 0): 10}  # the same import again: fine
    run(tmp_path, src, dst, monkeypatch)


def test_copies_past_mm2s_commit_are_counted(tmp_path: Path, monkeypatch) -> None:
    src, dst = world()
    dst.logs[("src.orders", 0)] = records(range(11))  # killed: 9 and 10 copied, not committed
    (report,), *_ = run(tmp_path, src, dst, monkeypatch)
    assert report.copied_twice == 2


def test_a_target_holding_less_than_mm2_committed_is_refused(tmp_path: Path, monkeypatch) -> None:
    # src.orders was deleted and created again after MM2 copied 0..8 there (MM2 re-creates
    # missing remote topics): resuming at 10 would leave source 0..9 out of the target.
    src, dst = world()
    dst.logs[("src.orders", 0)] = records(range(3))
    with pytest.raises(UnsafeOperation, match="holds less"):
        run(tmp_path, src, dst, monkeypatch)
    assert src.calls == []
