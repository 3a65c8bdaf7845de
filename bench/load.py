"""Load on the source cluster and measurements on the target cluster.

The benchmark talks to Kafka with confluent-kafka directly (not through `mirror.kafka`):
it is a client of the system under test, and it must not share that system's code paths.

Measurements on the target never depend on the harness polling fast enough: target topics
are created by the harness with `message.timestamp.type=LogAppendTime`, so every mirrored
record carries the broker's own append time. Catch-up throughput is the record count over
the span between the first and the last append; latency is a record's append time minus
the produce time the load generator wrote into the first 8 bytes of its value.
"""

from __future__ import annotations

import argparse
import os
import re
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from mirror.kafka.errors import is_retriable

_ROOT = Path(__file__).resolve().parent.parent  # the checkout: `-m bench.load` resolves from here
_STAMP = struct.Struct(">q")  # produce wall-clock time in microseconds, at the head of a latency record


class _Quiet:
    def log(self, *args: object) -> None:
        pass


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "logger": _Quiet()})


def create_topic(bootstrap: str, topic: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
    client = admin(bootstrap)  # keep the handle alive until the future resolves
    fut = client.create_topics([NewTopic(topic, partitions, 1, config=dict(config or {}))], operation_timeout=30)[topic]
    fut.result(timeout=60)


def create_target_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A fresh target topic whose records carry the broker's append time (see module doc)."""
    create_topic(bootstrap, topic, partitions, {"message.timestamp.type": "LogAppendTime"})


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    if not topics:
        return
    client = admin(bootstrap)
    for fut in client.delete_topics(topics, operation_timeout=30).values():
        try:
            fut.result(timeout=60)
        except KafkaException:
            pass  # already gone, or never created by a contender that failed early


def await_files_deleted(log_dir: Path, topic: str, timeout: float = 30.0) -> bool:
    """Wait until a deleted topic's partition directories (live, or renamed `...-delete` for the
    broker's deletion task) are gone from `log_dir`; False if still there after `timeout`."""
    own = re.compile(rf"{re.escape(topic)}-\d+(\..*-delete)?")
    deadline = time.monotonic() + timeout
    while True:
        try:
            left = [d for d in os.listdir(log_dir) if own.fullmatch(d)]
        except FileNotFoundError:
            return True
        if not left:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def topic_names(bootstrap: str) -> set[str]:
    return set(admin(bootstrap).list_topics(timeout=15).topics)


def _consumer(bootstrap: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-inspect",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
            "logger": _Quiet(),
            **extra,
        }
    )


def watermarks(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    c = _consumer(bootstrap)
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False) for p in range(partitions)]
    finally:
        c.close()


class EndOffsets:
    """Cheap repeated end-offset polling of one topic (one long-lived consumer handle)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self._c = _consumer(bootstrap)

    def ends(self) -> list[int] | None:
        """High watermark of every partition; None while the topic or a leader is missing."""
        out = []
        for p in range(self.partitions):
            try:
                out.append(self._c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5, cached=False)[1])
            except KafkaException:
                return None
        return out

    def total(self) -> int:
        ends = self.ends()
        return -1 if ends is None else sum(ends)

    def reached(self, goal: list[int]) -> bool:
        """Every partition at or past its goal (a target copy is complete per partition)."""
        ends = self.ends()
        return ends is not None and all(e >= g for e, g in zip(ends, goal))

    def close(self) -> None:
        self._c.close()


# ---------------------------------------------------------------------------- values


def values(record_size: int, count: int = 256, seed: int = 7) -> list[bytes]:
    """Distinct record values that compress about 2:1 with lz4, like typical JSON or text payloads."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        raw = rng.randbytes((record_size + 1) // 2).hex().encode()
        out.append(raw[:record_size])
    return out


_PRELOAD_PRODUCER = {
    # Throughput settings for the loader only; they shape the source log the contenders
    # read (lz4 batches of up to 1 MiB), and every contender reads the same log.
    "linger.ms": 50,
    "batch.size": 1048576,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500000,
    "queue.buffering.max.kbytes": 1048576,
    "acks": "all",
    "enable.idempotence": True,
}


