"""What a restart need not copy again: the records a target partition provably holds already.

Both engines ask it where the target may hold copies their commits do not know of: a Spark
task retried or replayed after a driver crash (`mirror.spark.task`), and `mirror run` at
every assignment (`mirror.engine.replay`), e.g. after a kill before the first commit.

The rule (`replay_check`): the target partition's last record names, in its provenance header
(`HEADER_ORIGIN`), the source offset it is a copy of (`newest`). When that offset is among the
source records in hand (from `first` on), the copies are read back from where the copy of the
first record must be, and the records up to `newest` are skipped only when they are copies of
*these* records: the copy of the last record to skip has that record's timestamp, key and
value, and so does every copy of the run back to the first record; every record in hand
needs its own copy in the run. Records that are not this route's copies (by hand, another
flow's) between the copies are passed over. A copy of another record, of an earlier one, or a
run landed twice right before the run means the first records never landed: nothing is
skipped. A run that stops short of the copy of the first record skips nothing either, even
one starting at the target's log start: retention may have taken the first copies, or the
mirror's own deletion to the end (a resync) came before they landed. A source
topic deleted and created again restarts its offsets at 0 while the target's copies name the
old ones: those never match, and nothing is skipped. A target topic that stamps its own
timestamps (LogAppendTime) cannot tell a copy from the copy of an older record alike: it
skips nothing (such targets get the replay, duplicates only). Without the provenance header
nothing can be proven, and nothing is skipped. Anything in doubt is copied again: the worst
case is a duplicate, never a loss.

The skipped records' (source -> target) pairs come from the same headers, so the offset map
gets the rows an interrupted run never stored: every skip has the copy of its first record
read back. (`Replay.placed` stays for the callers' shape: a skip is always placed.)

Pure: the engines read the records (`read`) and hand them in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mirror.domain.route import HEADER_ORIGIN, Route

# A source record as the rule compares it: (offset, timestamp ms, key, value).
SourceRecord = tuple[int, int, bytes | None, bytes | None]


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record read back from a partition (the target's copies, or the source's records)."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    log_append_time: bool = False  # the broker set the timestamp (the topic's message.timestamp.type)

    def compared(self) -> SourceRecord:
        """This record as `replay_check` compares a source record."""
        return (self.offset, self.timestamp_ms, self.key, self.value)


# What one record costs held in memory beyond its key and value (the object, its headers).
RECORD_OVERHEAD = 256


def held_size(rec: StoredRecord) -> int:
    """What one record read back costs held in memory, as a replay check's byte budget counts it."""
    return len(rec.key or b"") + len(rec.value or b"") + RECORD_OVERHEAD


# read(start, end, until=None): the target partition's records in [start, end), in order,
# stopping after the first one `until` accepts.
Read = Callable[..., list[StoredRecord]]


def origin_offset(r: Route, headers: Sequence[tuple[str, bytes | None]] | None) -> int | None:
    """The source offset a target record is a copy of, when it came through route `r`."""
    if r.origin is None:
        return None
    values = [v for k, v in (headers or []) if k == HEADER_ORIGIN and v is not None]
    if not values or not values[-1].startswith(r.origin):
        return None
    try:
        return int(values[-1][len(r.origin) :])
    except ValueError:
        return None


@dataclass
class Replay:
    """What the target already holds of the records in hand, as decided."""

    held: int = -1  # skip source offsets up to this one
    pairs: list[tuple[int, int]] = field(default_factory=list)  # (source, target) of every skipped copy
    placed: bool = True
    warning: str | None = None
    skipped: int = 0  # records skipped (their offsets <= held)
    last: int = -1  # the last source offset the check saw


def same(copy: StoredRecord, rec: SourceRecord) -> bool:
    """A copy of this source record: same timestamp, key and value. A copy stamped by the
    target (LogAppendTime) proves nothing: key and value alone cannot tell it from the copy of
    another record alike (an older incarnation's)."""
    return not copy.log_append_time and copy.timestamp_ms == rec[1] and copy.key == rec[2] and copy.value == rec[3]


