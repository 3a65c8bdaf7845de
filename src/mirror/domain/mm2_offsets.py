"""MirrorMaker 2's progress records, decoded, and turned into this project's offset map (pure).

Three of MM2's internal topics say how far it got and where each record landed:

* `mm2-offsets.<source>.internal` (Connect's offset store, JSON): per source partition the
  offset of the last record MM2 wrote *and* committed; MM2 resumes at that offset + 1.
* `mm2-offset-syncs.<target>.internal` (Kafka protocol structs): now and then
  `(upstream offset -> downstream offset)` of one copied record. MM2 emits one when a task
  starts, when the source skipped offsets (a transaction marker, compaction) and at least
  every `offset.lag.max` records, so between two syncs of one task's lifetime the delta is
  usually constant.
* `<source>.checkpoints.internal` (structs): a group's source position and MM2's
  translation of it.

Between two syncs the delta is constant only if nothing was skipped in between, which the
counts tell: `d2 - d1 == u2 - u1`. Where they differ (a skipped offset whose sync MM2 dropped
under load, or a restart that copied records twice), the source records between the two are
read and zipped with the target offsets from the first sync on: within one MM2 task lifetime
copies land contiguously, and a new lifetime always starts with a sync. The stretch after the
last sync up to where MM2 stopped is always read, which also gives the partition's tip (the
newest record the rows are exact for). Where reading cannot settle it (the source records are
gone), the rows err towards re-reading, never towards skipping (docs/design.md invariant 2).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from mirror.domain.offsetmap import OffsetSync, translate

SOURCE_CONNECTOR = "MirrorSourceConnector"

Partition = tuple[str, int]


class Mm2FormatError(ValueError):
    """A record of MM2's internal topics that does not decode as MM2 writes them."""


@dataclass(frozen=True, slots=True)
class Mm2Sync:
    topic: str
    partition: int
    upstream: int
    downstream: int


@dataclass(frozen=True, slots=True)
class Mm2Checkpoint:
    group: str
    topic: str  # the remote topic on the target (MM2 renames the source's)
    partition: int
    upstream: int  # the group's position on the source
    downstream: int  # MM2's translation of it
    time_ms: int


# ---------------------------------------------------------------------------- decoding


