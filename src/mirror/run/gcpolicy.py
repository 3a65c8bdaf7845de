"""The cyclic garbage collector's schedule in a mirroring process.

The record path allocates several container objects per record (a consumed `Message`, the
headers list and its tuple) and frees them within a batch: reference counting reclaims all
of them, none is part of a cycle. With CPython's default thresholds (a young collection
every 700 net allocations) the collector still ran a few thousand times a second and took
about 7% of the process's CPU at full speed (bench/README.md, "Performance 3"), scanning
the long-lived objects set-up left behind on each older collection.

So while flows run: everything alive after set-up is moved out of the collector's sight
(`gc.freeze`: imports, config, clients that live as long as the process), allocations no
longer start collections (a threshold of 50,000 net allocations, which a copying loop,
freeing each batch, never reaches), and the process collects on a clock instead: the young
generations every second, everything every minute. Cycles do exist and must not wait for
the process to end: a flow worker and its clients' callbacks form one, so a flow a reload
stopped is freed (its librdkafka threads and connections closed) within a second.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from types import TracebackType

YOUNG = 50_000  # net allocations before a young collection starts by itself (CPython: 700)
MIDDLE = 50
OLD = 100
YOUNG_EVERY = 1.0  # seconds between collections of the young generations
FULL_EVERY = 60.0  # seconds between full collections


class CollectionSchedule:
    """`with CollectionSchedule():` around the running flows, `tick()` from the loop watching
    them. Leaving restores the collector as it was (tests run `mirror run` in-process)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._before = gc.get_threshold()
        self._young_at = self._full_at = 0.0

    def __enter__(self) -> CollectionSchedule:
        gc.collect()
        gc.freeze()
        gc.set_threshold(YOUNG, MIDDLE, OLD)
        now = self._clock()
        self._young_at, self._full_at = now + YOUNG_EVERY, now + FULL_EVERY
        return self

    def tick(self) -> None:
        """Collect what is due: cheap (the young generations hold about one batch's objects)."""
        now = self._clock()
        if now >= self._full_at:
            gc.collect()
            self._full_at, self._young_at = now + FULL_EVERY, now + YOUNG_EVERY
        elif now >= self._young_at:
            gc.collect(1)
            self._young_at = now + YOUNG_EVERY

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        gc.unfreeze()
        gc.set_threshold(*self._before)
        gc.collect()
