"""`CheckReads`: the replay check's reads, bounded together in time and in bytes.

The check (`mirror.engine.replay`) runs inside the group's assign callback: every request of
one check (its watermarks and its reads) shares one deadline (`CHECK_TIMEOUT`), each getting
what is left of it, so a slow cluster costs duplicates, not a member dropped by the group.
The records it holds to compare share one byte budget (`MAX_BYTES`), half of it for the
source records: the read itself ends once the records taken cost what is left of it (one
record past it at most), whatever their sizes, and a partition not read whole is compared on
the part read (the rest is copied again).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from mirror.config import ClusterConfig
from mirror.domain.replay import RECORD_OVERHEAD, StoredRecord
from mirror.domain.replay import held_size as size
from mirror.errors import KafkaOperationError

__all__ = ["CHECK_TIMEOUT", "MAX_BYTES", "RECORD_OVERHEAD", "CheckReads", "ReadRanges", "size"]

# One check's requests together: well inside the smallest max.poll.interval.ms the config
# accepts (60 s), which also covers the committed offsets the callback asks for.
CHECK_TIMEOUT = 10.0
# The source records and copies one check holds to compare, in bytes (half of it for the source
# records). Past it a backlog of unproven copies is copied again (duplicates).
MAX_BYTES = 64 << 20

Key = tuple[str, int]
Ranges = Mapping[Key, tuple[int, int]]
# (cluster name, cluster, ranges, timeout[, max_bytes]) -> records per partition, in order from
# each range's start; with max_bytes, ending once the records taken cost that much (`size`).
ReadRanges = Callable[..., dict[Key, list[StoredRecord]]]
T = TypeVar("T")


class CheckReads:
    """The reads of one replay check (see the module)."""

    def __init__(self, read: ReadRanges, timeout: float = CHECK_TIMEOUT, max_bytes: int | None = None) -> None:
        self._read = read
        self._deadline = time.monotonic() + timeout
        self.room = MAX_BYTES if max_bytes is None else max_bytes  # bytes left to read

    def left(self) -> float:
        """The seconds left of the check's deadline; raises when none is left."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise KafkaOperationError(f"the replay check's {CHECK_TIMEOUT:g}s for its requests ran out")
        return left

    def within(self, what: str, request: Callable[[], T]) -> T:
        """`request()` (a request bounded only by its cluster's timeout), waited for at most what
        is left of the deadline; raises when that runs out first. A request given up on ends in
        the background, within its cluster's timeout, and its answer is dropped."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = request()
            except Exception as exc:  # handed to the waiting caller
                box["error"] = exc

        worker = threading.Thread(target=run, name=f"replay-check-{what}", daemon=True)
        worker.start()
        worker.join(self.left())
        if worker.is_alive():
            raise KafkaOperationError(f"the replay check's {CHECK_TIMEOUT:g}s ran out waiting for the {what}")
        if "error" in box:
            raise box["error"]
        self.left()  # an answer that came past the deadline (the callback's time is spent)
        return box["value"]  # type: ignore[no-any-return]

    def __call__(
        self, name: str, cluster: ClusterConfig, ranges: Ranges, max_bytes: int | None = None
    ) -> dict[Key, list[StoredRecord]]:
        """`ranges` read with what is left of the check's time (and ending at `max_bytes`, when
        given); raises when no time is left."""
        timeout = min(cluster.timeout, self.left())
        if max_bytes is None:
            return self._read(name, cluster, ranges, timeout)
        return self._read(name, cluster, ranges, timeout, max_bytes)

    def prefixes(
        self, name: str, cluster: ClusterConfig, spans: Ranges, share: float = 1.0
    ) -> tuple[dict[Key, list[StoredRecord]], dict[Key, int]]:
        """Each span's records from its start, as far as `share` of the byte budget left goes.
        Returns the records and where each partition's read stopped (its span's end when read
        whole, else past its last record read: a range cut by the budget is proven no further)."""
        got: dict[Key, list[StoredRecord]] = {k: [] for k in spans}
        pos = {k: start for k, (start, _end) in spans.items()}
        cap = int(self.room * share)
        todo = {k: span for k, span in spans.items() if span[1] > span[0]}
        if cap <= 0 or not todo:
            return got, pos
        out = self(name, cluster, todo, cap)
        spent = 0
        for k in todo:
            got[k] = list(out.get(k, []))
            spent += sum(size(rec) for rec in got[k])
        self.room -= spent
        whole = spent < cap  # the read ends only once the records taken cost `cap`
        for k, (start, end) in todo.items():
            pos[k] = end if whole else (got[k][-1].offset + 1 if got[k] else start)
        return got, pos
