"""Preludes for the opt-in diagnostic rows: candidate engine changes tried without editing the engine.

Each is Python run in the `mirror run` process before the CLI starts (see
`contenders.Spec.start`), patching one thing, so a suggestion to the engine comes with a
measured before/after on the same load. None of this is used by the default rows.
"""

from __future__ import annotations

# The one-header, low-latency-consume, fetch-backoff and queue-size experiments that
# used to live here were adopted by the engine (see bench/README.md, 'History'), and so were
# the collector on a clock (`mirror-gc`) and the checkpointer's late first tick (`mirror-latetick`).
GC_OFF = "gc.disable()"
