"""Preludes for the opt-in diagnostic rows: candidate engine changes tried without editing the engine.

Each is Python run in the `mirror run` process before the CLI starts (see
`contenders.Spec.start`), patching one thing, so a suggestion to the engine comes with a
measured before/after on the same load. None of this is used by the default rows.
"""

from __future__ import annotations

# The one-header, low-latency-consume, fetch-backoff and queue-size experiments that
# used to live here were adopted by the engine (see bench/README.md, 'History').
GC_TUNED = "gc.set_threshold(50000, 50, 100); gc.freeze()"
GC_OFF = "gc.disable()"
# The group checkpointer's first tick one interval after start instead of at once (its
# admin clients and listings compete with the flow's own start for the CPU).
LATE_TICK = (
    "import mirror.run.checkpointer as _c; _run = _c.GroupCheckpointer.run\n"
    "def _late(self, stop):\n"
    "    if not stop.wait(self.flow.checkpoint_interval):\n"
    "        _run(self, stop)\n"
    "_c.GroupCheckpointer.run = _late"
)