def decode_source_offset(key: bytes | None, value: bytes | None, source: str) -> tuple[Partition, int | None] | None:
    """`(topic, partition), next offset` of one record of Connect's offset topic (None
    offset: a tombstone, the offset was reset); None when the record is not MM2's source
    connector's for cluster `source` (the checkpoint and heartbeat connectors store theirs too)."""
    if key is None:
        return None
    try:
        name, part = json.loads(key)
    except (ValueError, TypeError) as exc:
        raise Mm2FormatError(f"offset key {key[:80]!r} is not [connector, partition]") from exc
    if name != SOURCE_CONNECTOR or not isinstance(part, dict) or part.get("cluster") != source:
        return None
    try:
        tp = (str(part["topic"]), int(part["partition"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise Mm2FormatError(f"offset key {key[:80]!r} lacks topic/partition") from exc
    if value is None:
        return tp, None
    try:
        body = json.loads(value)
        return tp, int(body["offset"]) + 1
    except (ValueError, TypeError, KeyError) as exc:
        raise Mm2FormatError(f'offset value {value[:80]!r} of {tp[0]}[{tp[1]}] is not {{"offset": N}}') from exc


def resume_positions(records: Iterable[tuple[bytes | None, bytes | None]], source: str) -> dict[Partition, int]:
    """Where MM2 would resume each source partition: the newest record per key wins, as in
    Connect's compacted offset store."""
    out: dict[Partition, int] = {}
    for key, value in records:
        got = decode_source_offset(key, value, source)
        if got is None:
            continue
        tp, offset = got
        if offset is None:
            out.pop(tp, None)
        else:
            out[tp] = offset
    return out


class _Struct:
    """Reads Kafka protocol types (big-endian INT16/32/64, STRING = INT16 length + UTF-8)."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def _take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise Mm2FormatError(f"{self.what}: record too short")
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(v)

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def int64(self) -> int:
        return self._take(">q")

    def string(self) -> str:
        n = self.int16()
        if n < 0 or self.pos + n > len(self.data):
            raise Mm2FormatError(f"{self.what}: bad string length {n}")
        s = self.data[self.pos : self.pos + n].decode("utf-8")
        self.pos += n
        return s


def decode_offset_sync(key: bytes | None, value: bytes | None) -> Mm2Sync:
    if key is None or value is None:
        raise Mm2FormatError("offset sync without key or value")
    k, v = _Struct(key, "offset sync key"), _Struct(value, "offset sync value")
    topic, partition = k.string(), k.int32()
    return Mm2Sync(topic, partition, v.int64(), v.int64())


def decode_checkpoint(key: bytes | None, value: bytes | None, time_ms: int) -> Mm2Checkpoint:
    if key is None or value is None:
        raise Mm2FormatError("checkpoint without key or value")
    k, v = _Struct(key, "checkpoint key"), _Struct(value, "checkpoint value")
    group, topic, partition = k.string(), k.string(), k.int32()
    version = v.int16()
    if version != 0:
        raise Mm2FormatError(f"checkpoint value version {version} is unknown (0 expected)")
    return Mm2Checkpoint(group, topic, partition, v.int64(), v.int64(), time_ms)


def decode_heartbeat(key: bytes | None, value: bytes | None) -> tuple[str, str, int]:
    """`(source alias, target alias, time_ms)` of one record of MM2's `heartbeats` topic."""
    if key is None or value is None:
        raise Mm2FormatError("heartbeat without key or value")
    k, v = _Struct(key, "heartbeat key"), _Struct(value, "heartbeat value")
    source, target = k.string(), k.string()
    v.int16()  # version
    return source, target, v.int64()


def newest_heartbeat(records: Iterable[tuple[bytes | None, bytes | None]], source: str, target: str) -> int | None:
    """The time of the newest heartbeat MM2 emitted for `source->target` (None: none seen).
    Records that are not MM2 heartbeats are skipped: the topic name is shared."""
    newest = None
    for key, value in records:
        try:
            s, t, ms = decode_heartbeat(key, value)
        except (Mm2FormatError, UnicodeDecodeError):
            continue
        if (s, t) == (source, target) and (newest is None or ms > newest):
            newest = ms
    return newest


def latest_checkpoints(checkpoints: Iterable[Mm2Checkpoint]) -> list[Mm2Checkpoint]:
    """The newest checkpoint per group and partition (the topic is compacted by that key)."""
    out: dict[tuple[str, str, int], Mm2Checkpoint] = {}
    for c in checkpoints:
        out[(c.group, c.topic, c.partition)] = c
    return list(out.values())


# ---------------------------------------------------------------------------- offset map


def anchors(syncs: Iterable[Mm2Sync]) -> dict[Partition, list[tuple[int, int]]]:
    """Each partition's syncs, in the order MM2 wrote them, as `(upstream, downstream)`
    sorted by upstream. A sync at `u` supersedes those at or after `u`: a task that
    started again from an older committed offset copies those records again, and the new
    copies are the ones later records follow."""
    out: dict[Partition, list[tuple[int, int]]] = {}
    for s in syncs:
        rows = out.setdefault((s.topic, s.partition), [])
        while rows and rows[-1][0] >= s.upstream:
            rows.pop()
        rows.append((s.upstream, s.downstream))
    return out


@dataclass
class PartitionMap:
    rows: list[OffsetSync]
    tip: OffsetSync | None
    read: int = 0  # source records read to place copies exactly
    inexact: int = 0  # stretches placed conservatively (re-read, never skipped)


ReadOffsets = Callable[[int, int], list[int]]  # source record offsets in [start, end), as MM2 read them


def partition_map(
    topic: str, partition: int, syncs: Sequence[tuple[int, int]], resume: int, read_offsets: ReadOffsets
) -> PartitionMap:
    """The offset-map rows and tip of one partition for what MM2 copied below `resume`."""
    points = [(u, d) for u, d in syncs if u < resume]
    out = PartitionMap([], None)
    pairs: list[tuple[int, int]] = []
    for i, (u, d) in enumerate(points):
        last = i + 1 == len(points)
        end, nxt = (resume, None) if last else (points[i + 1][0], points[i + 1])
        if nxt is not None and nxt[1] - d == end - u:
            pairs.append((u, d))  # nothing skipped, nothing copied twice: one delta throughout
            continue
        offsets = read_offsets(u, end)
        out.read += len(offsets)
        fits = bool(offsets) and offsets[0] == u and (nxt is None or d + len(offsets) <= nxt[1])
        if not fits:
            # The records are not there as MM2 read them (deleted by retention, compacted):
            # start every position after the sync at the smaller of this sync's delta and
            # the next one's. Within a lifetime the delta only shrinks (skipped offsets), so
            # the next one is on or before the copies; a restart in between copied records
            # again and the next delta grows, so this sync's own is.
            out.inexact += 1
            pairs.append((u, d))
            if nxt is not None and u + 1 < end:
                pairs.append((u + 1, u + 1 + min(d - u, nxt[1] - nxt[0])))
            if last:
                out.tip = OffsetSync(topic, partition, u, d)
            continue
        pairs.extend((o, d + k) for k, o in enumerate(offsets))
        if last:
            out.tip = OffsetSync(topic, partition, offsets[-1], d + len(offsets) - 1)
    previous: int | None = None
    for s, t in pairs:
        if t - s != previous:
            out.rows.append(OffsetSync(topic, partition, s, t))
            previous = t - s
    return out


def checkpoint_target(cp: Mm2Checkpoint, pm: PartitionMap | None, target_end: int) -> int:
    """Where a checkpointed group resumes on the target: translated with the imported rows
    when they cover its position (exact), else MM2's own translation (which re-reads a little)."""
    if pm is None or not pm.rows or cp.upstream < pm.rows[0].source_offset:
        return min(cp.downstream, target_end)
    return translate(pm.rows, cp.upstream, target_end, tip=pm.tip).target_offset
