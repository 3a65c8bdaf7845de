"""`python -m bench.micro`: CPU per record of the worker's hot path, without clusters.

Runs the worker's `Forwarder.forward` over real confluent-kafka `Message` objects (built in memory:
N x 512 B values in runs of one partition, consume batches of 2000) into a real librdkafka
producer with the mirror's settings whose bootstrap answers nothing, so every record is
copied into librdkafka's queue exactly as in production but never sent (the queue is purged
between rounds, outside the timed region). After each batch the delivery reports a segment
asks for are served to the worker's own callbacks, with the target offsets a contiguous
write gives, and every `--commit-every` batches the worker's commit path runs for real:
acknowledgements to the offset-map recorder, its SQLite write (a temporary file, fsynced as
in production), and the commit positions.

Measures process CPU time (user + system, `time.process_time`) per phase, best of
`--reps`, so a busy shared machine moves the figures less than wall time would.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Message, Producer

from mirror import config
from mirror.engine.worker import CONSUME_BATCH, FlowWorker
from mirror.kafka.settings import PRODUCER_DEFAULTS
from mirror.run.recorder import OffsetMapRecorder
from mirror.store.sqlite import SqliteStore

TEXT = """\
clusters: {src: {bootstrap: "127.0.0.1:9"}, dst: {bootstrap: "127.0.0.1:9"}}
flows:
  - {name: bench, source: src, target: dst, topics: {include: ["bench-load"]}, rename: prefix, provenance_headers: %s}
"""


class _Report:
    __slots__ = ("_o",)

    def __init__(self, o: int) -> None:
        self._o = o

    def offset(self) -> int:
        return self._o


class _Admin:
    def topics(self) -> dict[str, int]:
        return {}


class _Consumer:
    def commit(self, *, offsets: Any, asynchronous: bool) -> None:
        pass

    def position(self, tps: list[Any]) -> list[Any]:
        return []


def _batches(records: int, partitions: int, run: int, size: int) -> list[list[Message]]:
    value = (os.urandom(size // 2).hex().encode())[:size]
    msgs: list[Message] = []
    next_offset = [0] * partitions
    p = 0
    while len(msgs) < records:
        n = min(run, records - len(msgs))
        for _ in range(n):
            o = next_offset[p]
            msgs.append(Message("bench-load", p, o, b"key-%d" % o, value, None, None, (1, 1_700_000_000_000 + o)))
            next_offset[p] = o + 1
        p = (p + 1) % partitions
    return [msgs[i : i + CONSUME_BATCH] for i in range(0, len(msgs), CONSUME_BATCH)]


def _worker(
    partitions: int, provenance: bool, store_path: Path | None
) -> tuple[FlowWorker, Producer, OffsetMapRecorder | None]:
    cfg = config.parse(TEXT % ("true" if provenance else "false"), env={})
    flow = cfg.flows[0]
    recorder = OffsetMapRecorder(SqliteStore(store_path), flow.name, registry=None) if store_path is not None else None
    settings = {
        **PRODUCER_DEFAULTS,
        "bootstrap.servers": "127.0.0.1:9",
        "queue.buffering.max.kbytes": 2_000_000,
        "queue.buffering.max.messages": 2_000_000,
        "log_level": 0,
    }
    producer = Producer(settings)
    w = FlowWorker(
        cfg,
        flow,
        stop=threading.Event(),
        listeners=[recorder] if recorder else [],
        consumer_factory=lambda name, cluster, cfg: _Consumer(),
        producer_factory=lambda name, cluster, cfg: producer,
        admin_factory=lambda name, cluster: _Admin(),
    )
    w.open()
    from mirror.domain.route import route

    for p in range(partitions):
        w.ledger.assign(("bench-load", p), w.assignment.new_partition(route(flow, "bench-load", p)))
    return w, producer, recorder


def _serve_reports(w: FlowWorker, t_next: dict[int, int]) -> None:
    """What `producer.poll` would call: each segment's first and last report, in order."""
    for st in list(w.ledger):
        while st.inflight and st.inflight[0] is not st.open:
            seg = st.inflight[0]
            p = st.route.partition
            t0 = t_next.get(p, 0)
            w.reports.on_segment_start(st, seg, None, _Report(t0))
            w.reports.on_segment_end(st, seg, None, _Report(t0 + seg.count - 1))
            t_next[p] = t0 + seg.count


def measure(
    records: int, partitions: int, run: int, size: int, reps: int, provenance: bool, store: bool, commit_every: int
) -> dict[str, float]:
    batches = _batches(records, partitions, run, size)
    best: dict[str, float] = {}
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as tmp:
            w, producer, recorder = _worker(partitions, provenance, Path(tmp) / "offsets.db" if store else None)
            t_next: dict[int, int] = {}
            fwd = acks = 0.0
            gc.collect()
            for i, b in enumerate(batches):
                c0 = time.process_time()
                w.forwarder.forward(b)
                c1 = time.process_time()
                _serve_reports(w, t_next)
                if (i + 1) % commit_every == 0 or i == len(batches) - 1:
                    w.committer.commit()
                c2 = time.process_time()
                fwd += c1 - c0
                acks += c2 - c1
                if len(producer) > 400_000:
                    producer.purge(in_queue=True, in_flight=True)
                    producer.poll(0)
            producer.purge(in_queue=True, in_flight=True)
            producer.poll(0)
            assert w.records_acked == records, (w.records_acked, records)
            for k, v in (("forward", fwd), ("acks+commit", acks), ("total", fwd + acks)):
                best[k] = min(best.get(k, v), v)
    return {k: records / v for k, v in best.items()} | {
        f"{k}_us_per_record": 1e6 * v / records for k, v in best.items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.micro", description=__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--run", type=int, default=500, help="records of one partition in a row (a fetch's run)")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-provenance", action="store_true")
    ap.add_argument("--no-store", action="store_true")
    ap.add_argument(
        "--commit-every",
        type=int,
        default=100,
        help="batches between commits (100 x 2000 ~ one commit interval at 200k records/s)",
    )
    args = ap.parse_args(argv)
    r = measure(
        args.records,
        args.partitions,
        args.run,
        args.size,
        args.reps,
        not args.no_provenance,
        not args.no_store,
        args.commit_every,
    )
    load = os.getloadavg()
    print(
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.records} records, runs of {args.run}, best of "
        f"{args.reps}"
    )
    for k in ("forward", "acks+commit", "total"):
        print(f"  {k:12s} {r[k]:>12,.0f} records/CPU-s  {r[k + '_us_per_record']:.3f} us/record")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
