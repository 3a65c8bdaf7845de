"""Preludes for the opt-in diagnostic rows: candidate engine changes tried without editing the engine.

Each is Python run in the `mirror run` process before the CLI starts (see
`contenders.Spec.start`), patching one thing, so a suggestion to the engine comes with a
measured before/after on the same load. None of this is used by the default rows.
"""

from __future__ import annotations

# One provenance header ("mirror.origin" = b"cluster/topic/partition/offset") instead of four:
# librdkafka copies each header separately, and confluent-kafka encodes each name per record.
ONE_HEADER = """
import mirror.pipeline as _p
_pre = {}
def _headers(self, offset, original):
    if not self.provenance:
        return list(original) if original else None
    pre = _pre.get(self)
    if pre is None:
        pre = _pre[self] = b"/".join(v for _, v in self.provenance) + b"/"
    out = list(original) if original else []
    out.append(("mirror.origin", pre + b"%d" % offset))
    return out
_p.Route.headers = _headers
"""

# consume(n, timeout) returns only when n records are there or the timeout passed: at low
# rates every record waits up to the timeout. Take what is fetched without waiting, block
# only for the first record when idle.
LOW_LATENCY_CONSUME = """
import mirror.engine as _e
class _Consumer:
    def __init__(self, inner):
        self._inner = inner
    def consume(self, num_messages=1, timeout=-1):
        return self._inner.consume(num_messages, 0) or self._inner.consume(1, timeout)
    def __getattr__(self, name):
        return getattr(self._inner, name)
_make = _e.make_consumer
_e.make_consumer = lambda *a, **k: _Consumer(_make(*a, **k))
"""

GC_TUNED = "gc.set_threshold(50000, 50, 100); gc.freeze()"
GC_OFF = "gc.disable()"
