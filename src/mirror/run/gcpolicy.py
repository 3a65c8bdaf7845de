"""The cyclic garbage collector's settings for a mirroring process.

The record path allocates several container objects per record (a consumed `Message`, the
headers list and its tuple) and frees them within a batch: reference counting reclaims all
of them, none is part of a cycle. With CPython's default thresholds (a young collection
every 700 net allocations) the collector still ran a few thousand times a second and took
about 7% of the process's CPU at full speed (bench/README.md, "Speed of one worker"),
scanning the tens of thousands of long-lived objects start-up left behind on each older
collection.

So once a process is set up: everything alive is moved out of the collector's sight
(`gc.freeze`: imports, config, clients live as long as the process) and young collections
run every 50,000 net allocations. Cycles are still collected, only less often: the few
the engine makes (exceptions with tracebacks, callbacks holding their owner) wait for at
most 50,000 net allocations, a fraction of a second at full speed; in a quiet process they
wait longer, bounded by the same count.
"""

from __future__ import annotations

import gc

YOUNG = 50_000  # net allocations between young collections (CPython's default: 700)
MIDDLE = 50  # young collections per middle one (default 10)
OLD = 100  # middle collections per full one (default 10; CPython also waits for 25% growth)


def settle() -> None:
    """Freeze what set-up left alive and space collections for a record-copying loop."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG, MIDDLE, OLD)