def replay_check(
    r: Route,
    batch: Sequence[SourceRecord],
    low: int,
    high: int,
    read: Read,
    source_end: int | None = None,
    tail: list[StoredRecord] | None = None,
) -> Replay:
    """Decide which of `batch` (consecutive source records, in offset order) the target
    partition [low, high) already holds.

    `read(start, end, until=None)` reads target records back (`tail`: the last one, when
    read already). `batch` may be the first records only, those up to the source offset
    the target's last copy names: copies of later offsets end the run of copies (below).
    Skips only what is proved to be on the target; anything in doubt is produced (a
    duplicate, never a loss).
    """
    if high <= low or not batch:
        return Replay()
    first, last = batch[0][0], batch[-1][0]
    if tail is None:
        tail = read(high - 1, high)
    newest = origin_offset(r, tail[-1].headers) if tail else None
    if newest is None or newest < first:
        return Replay()
    where = f"{r.target_topic}[{r.partition}]"
    producing = f"producing offsets {first}..{last}, nothing skipped"
    if tail[-1].log_append_time:
        return Replay(
            warning=f"{where}: the target topic stamps its own timestamps (LogAppendTime), so its copies "
            f"cannot be told from copies of older records alike: {producing}"
        )
    if source_end is not None and newest >= source_end:
        return Replay(
            warning=f"{where}: the target's last copy names source offset {newest}, but "
            f"{r.source_topic}[{r.partition}] ends at {source_end} (a recreated source topic?): {producing}"
        )
    upto = min(newest, last)
    anchor = max((rec for rec in batch if rec[0] <= upto), key=lambda rec: rec[0])
    start = max(low, high - (newest - first + 1))
    copies, copy = _read_back_to(r, read, anchor, start, high)
    if copy is None or not same(copy, anchor):
        what = (
            "is not among the records read back"
            if copy is None
            else f"at {where} offset {copy.offset} differs from the source record"
        )
        return Replay(
            warning=f"{where}: the target's last copy names source offset {newest}, but the copy of "
            f"{r.source_topic}[{r.partition}] offset {anchor[0]} {what} (a recreated source topic?): {producing}"
        )
    pairs, before, from_first = _run_of_copies(r, copies[: copies.index(copy) + 1], batch, upto)
    return _judged(r, batch, anchor, newest, pairs, before, from_first and start == low > 0)


def _judged(
    r: Route,
    batch: Sequence[SourceRecord],
    anchor: SourceRecord,
    newest: int,
    pairs: list[tuple[int, int]],
    before: int | None,
    at_log_start: bool,
) -> Replay:
    """The decision on the run of copies `pairs` back from the copy of `anchor` (`before`: the
    origin of the copy that ended it; `at_log_start`: its first copy is the first record of a
    read-back window that starts at the target's log start, past 0)."""
    first, last, upto = batch[0][0], batch[-1][0], anchor[0]
    where = f"{r.target_topic}[{r.partition}]"
    producing = f"producing offsets {first}..{last}, nothing skipped"
    if pairs[0][0] != first and before is not None:
        # The copy right before the run is of a record before these: the copies of offsets
        # first..(run start - 1) are provably not on the target (never produced), so nothing
        # may be skipped on the anchor's word.
        return Replay(
            warning=f"{where}: the copies on the target run back from source offset {anchor[0]} to {pairs[0][0]} "
            f"only, and the copy before them is of offset {before} (another record's): "
            f"{r.source_topic}[{r.partition}] offsets {first}..{pairs[0][0] - 1} never reached the target; "
            f"{producing}"
        )
    covered = {o for o, _ in pairs}
    missing = next((rec[0] for rec in batch if pairs[0][0] <= rec[0] <= upto and rec[0] not in covered), None)
    if missing is not None:
        # A record in hand with no copy inside the run: skipping up to the anchor would skip it.
        return Replay(
            warning=f"{where}: the copies on the target run back from source offset {anchor[0]} to {pairs[0][0]}, "
            f"but hold no copy of {r.source_topic}[{r.partition}] offset {missing}: {producing}"
        )
    if pairs[0][0] != first:
        if not at_log_start:
            # Nothing read shows where the copies of the first records went: the window may start
            # past them (records by others, or a run of copies landed twice, fill it), or they
            # never landed. Only the target's log start, moved past them, accounts for them.
            return Replay(
                warning=f"{where}: the copies on the target run back from source offset {anchor[0]} to "
                f"{pairs[0][0]} only, and nothing read back shows that {r.source_topic}[{r.partition}] "
                f"offsets {first}..{pairs[0][0] - 1} reached the target: {producing}"
            )
        # The run starts at the target's log start past 0. Retention may have taken the copies
        # of the first records; so may the mirror's own deletion to the end of the partition
        # (a resync, a stale start) with copies still in flight landing after it, and then the
        # first records never landed. Nothing read tells the two apart: nothing is skipped.
        return Replay(
            warning=f"{where}: the copies on the target run back from source offset {anchor[0]} to "
            f"{pairs[0][0]}, the target's first record: nothing shows whether {r.source_topic}[{r.partition}] "
            f"offsets {first}..{pairs[0][0] - 1} went with the target's retention or never landed: {producing}"
        )
    return Replay(held=newest, pairs=pairs)