def preload(bootstrap: str, topic: str, records: int, partitions: int, record_size: int, procs: int = 2) -> float:
    """Create `topic` and fill it with `records` values; returns seconds taken.

    Python's produce() call costs a few microseconds per record, so the loader splits the
    partitions over `procs` loader processes (fresh interpreters: librdkafka's threads and
    fork() do not mix).
    """
    create_topic(bootstrap, topic, partitions)
    start = time.monotonic()
    procs = max(1, min(procs, partitions))
    children = []
    for k in range(procs):
        mine = [p for p in range(partitions) if p % procs == k]
        count = sum(_records_in(records, partitions, p) for p in mine)
        argv = [
            sys.executable,
            "-m",
            "bench.load",
            "fill",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--partition-list",
            ",".join(map(str, mine)),
            "--count",
            str(count),
            "--record-size",
            str(record_size),
        ]
        children.append(subprocess.Popen(argv, cwd=_ROOT))
    failed = [c.args for c in children if c.wait() != 0]
    if failed:
        raise RuntimeError(f"preload of {topic} failed in {len(failed)} loader process(es)")
    took = time.monotonic() - start
    got = sum(h - lo for lo, h in watermarks(bootstrap, topic, partitions))
    if got != records:
        raise RuntimeError(f"preload of {topic}: expected {records} records, found {got}")
    return took


def commit_group(bootstrap: str, group: str, topic: str, offsets: Mapping[int, int]) -> None:
    """Commit `offsets` for an idle consumer group (no members): work for the checkpointers."""
    c = _consumer(bootstrap, **{"group.id": group})
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
                return
            except KafkaException as exc:
                # A coordinator still loading its offsets (COORDINATOR_LOAD_IN_PROGRESS) or
                # moving: ask again until the deadline. librdkafka does not mark these
                # retriable on a synchronous commit, so the mirror's own rule decides.
                if not is_retriable(exc.args[0]) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        c.close()


def _records_in(records: int, partitions: int, p: int) -> int:
    return records // partitions + (1 if p < records % partitions else 0)


def fill(bootstrap: str, topic: str, mine: list[int], count: int, record_size: int) -> None:
    """Write `count` records round-robin over partitions `mine` (one loader process)."""
    p = Producer({"bootstrap.servers": bootstrap, "logger": _Quiet(), **_PRELOAD_PRODUCER})
    vals = values(record_size)
    nv = len(vals)
    produce = p.produce
    n = len(mine)
    for i in range(count):
        while True:
            try:
                produce(topic, vals[i % nv], f"k{i}".encode(), partition=mine[i % n])
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    if p.flush(120) != 0:
        raise RuntimeError("records still unacked after 120 s")


# ---------------------------------------------------------------------------- target


@dataclass
class TargetSpan:
    records: int
    first_append_ms: int
    last_append_ms: int
    append_time: bool  # False: the contender overrode the topic's timestamp type; spans are unreliable
    per_partition: list[int]

    @property
    def seconds(self) -> float:
        # Append times have millisecond resolution; never divide by zero on tiny runs.
        return max(self.last_append_ms - self.first_append_ms, 1) / 1000.0


def _read_at(c: Consumer, topic: str, offsets: Mapping[int, int], timeout: float = 30.0) -> dict[int, Any]:
    """The record at `offsets[p]` of each partition `p` (all partitions fetched at once)."""
    if not offsets:
        return {}
    c.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
    found: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    while len(found) < len(offsets) and time.monotonic() < deadline:
        for msg in c.consume(1000, 0.5):
            err = msg.error()
            if err is not None:
                if err.code() == err._PARTITION_EOF:
                    found.setdefault(msg.partition(), None)
                    continue
                raise KafkaException(err)
            if msg.partition() not in found and msg.offset() == offsets[msg.partition()]:
                found[msg.partition()] = msg
    c.unassign()
    return found


