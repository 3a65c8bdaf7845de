"""`python -m bench.limits`: does a topic with a small `max.message.bytes` mirror as fast as
an unrestricted one?

The broker checks each producer batch whole against the target topic's limit, so the mirror
gives such topics a producer of their own with batches that fit. This measures
the cost: two source topics with the same records (N x 1 KiB random values, P partitions),
one unrestricted and one with `max.message.bytes=65536` (copied to its target), each
mirrored by `mirror run --until-caught-up` into a fresh target topic, in alternating rounds
so a drift of the machine's load hits both alike. Prints records/s per run and the medians.

`--floor` adds what librdkafka alone does with the same two batch sizes: a bare producer
with the mirror's producer settings writing the same records into a fresh target topic of
each kind. The ratio of the two floors is what small batches cost Kafka itself, the most
the mirror's ratio can reach.

Starts its own two clusters on free loopback ports in a temporary directory and always
stops them. Figures on a loaded 2-core machine move a lot: compare the two columns of the
same run, not runs of different days.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.harness import _free_base_port
from mirror.devenv.kafka import DevClusters
from mirror.engine.targets import LIMIT_HEADROOM
from mirror.engine.worker import BATCH_MARGIN
from mirror.kafka.settings import PRODUCER_DEFAULTS


def _produce(bootstrap: str, topic: str, records: int, partitions: int, size: int, limit: int | None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cfg = {"max.message.bytes": str(limit)} if limit else {}
    admin.create_topics([NewTopic(topic, partitions, 1, config=cfg)])[topic].result(60)
    # batches that fit the restricted topic, for both topics: the same source layout
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 60000, "enable.idempotence": True})
    _write(p, topic, records, partitions, size)


def _write(p: Producer, topic: str, records: int, partitions: int, size: int) -> None:
    """The bench's records: random-looking values of `size` bytes (plus a counter), round robin."""
    payload = os.urandom(size * 64)
    for i in range(records):
        j = (i * 7919) % 63 * size
        while True:
            try:
                p.produce(topic, value=payload[j : j + size] + i.to_bytes(8, "big"), partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(300) == 0


def _floor(dst: str, records: int, partitions: int, size: int, limit: int | None, run: int) -> float:
    """Seconds a bare producer with the mirror's settings takes to write the records into a
    fresh topic with the target's limit (the source's plus the provenance headroom), with the
    batch size the mirror would pick for it."""
    topic = f"floor-{'small' if limit else 'plain'}-{run}"
    admin = AdminClient({"bootstrap.servers": dst})
    target_limit = limit + LIMIT_HEADROOM if limit else None
    cfg = {"max.message.bytes": str(target_limit)} if target_limit else {}
    admin.create_topics([NewTopic(topic, partitions, 1, config=cfg)])[topic].result(60)
    settings = dict(PRODUCER_DEFAULTS)
    if target_limit and target_limit < int(settings["batch.size"]):
        settings["batch.size"] = max(1024, target_limit - BATCH_MARGIN)
    p = Producer({"bootstrap.servers": dst, **settings})
    t0 = time.monotonic()
    _write(p, topic, records, partitions, size)
    return time.monotonic() - t0


def _mirror(src: str, dst: str, topic: str, run: int, workdir: Path) -> float:
    cfg = workdir / f"{topic}-{run}.yaml"
    cfg.write_text(f"""\
clusters:
  src: {{bootstrap: "{src}"}}
  dst: {{bootstrap: "{dst}"}}
flows:
  - name: b-{topic}-{run}
    source: src
    target: dst
    consumer_group: bench-{topic}-{run}
    rename: prefix
    topics: {{include: ["{topic}"]}}
offset_store: {{kind: sqlite, path: "{workdir / f'o-{topic}-{run}.db'}"}}
""")
    # each run writes a fresh target topic: delete the previous one first
    admin = AdminClient({"bootstrap.servers": dst})
    if f"src.{topic}" in admin.list_topics(timeout=10).topics:
        admin.delete_topics([f"src.{topic}"], operation_timeout=30)[f"src.{topic}"].result(60)
        deadline = time.monotonic() + 60
        while f"src.{topic}" in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
            time.sleep(0.5)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "mirror", "run", "-c", str(cfg), "--until-caught-up"], check=True, timeout=900)
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--limit", type=int, default=65536)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--floor", action="store_true", help="also time a bare producer with the same batch sizes")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-limits-") as tmp:
        dev = DevClusters(Path(tmp) / "clusters")
        status = dev.up(["src", "dst"], _free_base_port(2)).status
        try:
            src, dst = (status["clusters"][n]["bootstrap"] for n in ("src", "dst"))
            plain, small = "plain", "small"
            _produce(src, plain, args.records, args.partitions, args.size, None)
            _produce(src, small, args.records, args.partitions, args.size, args.limit)
            rates: dict[str, list[float]] = {plain: [], small: [], "floor-plain": [], "floor-small": []}
            for run in range(args.reps):
                for topic in (plain, small) if run % 2 == 0 else (small, plain):
                    secs = _mirror(src, dst, topic, run, Path(tmp))
                    rates[topic].append(args.records / secs)
                    print(f"run {run + 1} {topic:>6}: {args.records / secs:>9,.0f} records/s ({secs:.1f} s, incl. ~start-up)", flush=True)
                    if args.floor:
                        limit = args.limit if topic == small else None
                        secs = _floor(dst, args.records, args.partitions, args.size, limit, run)
                        rates[f"floor-{topic}"].append(args.records / secs)
                        print(f"run {run + 1} {'floor-' + topic:>12}: {args.records / secs:>9,.0f} records/s (bare producer)", flush=True)
            print(f"\n{args.records:,} x {args.size} B random records, {args.partitions} partitions, load average {os.getloadavg()[0]:.1f}")
            labels = [(plain, "unrestricted"), (small, f"max.message.bytes={args.limit}")]
            if args.floor:
                labels += [("floor-plain", "bare producer, unrestricted"), ("floor-small", f"bare producer, {args.limit}")]
            for topic, label in labels:
                r = rates[topic]
                print(f"{label:>30}: median {statistics.median(r):>9,.0f} records/s (min {min(r):,.0f}, max {max(r):,.0f})")
        finally:
            dev.down()


if __name__ == "__main__":
    main()
