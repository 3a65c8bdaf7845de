"""The offset-map recorder's buffer: bounded while the store is down, so reading pauses instead of memory growing."""

from __future__ import annotations

from mirror.domain.offsetmap import OffsetSync
from mirror.run.recorder import OffsetMapRecorder


def test_recorder_backlog_is_bounded():
    class Down:
        def write_syncs(self, flow, rows):
            from mirror.errors import OffsetStoreError

            raise OffsetStoreError("down")

    from mirror.domain.acks import AckBatch, backlog_full

    rec = OffsetMapRecorder(Down(), "f", registry=None)  # type: ignore[arg-type]
    rec.max_pending = 3
    for i in range(5):
        b = AckBatch("f", "t", 0, "x.t", i, i + 1, syncs=[(i, i * 2)])
        rec.on_acked([b])
    assert rec.pending == 5 and rec.backlog_full and backlog_full([rec])
    assert not backlog_full([object()])  # listeners without a buffer never hold reading back
    assert OffsetSync("t", 0, 1, 2).delta == 1
