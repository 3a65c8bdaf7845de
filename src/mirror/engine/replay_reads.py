"""`CheckReads`: the replay check's reads, bounded together in time and in bytes.

The check (`mirror.engine.replay`) runs inside the group's assign callback: every read of
one check shares one deadline (`CHECK_TIMEOUT`), each read getting what is left of it, so a
slow target costs duplicates, not a member dropped by the group. The records it holds to
compare share one byte budget (`MAX_BYTES`), half of it for the source records: both these
and the copies are read from each range's start in rounds sized by the largest record seen
so far, and a partition the budget does not cover whole is compared on the part read (the
rest is copied again). A round may overshoot by its size guess: the first one is sized by
the target's last copy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from mirror.config import ClusterConfig
from mirror.domain.replay import StoredRecord
from mirror.errors import KafkaOperationError

# One check's reads together: well inside the smallest max.poll.interval.ms the config accepts
# (60 s), which also covers the watermarks and committed offsets the callback asks for.
CHECK_TIMEOUT = 10.0
# The source records and copies one check holds to compare, in bytes (half of it for the source
# records). Past it a backlog of unproven copies is copied again (duplicates).
MAX_BYTES = 64 << 20
# What one record costs held in memory beyond its key and value (the object, its headers).
RECORD_OVERHEAD = 256
# Rounds of source reads: the first is sized by the target's last copy, the next ones by the
# largest record read so far.
MAX_ROUNDS = 8

Key = tuple[str, int]
Ranges = Mapping[Key, tuple[int, int]]
ReadRanges = Callable[[str, ClusterConfig, Ranges, float], dict[Key, list[StoredRecord]]]


def size(rec: StoredRecord) -> int:
    """What one record held costs, as the budget counts it."""
    return len(rec.key or b"") + len(rec.value or b"") + RECORD_OVERHEAD


class CheckReads:
    """The reads of one replay check (see the module)."""

    def __init__(self, read: ReadRanges, timeout: float = CHECK_TIMEOUT, max_bytes: int | None = None) -> None:
        self._read = read
        self._deadline = time.monotonic() + timeout
        self.room = MAX_BYTES if max_bytes is None else max_bytes  # bytes left to read

    def __call__(self, name: str, cluster: ClusterConfig, ranges: Ranges) -> dict[Key, list[StoredRecord]]:
        """`ranges` read with what is left of the check's time; raises when none is left."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise KafkaOperationError(f"the replay check's {CHECK_TIMEOUT:g}s for its reads ran out")
        return self._read(name, cluster, ranges, min(cluster.timeout, left))

    def prefixes(
        self, name: str, cluster: ClusterConfig, spans: Ranges, guess: Mapping[Key, int], share: float = 1.0
    ) -> tuple[dict[Key, list[StoredRecord]], dict[Key, int]]:
        """Each span's records from its start, as far as `share` of the byte budget left goes
        (`guess`: a record's size per partition, before any is read). Returns the records and
        where each partition's read stopped (its span's end when read whole)."""
        got: dict[Key, list[StoredRecord]] = {k: [] for k in spans}
        pos = {k: start for k, (start, _end) in spans.items()}
        big = {k: max(guess.get(k, 0), RECORD_OVERHEAD) for k in spans}
        floor = self.room - int(self.room * share)  # the budget this read leaves for others
        for _ in range(MAX_ROUNDS):
            ranges: dict[Key, tuple[int, int]] = {}
            planned = 0
            for k in sorted(spans):
                n = min(spans[k][1] - pos[k], (self.room - floor - planned) // big[k])
                if n > 0:
                    ranges[k] = (pos[k], pos[k] + n)
                    planned += n * big[k]
                elif pos[k] < spans[k][1]:
                    break  # the budget ends here: later partitions are not read at all
            if not ranges:
                break
            out = self(name, cluster, ranges)
            for k, (_start, end) in ranges.items():
                recs = out.get(k, [])
                got[k].extend(recs)
                pos[k] = end
                self.room -= sum(size(rec) for rec in recs)
                big[k] = max([big[k], *(size(rec) for rec in recs)])
        return got, pos
