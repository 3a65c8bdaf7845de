"""`Unsettled`: with exactly_once, a transaction whose commit's outcome the worker does not know.

A commit call can fail after the target committed: fenced by a new owner whose fence found the
commit already under way (the coordinator completes it), or a call that never returned and
was abandoned (`mirror.kafka.progress.transact`). The worker then holds and claims its
partitions again, and only the claim's fence settles the transaction (committed, or aborted).

Invariant: the acknowledgements of its records (offset-map rows, counters) are handed on once a
stable read of the progress, after that fence, shows the transaction committed (a partition's
progress at the offset it sent, under the writer id it sent), and dropped once it shows it did
not. So no row is written for a record that may not be on the target (an aborted copy lies
before the record's committed one: its row would set translation back, duplicates after a
failover, never past a record), and no committed record's row is lost (without it,
translation of a group in that stretch errs back to an older row, the same duplicates).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from mirror.domain.acks import AckBatch
from mirror.kafka.progress import Progress, TargetPartition


@dataclass
class Unsettled:
    """The progress a transaction sent where it moved, and its acknowledgements, held back."""

    sent: dict[TargetPartition, tuple[int, str | None]]  # (next source offset, writer id) per partition
    batches: list[AckBatch]

    def committed(self, progress: Mapping[TargetPartition, Progress], read: Collection[TargetPartition]) -> bool | None:
        """Whether the transaction committed, from a stable read of the `read` partitions
        (`progress`: what it found); None when the read covered none of its partitions.

        Its writer id is used by nobody else, and a partition is in `sent` only where the
        transaction moved its progress, so finding exactly that there means it committed."""
        seen = [tp for tp in self.sent if tp in read]
        if not seen:
            return None
        return any(
            (got := progress.get(tp)) is not None and (got.next_offset, got.writer_id) == self.sent[tp] for tp in seen
        )
