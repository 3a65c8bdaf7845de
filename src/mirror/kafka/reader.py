"""`PartitionReader`: read a few records at given offsets (lag seconds, canary, audits)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, KafkaException, TopicPartition

from mirror.config import ClusterConfig
from mirror.domain.replay import StoredRecord, held_size
from mirror.kafka.clients import build_client
from mirror.kafka.errors import is_retriable, raise_for

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Record:
    """A consumed record, detached from librdkafka's `Message`."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int  # -1 when the record carries none
    key: bytes | None
    value: bytes | None


class PartitionReader:
    """A group-less consumer that reads assigned partitions from explicit offsets.

    Used by monitoring (the timestamp of the record at the mirror's position) and the
    canary (probes on the target). It never joins a group and never commits, so it leaves
    no trace in the cluster's group list. read_committed, like the mirror itself.
    `auto.offset.reset=earliest`: an offset deleted by retention reads from the log start,
    which is the oldest record that still exists (the documented lag-seconds fallback).
    """

    def __init__(self, name: str, cluster: ClusterConfig, settings: Mapping[str, Any] | None = None) -> None:
        self.name = name
        base = {
            "group.id": f"mirror-reader-{id(self):x}",  # required by librdkafka; nothing is committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": False,
        }
        merged = {**base, **(settings or {})}
        self._group = str(merged["group.id"])
        self._consumer = build_client(Consumer, name, cluster, merged)
        self._assigned: set[tuple[str, int]] = set()
        self._timeout = cluster.timeout
        self._group_checked = False

    def _check_group(self, tp: TopicPartition) -> None:
        """Ask for the group's coordinator once, waiting for the answer. librdkafka looks it up
        anyway (a group.id is required) and reports a refusal (Describe on the group) only as
        an event, which may come after the records: a read could then succeed or fail by luck."""
        if self._group_checked:
            return
        try:
            self._consumer.committed([TopicPartition(tp.topic, tp.partition)], timeout=self._timeout)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                raise_for(self.name, f"read as group {self._group!r}", exc, acl=("Describe", "group", self._group))
            log.debug("reader %s: coordinator lookup: %s", self.name, exc)
        self._group_checked = True

    def assign(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Read exactly these partitions, each from the given offset (OFFSET_BEGINNING/END allowed)."""
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        if tps:
            self._check_group(tps[0])
        try:
            self._consumer.assign(tps)
        except KafkaException as exc:
            raise_for(self.name, "assign partitions", exc)
        self._assigned = set(offsets)

    def add(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Start reading more partitions without moving the ones already assigned."""
        new = {k: v for k, v in offsets.items() if k not in self._assigned}
        if new:
            self._check_group(TopicPartition(*next(iter(new))))
            try:
                self._consumer.incremental_assign([TopicPartition(t, p, o) for (t, p), o in new.items()])
            except KafkaException as exc:
                raise_for(self.name, "assign partitions", exc)
            self._assigned |= set(new)

    @property
    def assigned(self) -> frozenset[tuple[str, int]]:
        return frozenset(self._assigned)

    def read(self, max_records: int = 500, timeout: float = 0.5) -> list[Record]:
        """Records available now (waits at most `timeout` for the first); transient errors are skipped.

        Returns as soon as one record is there: `consume(n, timeout)` would wait for n
        records or the whole timeout, and the canary would count that wait as latency.
        """
        try:
            first = self._consumer.poll(timeout)
            msgs = (
                [first, *self._consumer.consume(max_records - 1, timeout=0)]
                if first is not None and max_records > 1
                else [first]
                if first is not None
                else []
            )
        except KafkaException as exc:
            raise_for(self.name, "read records", exc)
        out = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if is_retriable(err) or err.code() in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                    log.debug("reader %s: %s", self.name, err.str())
                    continue
                if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:  # the group.id librdkafka requires
                    raise_for(
                        self.name,
                        f"read as group {self._group!r}",
                        KafkaException(err),
                        acl=("Describe", "group", self._group),
                    )
                raise_for(
                    self.name,
                    f"read {m.topic()}[{m.partition()}]",
                    KafkaException(err),
                    acl=("Read", "topic", str(m.topic())),
                )
            topic, partition, offset = m.topic(), m.partition(), m.offset()
            if topic is None or partition is None or offset is None:
                continue  # only error events lack them, and those are handled above
            _kind, ts = m.timestamp()
            out.append(Record(topic, partition, offset, ts if ts is not None else -1, m.key(), m.value()))
        return out

    def first_records(self, offsets: Mapping[tuple[str, int], int], timeout: float) -> dict[tuple[str, int], Record]:
        """The first readable record at or after each offset; partitions with none in time are absent."""
        self.assign(offsets)
        want = set(offsets)
        got: dict[tuple[str, int], Record] = {}
        deadline = time.monotonic() + timeout
        while want - got.keys():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for r in self.read(max_records=len(want) * 4, timeout=min(left, 0.5)):
                key = (r.topic, r.partition)
                if key in want and key not in got:
                    got[key] = r
        try:
            self._consumer.unassign()
        except KafkaException:
            pass
        self._assigned = set()
        return got

    def close(self) -> None:
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError):
            pass


