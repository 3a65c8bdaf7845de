"""The segment and offset ledger: which source records the target holds, and what is safe to commit.

Pure bookkeeping, shared by every engine. An engine produces the records of a source
partition in *segments* (runs of consecutive records produced together) and learns from the
target which segments it stored; the ledger turns that into

* acknowledgements for the listeners (`AckBatch`: counts, bytes, newest timestamp), with the
  offset-map *delta syncs*: the (source, target) pairs where target - source changes;
* safe commit positions: a source offset is committable only when the target holds every
  record before it.

The rules that keep "nothing lost" true, in one place:

* Never commit past an unacknowledged record: a partition's position is the record after
  its last acknowledged one (`acked_next`), and segments of a partition are acknowledged in
  produce order (the target's reports keep that order).
* Never commit past a dropped record: records an engine read but will never see acknowledged
  (pending records of a stop or revoke, a purged or abandoned segment) *taint* their
  partition, and then only `acked_next` may be committed.
* Markers passed on quiet partitions: a partition with nothing in flight, nothing refused and
  nothing dropped may commit the consumer's position instead, which also steps over
  transaction markers and aborted records (they have no record to acknowledge).
* Nothing past a refused record counts (`failed_at`).

How an engine drives it, per partition (`PartitionLedger`):

    seg = Segment(first_offset)             # per segment
    seg.add(offset, size, timestamp)        # per record (a streaming hot path may inline it)
    part.begin(seg)                         # produced: in flight, in produce order
    part.placed(seg, t_first)               # the first record's target offset, if known
    part.settled(seg) and part.acked(seg, t_last)   # the last record stored at t_last
    part.settled(seg) and part.refused(seg)         # or: the target refused it for good
    part.settled(seg) and part.purged(seg)          # or: dropped before the target answered

The native engine (`mirror.engine.worker`) asks the producer for a delivery report on each
segment's first and last record only and feeds those reports in as they come. A batch engine
(produce a batch, flush, then look at the results) calls the same methods after its flush,
segment by segment in produce order. Either then asks `Ledger.positions` what to commit,
hands `Ledger.take_batches()` to its listeners, and commits.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from mirror.domain.acks import AckBatch, SourcePartition
from mirror.domain.route import Route


@dataclass(slots=True, eq=False)
class Segment:
    """Consecutive records of one partition, produced together; acknowledged as one."""

    first: int  # source offset of the first record
    last: int = -1  # source offset of the last record produced so far
    count: int = 0
    bytes: int = 0  # key + value bytes
    max_ts: int = -1
    big_offset: int = -1  # the largest record: the one to name when the target refuses a size
    big_size: int = -1
    # (index in the segment, source offset) wherever the source offsets jump (transaction
    # markers, aborted or compacted records): where the delta changes.
    gaps: list[tuple[int, int]] = field(default_factory=list)
    t_first: int | None = None  # target offset of the first record, from its delivery report
    dead: bool = False  # dropped (revoked, purged): its reports are ignored

    def add(self, offset: int, size: int, ts: int) -> None:
        """One more record of the run (`size`: key + value bytes, `ts`: its timestamp).

        `Forwarder._forward_run` (mirror.engine.forwarder) inlines these lines: a call per record costs the native
        engine measurable throughput. Keep the two in step.
        """
        if self.count and offset != self.last + 1:
            self.gaps.append((self.count, offset))
        self.last = offset
        self.count += 1
        self.bytes += size
        if ts > self.max_ts:
            self.max_ts = ts
        if size > self.big_size:
            self.big_size = size
            self.big_offset = offset


@dataclass(slots=True)
class PartitionLedger:
    """The ledger of one assigned source partition."""

    route: Route
    # Produced, not yet acknowledged segments in produce order (the target's reports of a
    # partition arrive in that order). The last one may be `open`: the engine stopped in the
    # middle of its run (a full producer queue) and the rest of the run is still to come.
    inflight: deque[Segment] = field(default_factory=deque)
    open: Segment | None = None
    # Records the engine read were dropped unacknowledged (pending records of a stop, a
    # revoke or a resync; an abandoned or purged segment): the consumer's position is then
    # past records the target may not hold, and only `acked_next` may be committed.
    tainted: bool = False
    acked_next: int | None = None  # last acknowledged source offset + 1
    committed: int | None = None
    delta: int | None = None  # target - source of the last acknowledged record
    t_next: int | None = None  # last acknowledged target offset + 1 (a lower bound for the next)
    failed_at: int | None = None  # first source offset the target refused for good
    batch: AckBatch | None = None  # acknowledgements not yet handed to listeners

    # -- produced

    def begin(self, seg: Segment) -> None:
        """`seg` was produced (at least its first record): it is in flight, and open."""
        self.open = seg
        self.inflight.append(seg)

    @property
    def quiet(self) -> bool:
        """Nothing in flight, refused or dropped: every record read is acknowledged, so the
        consumer's position (past transaction markers too) is safe to commit."""
        return not self.inflight and self.failed_at is None and not self.tainted

    def inflight_records(self) -> int:
        return sum(seg.count for seg in self.inflight)

    # -- the target's answers

    def placed(self, seg: Segment, t_first: int | None) -> None:
        """The segment's first record is stored at `t_first` (None: stored, offset unknown)."""
        if not seg.dead:
            seg.t_first = t_first

    def settled(self, seg: Segment) -> bool:
        """The target answered for the whole segment: take it out of flight.

        False when the answer must be ignored: the segment was dropped (its partition handed
        over, purged, or cut short), so nothing may be attributed to it.
        """
        if seg.dead:
            return False
        inflight = self.inflight
        if inflight and inflight[0] is seg:
            inflight.popleft()
            return True
        try:  # not reachable while answers keep produce order; never mis-attribute
            inflight.remove(seg)
        except ValueError:
            return False
        return True

    def acked(self, seg: Segment, t_last: int) -> None:
        """A settled segment is stored, its last record at `t_last` (< 0: offset unknown).

        Exact when the segment landed contiguously (no other writer in between): record i is
        at t_first + i. Otherwise t_first + i is a lower bound, which translates to a target
        offset too early, never too late (duplicates, not loss), and the last record's own
        offset is recorded exactly. Without the first record's placement a segment of more
        than one record is placed at its lower bound (after everything acknowledged before it)
        and by its last record's own offset (see `unplaced`).
        """
        if self.failed_at is not None:
            return  # nothing past a refused record counts
        if t_last < 0:
            self._ack_unplaced(seg)
            return
        b = self._batch(seg)
        t_first = seg.t_first if seg.t_first is not None else (t_last if seg.count == 1 else None)
        if t_first is not None:
            self._sync(b, seg.first, t_first)
            for idx, src in seg.gaps:
                self._sync(b, src, t_first + idx)
            if t_last - t_first != seg.count - 1:
                self._sync(b, seg.last, t_last)
        else:
            if self.t_next is not None:
                # As for an unplaced segment: record i lies at or after t_next + i. Without
                # these rows the previous delta would carry across the segment's gaps and
                # translate past records (the last record's row alone comes too late).
                self._sync(b, seg.first, self.t_next)
                for idx, src in seg.gaps:
                    self._sync(b, src, self.t_next + idx)
            self._sync(b, seg.last, t_last)
        self._count(b, seg)
        self.t_next = t_last + 1

    @staticmethod
    def unplaced(seg: Segment) -> bool:
        """Would acknowledging `seg` leave records before its last one out of the offset map?
        (Its first record's placement never came, so a guessed offset could translate too far.)"""
        return seg.count > 1 and seg.t_first is None

    def _ack_unplaced(self, seg: Segment) -> None:
        # Acknowledged (a DUPLICATE_SEQUENCE_NUMBER "success": the broker had it already) but
        # with no offset. The segment lies somewhere after everything acknowledged before it:
        # place it at that lower bound, which translates too early (re-read), never too late,
        # and let the next exact report set the delta again.
        b = self._batch(seg)
        if self.t_next is not None:
            self._sync(b, seg.first, self.t_next)
            for idx, src in seg.gaps:
                self._sync(b, src, self.t_next + idx)
            self.t_next += seg.count
        self.delta = None  # unknown: the next exact report writes its row whatever the delta
        self._count(b, seg)

    def flushed(self, seg: Segment) -> bool:
        """The open segment was flushed by a producer that is fine, but without its closing
        report (that was to come with a record now refused): acknowledge it from its first
        record's placement, or drop it. True if acknowledged.

        Delivered with no error from an idempotent, gapless producer means every record of it
        landed, in order; placed from its first record (exact when nothing else wrote in
        between, a lower bound otherwise: re-reading, never skipping).
        """
        if self.open is seg:
            self.open = None
        if (
            seg.dead
            or seg.t_first is None
            or self.failed_at is not None
            or not self.inflight
            or self.inflight[0] is not seg
        ):
            self.drop(seg)
            return False
        self.settled(seg)
        self.acked(seg, seg.t_first + seg.count - 1)
        return True

    def skipped(self, pairs: Sequence[tuple[int, int]], count: int, nbytes: int, max_ts: int) -> bool:
        """The target holds these records already, each at its (source, target) pair, in
        order (copies made before a restart, proven by `mirror.domain.replay`): acknowledged
        as if produced now, so the commit and the offset map move over them. `count`,
        `nbytes`, `max_ts`: how many records, their key + value bytes and newest timestamp. False (nothing recorded, so
        the engine must not skip them): something is in flight or refused before them."""
        if not pairs or self.inflight or self.failed_at is not None:
            return False
        seg = Segment(pairs[0][0], last=pairs[-1][0], count=count, bytes=nbytes, max_ts=max_ts)
        b = self._batch(seg)
        for src, tgt in pairs:
            self._sync(b, src, tgt)
        self._count(b, seg)
        self.t_next = pairs[-1][1] + 1
        return True

    def refused(self, seg: Segment) -> None:
        """The target refused (a record of) the segment for good: nothing from it on counts."""
        self.fail_at(seg.first)

    def fail_at(self, offset: int) -> None:
        """Nothing from `offset` on counts or is committed."""
        if self.failed_at is None or offset < self.failed_at:
            self.failed_at = offset

    def purged(self, seg: Segment) -> None:
        """Dropped before the target answered: uncommitted, so re-read by the next owner."""
        self.tainted = True

    # -- dropped by the engine

    def drop(self, seg: Segment) -> None:
        """`seg` will never be acknowledged (cut short, abandoned): ignore its reports."""
        seg.dead = True
        self.tainted = True
        if self.open is seg:
            self.open = None
        if seg in self.inflight:
            self.inflight.remove(seg)

    def drop_open(self) -> None:
        """The open segment's rest will never be produced: it can never be acknowledged. Its
        records stay uncommitted (re-read by the next owner: duplicates, not loss)."""
        seg = self.open
        if seg is not None:
            seg.dead = True
            self.open = None
            self.tainted = True
            if self.inflight and self.inflight[-1] is seg:
                self.inflight.pop()

    def drop_inflight(self) -> None:
        """Everything in flight is dropped (purged, or no longer ours): ignore its reports."""
        if self.inflight:
            self.tainted = True
        for seg in self.inflight:
            seg.dead = True
        self.inflight.clear()
        self.open = None

    def rewound(self) -> None:
        """The engine re-reads from `acked_next` (or the committed offset) with a fresh
        producer: nothing read is dropped any more, and a record refused before may be
        tried again (and fails again if it really cannot be written)."""
        self.tainted = False
        self.failed_at = None

    # -- for listeners and commits

    def take_batch(self) -> AckBatch | None:
        b, self.batch = self.batch, None
        return b

    def position(self, consumed: int | None = None) -> int | None:
        """The source offset to commit now, or None if nothing new is safe to commit.

        `consumed`: the consumer's position, to be given only for a `quiet` partition.
        """
        pos = self.acked_next
        if consumed is not None and (pos is None or consumed > pos):
            pos = consumed
        if pos is not None and (self.committed is None or pos > self.committed):
            return pos
        return None

    def _batch(self, seg: Segment) -> AckBatch:
        b = self.batch
        if b is None:
            r = self.route
            # The flow name is the listener's concern; `Ledger.take_batches` fills it in.
            b = self.batch = AckBatch("", r.source_topic, r.partition, r.target_topic, seg.first, seg.first + 1)
        return b

    def _count(self, b: AckBatch, seg: Segment) -> None:
        b.next_offset = seg.last + 1
        b.count += seg.count
        b.bytes += seg.bytes
        if seg.max_ts > b.max_timestamp_ms:
            b.max_timestamp_ms = seg.max_ts
        self.acked_next = seg.last + 1

    def _sync(self, b: AckBatch, src: int, tgt: int) -> None:
        d = tgt - src
        if d != self.delta:
            b.syncs.append((src, tgt))
            self.delta = d