def _edges(c: Consumer, topic: str, partitions: int) -> tuple[list[int], dict[int, Any], dict[int, Any]]:
    """Per-partition counts, and the first and last record of every non-empty partition."""
    marks = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False) for p in range(partitions)]
    counts = [hi - lo for lo, hi in marks]
    firsts = _read_at(c, topic, {p: lo for p, (lo, hi) in enumerate(marks) if hi > lo})
    lasts = _read_at(c, topic, {p: hi - 1 for p, (lo, hi) in enumerate(marks) if hi > lo})
    return counts, firsts, lasts


def _scan_edges(c: Consumer, topic: str, partitions: int) -> tuple[list[int], dict[int, Any], dict[int, Any]]:
    """As `_edges`, for a topic written in transactions: commit markers take offsets, so the
    records are counted by reading them all (read_committed), and the last one is the last read."""
    counts = [0] * partitions
    firsts: dict[int, Any] = {}
    lasts: dict[int, Any] = {}
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    left = set(range(partitions))
    idle_since = time.monotonic()
    while left and time.monotonic() - idle_since < 30:
        for msg in c.consume(10000, 0.5):
            err = msg.error()
            if err is not None:
                if err.code() == err._PARTITION_EOF:
                    left.discard(msg.partition())
                    continue
                raise KafkaException(err)
            p: int = msg.partition()  # type: ignore[assignment]  # a record's partition is set
            counts[p] += 1
            firsts.setdefault(p, msg)
            lasts[p] = msg
            idle_since = time.monotonic()
    c.unassign()
    return counts, firsts, lasts


def target_span(bootstrap: str, topic: str, partitions: int, *, transactional: bool = False) -> TargetSpan:
    """Count, first and last append time of a mirrored topic (two fetches in all; a whole
    read when the copy was written in transactions)."""
    c = _consumer(bootstrap)
    try:
        counts, firsts, lasts = (_scan_edges if transactional else _edges)(c, topic, partitions)
        msgs = [m for m in (*firsts.values(), *lasts.values()) if m is not None]
        append = all(m.timestamp()[0] == TIMESTAMP_LOG_APPEND_TIME for m in msgs)
        first = min((m.timestamp()[1] for m in firsts.values() if m is not None), default=0)
        last = max((m.timestamp()[1] for m in lasts.values() if m is not None), default=0)
        return TargetSpan(sum(counts), first, last, append, counts)
    finally:
        c.close()


def same_edges(
    src_bootstrap: str,
    src_topic: str,
    dst_bootstrap: str,
    dst_topic: str,
    partitions: int,
    *,
    transactional: bool = False,
) -> bool:
    """Same per-partition counts, and identical first and last records (key and value) on both sides.

    A cheap content check on top of the counts: records landed in the same partition,
    in order, unaltered.
    """
    cs, ct = _consumer(src_bootstrap), _consumer(dst_bootstrap)
    try:
        s_counts, s_first, s_last = _edges(cs, src_topic, partitions)
        t_counts, t_first, t_last = (_scan_edges if transactional else _edges)(ct, dst_topic, partitions)
        if s_counts != t_counts:
            return False
        for s_side, t_side in ((s_first, t_first), (s_last, t_last)):
            for p, a in s_side.items():
                b = t_side.get(p)
                if a is None or b is None or a.key() != b.key() or a.value() != b.value():
                    return False
        return True
    finally:
        cs.close()
        ct.close()


def latencies_ms(bootstrap: str, topic: str, partitions: int, skip_before_us: int = 0) -> list[float]:
    """Append time minus stamped produce time of every record of a latency topic, in ms."""
    c = _consumer(bootstrap, **{"fetch.max.bytes": 52428800})
    ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)[1] for p in range(partitions)]
    remaining = sum(1 for e in ends if e > 0)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions) if ends[p] > 0])
    out: list[float] = []
    unpack = _STAMP.unpack_from
    idle_since = time.monotonic()
    try:
        while remaining and time.monotonic() - idle_since < 30:
            batch = c.consume(10000, 1.0)
            if batch:
                idle_since = time.monotonic()
            for msg in batch:
                if msg.error():
                    if msg.error().code() == msg.error()._PARTITION_EOF:
                        remaining -= 1
                        continue
                    raise KafkaException(msg.error())
                value = msg.value()
                if value is None or len(value) < 8:
                    continue
                sent_us = unpack(value)[0]
                if sent_us < skip_before_us:
                    continue
                out.append(msg.timestamp()[1] - sent_us / 1000.0)
    finally:
        c.close()
    return out