def _read_back_to(
    r: Route, read: Read, anchor: SourceRecord, start: int, high: int
) -> tuple[list[StoredRecord], StoredRecord | None]:
    """The target records [start, high) read up to the copy of `anchor`, and that copy (None:
    not among them).

    The caller's `start`: the copies of source offsets [first, newest] are among the target's
    last (newest - first + 1) records, as the source range has at least as many offsets as records.
    """

    def reached(rec: StoredRecord) -> bool:
        o = origin_offset(r, rec.headers)
        return o is not None and o >= anchor[0]

    copies = read(start, high, until=reached)
    by_origin: dict[int, StoredRecord] = {}
    for rec in copies:
        o = origin_offset(r, rec.headers)
        if o is not None:
            by_origin[o] = rec
    return copies, by_origin.get(anchor[0])


def _run_of_copies(
    r: Route, copies: Sequence[StoredRecord], batch: Sequence[SourceRecord], upto: int
) -> tuple[list[tuple[int, int]], int | None, bool]:
    """The (source, target) pairs of the run of copies that ends at `copies[-1]` (the matched
    copy), back towards the copy of the batch's first record, in source order; the origin of
    the copy right before the run when it is of another record (else None); and whether the
    run's first copy is the first record read (nothing at all read before it).

    Records between the copies that are not this route's (by hand, another flow's) are passed
    over: they prove nothing either way, and the records in hand decide (`replay_check`)."""
    first = batch[0][0]
    recs = {rec[0]: rec for rec in batch}
    pairs: list[tuple[int, int]] = []
    at = len(copies)  # index of the run's first copy
    for i in range(len(copies) - 1, -1, -1):
        copy = copies[i]
        o = origin_offset(r, copy.headers)
        if o is None:
            continue
        if o < first or o > upto or (o in recs and not same(copy, recs[o])):
            # A copy of an earlier record, of one past those compared, or not of this one (an
            # older incarnation of the source topic whose offsets run on below the new
            # copies): the run ends here.
            pairs.reverse()
            return pairs, o, False
        if pairs and o >= pairs[-1][0]:
            break  # a copy of a later record before the run: copies landed again (no start shown)
        pairs.append((o, copy.offset))
        at = i
    pairs.reverse()
    return pairs, None, at == 0


def delta_changes(pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pairs where target - source differs from the previous pair's (the first counts)."""
    out: list[tuple[int, int]] = []
    last: int | None = None
    for src, tgt in pairs:
        if tgt - src != last:
            out.append((src, tgt))
            last = tgt - src
    return out


def slice_reader(records: Sequence[StoredRecord]) -> Read:
    """`read` over records read already (in offset order): those in [start, end), up to `until`."""

    def read(start: int, end: int, until: Callable[[StoredRecord], bool] | None = None) -> list[StoredRecord]:
        out: list[StoredRecord] = []
        for rec in records:
            if rec.offset < start or rec.offset >= end:
                continue
            out.append(rec)
            if until is not None and until(rec):
                break
        return out

    return read
