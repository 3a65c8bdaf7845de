"""Kafka's MirrorMaker hard bounce (`mirror_maker_test.py`, `test_bounce` with
`clean_shutdown=False`), for `mirror run`: a producer keeps writing while the mirror is
SIGKILLed again and again, each time after it copied new records, and restarted. Issue 37:
MirrorMaker left 1,284 duplicates there; the target is at most 100, and no loss.

The mirror commits every 500 ms, so a kill usually leaves copies on the target past the
group's commit: without the restart's replay check (`mirror.engine.replay`), every one of
them would be copied again. The test counts them at each kill (`exposed`), so it shows it
exercised the check, and the duplicates left are what the check could not prove.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

from mirror.cli import main
from mirror.config import ClusterConfig
from mirror.domain.route import provenance
from mirror.kafka.reader import read_ranges
from tests.integration.test_mirror_datapath import flow_yaml
from tests.support.kafkautil import create_topic, end_offsets, group_offsets, producer, read_topic, wait_for
from tests.support.mirrorproc import MirrorProcess

PARTITIONS = 3
KILLS = 5
RATE = 1000  # records per second, steady, while the mirror is bounced
CAP = 60_000  # the producer stops at this many even if the bounces are slower than planned
MAX_DUPLICATES = 100


class NumberedProducer(threading.Thread):
    """Writes records 0, 1, 2, ... at `RATE` until stopped (or `CAP`): acks=all and idempotent,
    so the source holds each exactly once. Each record is its own (key, value), so a copy of
    one is countable on the target."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="bounce-producer", daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.sent = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            p = producer(self.bootstrap, acks="all")
            began = time.monotonic()
            while self.sent < CAP and not self.stop.is_set():
                # Catch up to the schedule, then wait for the next tick (a rate, not a sync).
                due = min(CAP, int((time.monotonic() - began) * RATE))
                for i in range(self.sent, due):
                    p.produce(self.topic, key=b"k%d" % i, value=b"%d:" % i + b"x" * 64, partition=i % PARTITIONS)
                self.sent = max(self.sent, due)
                p.poll(0)
                self.stop.wait(0.05)
            assert p.flush(60) == 0, "the source did not take every record"
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc


def _exposed(src: str, dst: str, group: str, topic: str) -> int:
    """The copies on the target past the group's commit, right after a kill: the records a
    restart would copy again without proof of them (the source offset the target's last
    copy names, per partition, against the group's committed offset)."""
    committed = group_offsets(src, group, topic, PARTITIONS)
    ends = end_offsets(dst, f"src.{topic}", PARTITIONS)
    ranges = {(f"src.{topic}", p): (ends[p] - 1, ends[p]) for p in range(PARTITIONS) if ends[p] > 0}
    tails = read_ranges("dst", ClusterConfig(bootstrap=dst, timeout=30), ranges, 30)
    out = 0
    for (_, p), recs in tails.items():
        origin = provenance(recs[-1].headers)
        assert origin is not None, f"the target's last record of partition {p} is not a copy"
        newest = int(origin["offset"])
        out += max(0, newest + 1 - max(committed[p], 0))
    return out


def _sum(offsets: dict[int, int]) -> int:
    return sum(max(o, 0) for o in offsets.values())


def _copies(bootstrap: str, topic: str) -> int:
    return _sum(end_offsets(bootstrap, topic, PARTITIONS))


def _while_alive(m: MirrorProcess, check: Callable[[], bool]) -> Callable[[], bool]:
    """`check`, failing at once if the mirror exited on its own (it must live until killed)."""

    def checked() -> bool:
        if not m.alive():
            raise AssertionError(f"the mirror exited ({m.proc.returncode}) before it was killed:\n{m.output()}")
        return check()

    return checked


def test_hard_bounce_loses_nothing_and_copies_again_at_most_100(clusters, write_config, unique, tmp_path):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t, group = f"bounce-{unique}", f"mirror-{unique}"
    create_topic(src, t, PARTITIONS)
    cfg = write_config(flow_yaml(unique, f'["{t}"]'))
    began = time.monotonic()
    writer = NumberedProducer(src, t)
    writer.start()
    kills: list[tuple[int, int]] = []  # (copies on the target, copies past the commit) at each kill
    try:
        copied = 0
        for bounce in range(KILLS):
            with MirrorProcess(cfg, log=tmp_path / f"mirror-{bounce}.log") as m:
                if bounce % 2:
                    # Mid-copy: the backlog the restart found (the records written while the
                    # group waited out the killed member's session) is still being copied.
                    need = copied + 1500
                else:
                    # In steady flow: this run caught up with the backlog and committed it,
                    # then copied new records as they were written.
                    backlog = max(1, _sum(end_offsets(src, t, PARTITIONS)))
                    wait_for(
                        _while_alive(
                            m, lambda backlog=backlog: _sum(group_offsets(src, group, t, PARTITIONS)) >= backlog
                        ),
                        120,
                        f"run {bounce} to catch up and commit",
                        detail=m.output,
                    )
                    need = _copies(dst, f"src.{t}") + 1000 + 300 * bounce
                wait_for(
                    _while_alive(m, lambda need=need: _copies(dst, f"src.{t}") >= need),
                    120,
                    f"run {bounce} to copy new records",
                    detail=m.output,
                )
                assert writer.is_alive(), "the producer stopped before the kills did: raise CAP or lower RATE"
                m.kill()
            copied = _copies(dst, f"src.{t}")
            kills.append((copied, _exposed(src, dst, group, t)))
    finally:
        writer.stop.set()
        writer.join(90)
    assert writer.error is None, writer.error
    assert not writer.is_alive()
    total = writer.sent
    bounced = time.monotonic() - began

    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    source = Counter(r.content() for recs in read_topic(src, t, PARTITIONS).values() for r in recs)
    target = Counter(r.content() for recs in read_topic(dst, f"src.{t}", PARTITIONS).values() for r in recs)
    duplicates = sum(target.values()) - total
    exposed = sum(e for _, e in kills)
    print(
        f"hard bounce: {len(kills)} kills in {bounced:.0f}s, {total} records, {duplicates} duplicates; "
        f"copies past the commit at each kill: {[e for _, e in kills]} ({exposed} together)"
    )
    assert sum(source.values()) == len(source) == total, "the source itself holds a duplicate or misses a record"
    assert not source - target, f"{len(source - target)} source records missing on the target"
    # The test meant something: every kill came while records flowed (asserted at each), and
    # the kills left copies past the commit (the replay a restart without the check would do).
    assert len(kills) == KILLS
    assert exposed > MAX_DUPLICATES, f"the kills left only {exposed} copies past the commit: nothing to prove"
    assert duplicates <= MAX_DUPLICATES, f"{duplicates} duplicates of {total} records after {KILLS} hard kills"