# A record read back by `read_range` (the replay check of both engines, `import-mm2`).
TailRecord = StoredRecord


def read_headers(
    name: str, cluster: ClusterConfig, topic: str, partition: int, start: int, end: int, timeout: float
) -> list[tuple[int, list[tuple[str, bytes | None]]]]:
    """Offsets and headers of the records of one partition in [start, end), in order; keys and
    values are dropped as they come, so a range of thousands of large records costs little."""
    return [
        (offset, headers)
        for offset, _ts, _key, _value, headers, _lat in _range(
            name, cluster, topic, partition, start, end, timeout, None, keep_data=False
        )
    ]


def read_range(
    name: str,
    cluster: ClusterConfig,
    topic: str,
    partition: int,
    start: int,
    end: int,
    timeout: float,
    until: Callable[[TailRecord], bool] | None = None,
    *,
    isolation: str | None = None,
) -> list[TailRecord]:
    """The records of one partition in [start, end), in order (stopping after the first one
    `until` accepts, when given).

    For the Spark engine's replay check (what the target already holds, by the provenance
    header of its last records, and whether those copies are of the records being mirrored).
    read_uncommitted: the mirror's own target writes are not transactional, and an offset
    range that ends at the high watermark must be read whole.
    `isolation`: `read_committed` or `read_uncommitted` as another consumer read the range
    (`import-mm2` places MM2's copies by the records MM2's consumer saw); None leaves
    librdkafka's default.
    Raises `KafkaOperationError` when the range cannot be read within `timeout`.
    """
    out: list[TailRecord] = []
    records = _range(name, cluster, topic, partition, start, end, timeout, isolation)
    try:
        for offset, ts, key, value, headers, log_append_time in records:
            rec = TailRecord(offset, ts, key, value, headers, log_append_time=log_append_time)
            out.append(rec)
            if until is not None and until(rec):
                break
    finally:
        records.close()  # closes the consumer now, not when the generator is collected
    return out


