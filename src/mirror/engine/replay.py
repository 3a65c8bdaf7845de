"""`TargetReplay`: start assigned partitions past the records their target provably holds.

A worker killed before its commit, or a partition whose copies outran its last commit, leaves
copies on the target that the group's offset does not cover: read from that offset, every
one of them would be copied again. At each assignment (start, rebalance) and resync, for
the partitions given with their start offsets, this reads in bulk (one consumer per read,
not one per partition): the target partitions' last records; then, only for those whose
last copy names a source offset at or past the start, the source records from the start to
it, and the target's copies. `mirror.domain.replay` decides (the rule the Spark engine's
tasks follow); a proven partition starts after the last record proven, and its skipped
records are acknowledged in the ledger (`PartitionLedger.skipped`), so the commit and the
offset map move over them exactly as over copied ones.

Anything in doubt skips nothing: a read that fails, requests that outrun the check's one
deadline (`CheckReads`: 10 s for its watermarks and reads together, inside the assign
callback), a check that fails, a partition whose copies of its first records are gone (only
placed skips are taken here), a target topic that stamps its own timestamps (LogAppendTime:
its copies cannot be told from copies of older records alike). The records held to compare
are bounded in bytes, by the reads themselves: a partition the budget does not cover whole
skips at most the part read and proven. The worst case is a duplicate, never a loss. Without
provenance headers nothing can be proven, and nothing is skipped.

Not with exactly_once (`Assignment` does not ask): a partition resumes at the target's
committed progress, written in the same transaction as the copies, and a killed worker's
open transaction is aborted, invisible to read_committed consumers. Nothing past the
progress is visible on the target, so there is nothing to skip.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from mirror.config import ClusterConfig, FlowConfig
from mirror.domain.acks import SourcePartition
from mirror.domain.ledger import Ledger
from mirror.domain.replay import StoredRecord, origin_offset, replay_check, slice_reader
from mirror.engine.admins import AdminPair
from mirror.engine.partition import AssignedPartition
from mirror.engine.replay_reads import CheckReads, Ranges, ReadRanges
from mirror.errors import MirrorError
from mirror.kafka import OFFSET_BEGINNING
from mirror.kafka.admin import Watermarks
from mirror.kafka.reader import read_ranges

log = logging.getLogger(__name__)

Offsets = dict[SourcePartition, int]
Marks = Mapping[tuple[str, int], Watermarks]
# first offsets, the source offsets the tails name, source and target watermarks, the tails
_Tails = tuple[Offsets, Offsets, Marks, Marks, dict[tuple[str, int], list[StoredRecord]]]


def _read(
    name: str, cluster: ClusterConfig, ranges: Ranges, timeout: float, max_bytes: int | None = None
) -> dict[tuple[str, int], list[StoredRecord]]:
    return read_ranges(name, cluster, ranges, timeout, max_bytes)


class TargetReplay:
    """Skips the records each newly started partition's target holds already (see the module)."""

    def __init__(
        self,
        flow: FlowConfig,
        source: ClusterConfig,
        target: ClusterConfig,
        *,
        admins: AdminPair,
        ledger: Ledger[AssignedPartition],
        read: ReadRanges = _read,
    ) -> None:
        self.flow, self._source, self._target = flow, source, target
        self._admins, self._ledger, self._read = admins, ledger, read

    def skip(self, starts: Mapping[SourcePartition, int]) -> dict[SourcePartition, int]:
        """The new start of each of these partitions (assigned, at these offsets: concrete, or
        OFFSET_BEGINNING) whose target holds its first records already; their skipped
        records are acknowledged in the ledger. Partitions left out start where they were."""
        todo = {
            k: at
            for k, at in starts.items()
            if k in self._ledger.parts and (at >= 0 or at == OFFSET_BEGINNING) and not self._ledger.parts[k].inflight
        }
        if not self.flow.provenance_headers or not todo:
            return {}
        try:
            moved, skipped = self._skip(todo)
        except (MirrorError, KeyError) as exc:
            log.warning(
                "flow %s: could not read what the target holds of %d partitions past their start (%s); "
                "copying them from their start, nothing skipped",
                self.flow.name,
                len(todo),
                exc,
            )
            return {}
        if moved:
            log.info(
                "flow %s: %d records of %d partitions were on the target already (copied before the "
                "group's commit); not copied again",
                self.flow.name,
                skipped,
                len(moved),
            )
        return moved

    def _skip(self, starts: Mapping[SourcePartition, int]) -> tuple[dict[SourcePartition, int], int]:
        reads = CheckReads(self._read)
        found = self._tails(starts, reads)
        if found is None:
            return {}, 0
        first, newest, smarks, tmarks, tails = found
        parts = self._ledger.parts
        targets = {k: (parts[k].route.target_topic, k[1]) for k in newest}
        spans = {k: (first[k], min(o, smarks[k].high - 1) + 1) for k, o in newest.items()}
        sources, upto = reads.prefixes(self.flow.source, self._source, spans, share=0.5)
        # The copies of [first, newest] are among the target's last (newest - first + 1) records.
        # Past the budget, only as many as the source offsets read, as far as the rest of the
        # budget goes: a copy of the last record read further on is not found, nothing skipped.
        windows: dict[tuple[str, int], tuple[int, int]] = {}
        for k, t in targets.items():
            start = max(tmarks[t].low, tmarks[t].high - (newest[k] - first[k] + 1))
            if sources[k]:
                windows[t] = (start, min(tmarks[t].high, start + upto[k] - first[k]))
        copies, _ = reads.prefixes(self.flow.target, self._target, windows)
        moved: dict[SourcePartition, int] = {}
        skipped = 0
        for k, t in targets.items():
            records = sources.get(k, [])
            if not records or records[0].offset != first[k]:
                continue  # the source's first record is gone (retention): the consumer reports the gap
            replay = replay_check(
                parts[k].route,
                [rec.compared() for rec in records],
                tmarks[t].low,
                tmarks[t].high,
                slice_reader(copies.get(t, [])),
                smarks[k].high,
                tail=tails[t],
            )
            if replay.warning:
                log.warning("flow %s: %s", self.flow.name, replay.warning)
            if replay.held < first[k] or not replay.placed or not replay.pairs:
                continue
            # Read in part (the byte budget): proven up to the last record read only.
            last = replay.held if upto[k] >= spans[k][1] else min(replay.held, records[-1].offset)
            held = [rec for rec in records if rec.offset <= last]
            nbytes = sum(len(rec.key or b"") + len(rec.value or b"") for rec in held)
            if parts[k].skipped(replay.pairs, len(held), nbytes, max(rec.timestamp_ms for rec in held)):
                moved[k] = last + 1
                skipped += len(held)
        return moved, skipped

    def _tails(self, starts: Mapping[SourcePartition, int], reads: CheckReads) -> _Tails | None:
        """The partitions worth a closer look: records left to copy from their start (a caught-up
        partition has none to skip), and a target whose last record is a copy of one of them,
        stamped with its source record's timestamp (a LogAppendTime copy proves nothing).
        Returns their first offsets, the source offsets their targets' last copies name, both
        clusters' watermarks and the tails; None when there is none."""
        parts = self._ledger.parts
        smarks = reads.within("source's watermarks", lambda: self._admins.source.watermarks(list(starts)))
        first = {k: smarks[k].low if at == OFFSET_BEGINNING else at for k, at in starts.items()}
        behind = {k: (parts[k].route.target_topic, k[1]) for k in starts if first[k] < smarks[k].high}
        if not behind:
            return None
        tmarks = reads.within("target's watermarks", lambda: self._admins.target.watermarks(list(behind.values())))
        ranges = {t: (tmarks[t].high - 1, tmarks[t].high) for t in behind.values() if tmarks[t].high > tmarks[t].low}
        if not ranges:
            return None  # empty targets (a first start): nothing to read
        tails = reads(self.flow.target, self._target, ranges)
        newest: dict[SourcePartition, int] = {}
        stamped = 0
        for k, t in sorted(behind.items()):
            tail = tails.get(t)
            o = origin_offset(parts[k].route, tail[-1].headers) if tail else None
            if o is None or first[k] >= min(o, smarks[k].high - 1) + 1:
                continue
            if tail and tail[-1].log_append_time:
                stamped += 1
                continue
            newest[k] = o
        if stamped:
            log.warning(
                "flow %s: the target topics of %d partitions stamp their own timestamps (LogAppendTime): "
                "their copies cannot be told from copies of older records alike; copying them from their "
                "start, nothing skipped",
                self.flow.name,
                stamped,
            )
        return (first, newest, smarks, tmarks, tails) if newest else None


def starts_of(
    at: Mapping[SourcePartition, int],
    committed: Mapping[SourcePartition, int | None] | None,
    keys: Iterable[SourcePartition],
) -> dict[SourcePartition, int]:
    """Where each of `keys` starts: as chosen in `at`, else at the group's committed offset
    (as read; left out when unknown)."""
    out: dict[SourcePartition, int] = {}
    for k in keys:
        at_committed = committed.get(k) if committed is not None else None
        if k in at:
            out[k] = at[k]
        elif at_committed is not None:
            out[k] = at_committed
    return out