class LiveTail(threading.Thread):
    """Reads a target topic read_committed while it fills, noting when each stamped record
    became readable: the latency of a copy written in transactions, whose records are appended
    (their append time) up to a commit interval before a read_committed consumer may see them.
    Includes this consumer's own fetch wait (fetch.wait.max.ms=10) and its share of the CPU."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(name="bench-live-tail", daemon=True)
        self._c = _consumer(
            bootstrap,
            **{"fetch.max.bytes": 52428800, "enable.partition.eof": False, "isolation.level": "read_committed"},
        )
        self._c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self._halt = threading.Event()
        self.samples: list[tuple[int, float]] = []  # (stamped produce time in us, seen at in ms)
        self.count = 0

    def run(self) -> None:
        unpack = _STAMP.unpack_from
        while not self._halt.is_set():
            batch = self._c.consume(10000, 0.1)
            seen_ms = time.time() * 1000.0
            for msg in batch:
                if msg.error():
                    continue
                self.count += 1
                value = msg.value()
                if value is not None and len(value) >= 8:
                    self.samples.append((unpack(value)[0], seen_ms))

    def latencies_ms(self, skip_before_us: int = 0) -> list[float]:
        return [seen - sent / 1000.0 for sent, seen in self.samples if sent >= skip_before_us]

    def close(self) -> None:
        self._halt.set()
        self.join(10)
        self._c.close()


# ---------------------------------------------------------------------------- steady load


def steady(bootstrap: str, topic: str, partitions: int, record_size: int, rate: float, duration: float) -> int:
    """Produce `rate` records/s for `duration` s, each stamped with its produce time; returns the count.

    Pacing in 5 ms steps keeps the load smooth (no one-second bursts that would show up as
    latency of the contender). linger.ms=1 keeps the generator's own batching delay small
    and equal for every contender.
    """
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "logger": _Quiet(),
            "linger.ms": 1,
            "compression.type": "lz4",
            "acks": "all",
            "enable.idempotence": True,
            "queue.buffering.max.messages": 500000,
        }
    )
    pad = values(record_size - 8 if record_size > 8 else 1, count=64)
    pack = _STAMP.pack
    start = time.monotonic()
    sent = 0
    produce = p.produce
    while True:
        now = time.monotonic()
        elapsed = now - start
        if elapsed >= duration:
            break
        due = min(int(elapsed * rate), int(duration * rate))
        while sent < due:
            stamp = pack(time.time_ns() // 1000)
            try:
                produce(topic, stamp + pad[sent % 64], partition=sent % partitions)
            except BufferError:
                p.poll(0.01)
                continue
            sent += 1
        p.poll(0)
        time.sleep(0.005)
    if p.flush(60) != 0:
        raise RuntimeError("steady load: records still unacked after 60 s")
    return sent


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.load steady …`: the latency load generator runs in its own process."""
    ap = argparse.ArgumentParser(prog="bench.load")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("steady")
    s.add_argument("--bootstrap", required=True)
    s.add_argument("--topic", required=True)
    s.add_argument("--partitions", type=int, required=True)
    s.add_argument("--record-size", type=int, required=True)
    s.add_argument("--rate", type=float, required=True)
    s.add_argument("--duration", type=float, required=True)
    f = sub.add_parser("fill")
    f.add_argument("--bootstrap", required=True)
    f.add_argument("--topic", required=True)
    f.add_argument("--partition-list", required=True)
    f.add_argument("--count", type=int, required=True)
    f.add_argument("--record-size", type=int, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "fill":
        fill(args.bootstrap, args.topic, [int(x) for x in args.partition_list.split(",")], args.count, args.record_size)
        return 0
    sent = steady(args.bootstrap, args.topic, args.partitions, args.record_size, args.rate, args.duration)
    print(sent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