def _range(
    name: str,
    cluster: ClusterConfig,
    topic: str,
    partition: int,
    start: int,
    end: int,
    timeout: float,
    isolation: str | None,
    *,
    keep_data: bool = True,
) -> Generator[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], bool], None, None]:
    """(offset, timestamp, key, value, headers, log-append time) of each record in [start, end)."""
    if end <= start:
        return
    consumer = _range_consumer(name, cluster, f"mirror-tail-{topic}-{partition}", isolation)
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise_for(
                    name, f"read {topic}[{partition}] {start}..{end}", KafkaException(KafkaError(KafkaError._TIMED_OUT))
                )
            for m in consumer.consume(1000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF or is_retriable(err):
                        continue
                    raise_for(name, f"read {topic}[{partition}]", KafkaException(err))
                offset = m.offset()
                if offset is None or offset >= end:
                    continue
                rec = _record(m, keep_data)
                yield (rec.offset, rec.timestamp_ms, rec.key, rec.value, rec.headers, rec.log_append_time)
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            if position >= end:
                return
    except KafkaException as exc:
        raise_for(name, f"read {topic}[{partition}]", exc)
    finally:
        _close(consumer)


def _record(m: Any, keep_data: bool = True) -> TailRecord:
    """One consumed message as the record both read loops hand on (headers' values as bytes)."""
    raw: Any = m.headers() or []
    kind, ts = m.timestamp()
    return TailRecord(
        m.offset(),
        ts if ts is not None else -1,
        m.key() if keep_data else None,
        m.value() if keep_data else None,
        [(k, v if isinstance(v, bytes) or v is None else str(v).encode()) for k, v in raw],
        log_append_time=kind == TIMESTAMP_LOG_APPEND_TIME,
    )


def read_offsets(
    name: str,
    cluster: ClusterConfig,
    ranges: Mapping[tuple[str, int], tuple[int, int]],
    timeout: float,
    *,
    isolation: str | None = None,
) -> dict[tuple[str, int], list[int]]:
    """The offsets of the records in [start, end) of many partitions, read by one consumer.

    `read_range` per partition opens a consumer each time: at thousands of partitions
    (`import-mm2` reading where MM2's last offset syncs leave copies unplaced) that is most
    of the time spent. `isolation` as in `read_range`.
    Raises `KafkaOperationError` when the ranges cannot be read within `timeout`.
    """
    out: dict[tuple[str, int], list[int]] = {tp: [] for tp in ranges}
    for tp, m in _in_ranges(name, cluster, ranges, timeout, isolation):
        out[tp].append(m.offset())
    return out


def read_ranges(
    name: str,
    cluster: ClusterConfig,
    ranges: Mapping[tuple[str, int], tuple[int, int]],
    timeout: float,
    max_bytes: int | None = None,
    *,
    isolation: str | None = "read_committed",
) -> dict[tuple[str, int], list[TailRecord]]:
    """The records in [start, end) of many partitions, read by one consumer (`read_offsets`,
    with timestamps, keys, values and headers): the native engine's replay check reads the
    target's last records and the source's records of every assigned partition at once.
    `max_bytes`: the read ends once the records taken cost that much together (`held_size`,
    so at most one record past it); a range cut there returns the records taken before, in
    order from its start.
    Raises `KafkaOperationError` when the ranges cannot be read within `timeout`.
    """
    out: dict[tuple[str, int], list[TailRecord]] = {tp: [] for tp in ranges}
    spent = 0
    found = _in_ranges(name, cluster, ranges, timeout, isolation)
    try:
        for tp, m in found:
            rec = _record(m)
            out[tp].append(rec)
            spent += held_size(rec)
            if max_bytes is not None and spent >= max_bytes:
                break
    finally:
        found.close()  # closes the consumer now, not when the generator is collected
    return out


# How long one wait for records of the ranges lasts: also how long the read idles at its end.
_RANGE_WAIT = 0.1


def _in_ranges(
    name: str,
    cluster: ClusterConfig,
    ranges: Mapping[tuple[str, int], tuple[int, int]],
    timeout: float,
    isolation: str | None,
) -> Generator[tuple[tuple[str, int], Any], None, None]:
    """(partition, message) of each record in the partitions' [start, end), one consumer for all.

    A partition is read once a record at or past its range's last offset arrives, or its end
    of partition event says the log ends at or past its range's end (a range ending in
    control records, or records read_committed does not deliver). Positions are asked only
    when nothing arrives for a moment: asking every partition's position after every batch
    cost more than the read itself at 10,000 partitions (bench/README.md, "10,000 partitions").
    """
    todo = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
    if not todo:
        return
    consumer = _range_consumer(name, cluster, f"mirror-ranges-{id(todo):x}", isolation)
    try:
        consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _end) in todo.items()])
        deadline = time.monotonic() + timeout
        eofs: set[tuple[str, int]] = set()  # partitions whose end-of-partition event came
        while todo:
            if time.monotonic() > deadline:
                (t, p), (start, end) = next(iter(todo.items()))
                raise_for(
                    name,
                    f"read {len(todo)} partition ranges (e.g. {t}[{p}] {start}..{end})",
                    KafkaException(KafkaError(KafkaError._TIMED_OUT)),
                )
            batch = consumer.consume(1000, timeout=_RANGE_WAIT)
            done: list[tuple[str, int]] = []
            for m in batch:
                tp, offset = (str(m.topic()), int(m.partition() or 0)), m.offset()
                err = m.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    if is_retriable(err):
                        continue
                    raise_for(name, f"read {m.topic()}[{m.partition()}]", KafkaException(err))
                span = todo.get(tp)
                if span is None or offset is None:
                    continue
                if err is not None:
                    eofs.add(tp)
                if err is None and span[0] <= offset < span[1]:
                    yield tp, m
                # A record: the next one is past it; an end of partition: nothing at or past `offset` yet.
                if offset >= span[1] - (1 if err is None else 0):
                    del todo[tp]
                    done.append(tp)
            # Nothing arriving: the ranges whose position is past their end are read. Not a
            # partition that had an end-of-partition event: after one, librdkafka releases since 2.2
            # report a position one too far (librdkafka#4844); its events tell it instead.
            asked = [TopicPartition(t, p) for t, p in todo if (t, p) not in eofs]
            if not batch and asked:
                for pos in consumer.position(asked):
                    key = (pos.topic, pos.partition)
                    if pos.offset >= todo[key][1]:
                        del todo[key]
                        done.append(key)
            if done:
                consumer.pause([TopicPartition(t, p) for t, p in done])
    except KafkaException as exc:
        raise_for(name, "read partition ranges", exc)
    finally:
        _close(consumer)


def _range_consumer(name: str, cluster: ClusterConfig, group: str, isolation: str | None) -> Consumer:
    settings = {
        "group.id": group,  # required by librdkafka; nothing is committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        **({"isolation.level": isolation} if isolation else {}),
    }
    return build_client(Consumer, name, cluster, settings)


def _close(consumer: Consumer) -> None:
    try:
        consumer.close()
    except (KafkaException, RuntimeError):
        pass