P = TypeVar("P", bound=PartitionLedger)


class Ledger(Generic[P]):
    """The ledgers of a flow's assigned partitions, by source and by target partition.

    Generic in the partition ledger type, so an engine can keep its own per-partition state
    (the native engine: its producer and size limit) in a subclass of `PartitionLedger`.
    """

    def __init__(self, flow: str) -> None:
        self.flow = flow
        self.parts: dict[SourcePartition, P] = {}
        # Target partition -> ledger: reports and producer errors name the target partition.
        self.by_target: dict[tuple[str, int], P] = {}

    def __iter__(self) -> Iterator[P]:
        return iter(self.by_target.values())

    def assign(self, tp: SourcePartition, st: P) -> P:
        self.parts[tp] = st
        self.by_target[(st.route.target_topic, st.route.partition)] = st
        return st

    def forget(self, keys: Collection[SourcePartition]) -> None:
        """These partitions belong to another owner now. Whatever of theirs is still in
        flight is fenced: a late report must not count (no offset-map row, no commit, for a
        copy that may land after the new owner's)."""
        for k in keys:
            st = self.parts.pop(k, None)
            if st is None:
                continue
            st.drop_inflight()
            st.batch = None
            if self.by_target.get((st.route.target_topic, st.route.partition)) is st:
                del self.by_target[(st.route.target_topic, st.route.partition)]

    def inflight_records(self) -> int:
        """Produced records not yet acknowledged (0 means: nothing to wait for)."""
        return sum(seg.count for st in self.by_target.values() for seg in st.inflight)

    def stalled(
        self, before: Mapping[SourcePartition, Segment]
    ) -> tuple[list[SourcePartition], dict[SourcePartition, Segment]]:
        """Partitions whose oldest segment in flight is the one `before` (the last look) saw:
        nothing of theirs was acknowledged since. Returns them, and what to pass next time.

        Cheap enough to call every refresh (one look per partition, nothing on the record
        path); a target that never answers one partition must not go unnoticed.
        """
        now = {tp: st.inflight[0] for tp, st in self.parts.items() if st.inflight}
        return sorted(tp for tp, seg in now.items() if before.get(tp) is seg), now

    def take_batches(self) -> list[AckBatch]:
        """Acknowledgements since the last call, for the listeners."""
        out = []
        for st in self.by_target.values():
            b = st.batch
            if b is not None:
                st.batch = None
                b.flow = self.flow
                out.append(b)
        return out

    @staticmethod
    def quiet(partitions: Mapping[SourcePartition, P]) -> list[SourcePartition]:
        """Partitions whose consumer position may be committed (see `PartitionLedger.quiet`)."""
        return [tp for tp, st in partitions.items() if st.quiet]

    @staticmethod
    def positions(
        partitions: Mapping[SourcePartition, P], consumed: Mapping[SourcePartition, int] | None = None
    ) -> dict[SourcePartition, int]:
        """Source positions safe to commit (everything before them is on the target) that
        move past what was committed. `consumed`: consumer positions of `quiet` partitions
        only; the engine must leave it out while it holds records read but not produced."""
        consumed = consumed or {}
        out = {}
        for tp, st in partitions.items():
            pos = st.position(consumed.get(tp) if st.quiet else None)
            if pos is not None:
                out[tp] = pos
        return out

    @staticmethod
    def committed(partitions: Mapping[SourcePartition, P], positions: Mapping[SourcePartition, int]) -> None:
        """These positions were committed."""
        for tp, pos in positions.items():
            partitions[tp].committed = pos
