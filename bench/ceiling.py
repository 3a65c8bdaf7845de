"""The raw ceiling: the least work a Python process can do to copy a topic between clusters.

One confluent-kafka consumer (partitions assigned, no group, no commits) and one producer
(acks=1, no idempotence: no delivery guarantee) in a batch consume -> produce loop that
keeps key, value, headers, timestamp and partition. Nothing else: no offset map, no
commits, no metrics, no filtering. `mirror run` does strictly more per record, so this is
the number it is measured against ("mirror/ceiling").

Run as `python -m bench.ceiling …`; the harness samples its RSS and CPU like any contender.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)


class _Quiet:
    def log(self, *args: object) -> None:
        pass


def _end(c: Consumer, topic: str, partition: int, timeout: float = 30.0) -> int:
    """End offset, riding out NOT_LEADER on a topic created a moment ago."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def copy(
    src: str,
    dst: str,
    topic: str,
    target: str,
    partitions: list[int],
    producer: dict[str, str],
    batch: int,
    follow: bool = False,
    consumer: dict[str, str] | None = None,
) -> int:
    """Copy until every partition hit its end (or, with `follow`, until SIGTERM)."""
    c = Consumer(
        {
            "bootstrap.servers": src,
            "group.id": "bench-ceiling",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "logger": _Quiet(),
            **(consumer or {}),
        }
    )
    # No guarantees by default; -X acks=all -X enable.idempotence=true measures what they cost.
    p = Producer({"bootstrap.servers": dst, "logger": _Quiet(), "acks": 1, "enable.idempotence": False, **producer})
    ends = {q: _end(c, topic, q) for q in partitions}
    todo = {q for q, end in ends.items() if end > 0}
    c.assign([TopicPartition(topic, q, OFFSET_BEGINNING) for q in (partitions if follow else todo)])
    if follow:
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        todo = {-1}  # never empties by EOF; the loop ends on SIGTERM
    copied = 0
    produce = p.produce
    eof = KafkaError._PARTITION_EOF
    while todo:
        # consume(n, timeout) waits until n records are there OR the timeout passes, so a
        # blocking call with a big n adds up to `timeout` of latency at low rates. Take what
        # is already fetched without waiting; block only for the first record when idle.
        msgs = c.consume(batch, 0) or c.consume(1, 0.5)
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == eof:
                    if not follow:
                        todo.discard(msg.partition())
                    continue
                raise SystemExit(f"consume error: {err}")
            while True:
                try:
                    produce(
                        target,
                        msg.value(),
                        msg.key(),
                        partition=msg.partition(),
                        timestamp=msg.timestamp()[1],
                        headers=msg.headers(),
                    )
                    break
                except BufferError:
                    p.poll(0.01)
            copied += 1
        p.poll(0)
        if follow and stop:
            break
    left = p.flush(120)
    c.close()
    if left:
        raise SystemExit(f"{left} records unacked after 120 s")
    return copied


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.ceiling")
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--target-topic", required=True)
    ap.add_argument("--partitions", required=True, help="comma-separated partition numbers")
    ap.add_argument("--batch", type=int, default=10000)
    ap.add_argument("--follow", action="store_true", help="keep copying new records until SIGTERM (latency runs)")
    ap.add_argument("-X", dest="settings", action="append", default=[], help="producer setting key=value")
    ap.add_argument("-C", dest="consumer", action="append", default=[], help="consumer setting key=value")
    args = ap.parse_args(argv)
    producer = dict(s.split("=", 1) for s in args.settings)
    start = time.monotonic()
    n = copy(
        args.src,
        args.dst,
        args.topic,
        args.target_topic,
        [int(x) for x in args.partitions.split(",")],
        producer,
        args.batch,
        args.follow,
        dict(x.split("=", 1) for x in args.consumer),
    )
    print(f"copied {n} records in {time.monotonic() - start:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
