"""Bulk vs one-by-one offset-map reads on a real Cassandra 5.0 node, 10,000 partitions.

`.venv/bin/python -m bench.store_windows` from the checkout (starts and stops its own node).
What a checkpoint tick or a failover plan over every partition asks the store: the floor,
next and newest rows of each partition (bench/README.md, "10,000 partitions").
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path


def main(partitions: int = 10_000, reps: int = 2) -> None:
    from mirror.config import CassandraStoreConfig
    from mirror.domain.offsetmap import OffsetSync
    from mirror.store import NEWEST, sync_window, sync_windows
    from mirror.store.cassandra import CassandraStore
    from tests.support.clusters import start_cassandra

    node = start_cassandra(Path(tempfile.mkdtemp(prefix="mirror-bench-cassandra-")))
    try:
        store = CassandraStore(
            CassandraStoreConfig(
                kind="cassandra", contact_points=[node.contact_point], keyspace="bench_windows", consistency="ONE"
            )
        )
        keys = [(f"t{i // 10:04d}", i % 10) for i in range(partitions)]
        store.write_syncs("f", [OffsetSync(t, p, s, s + 3) for t, p in keys for s in (0, 4)])
        positions = dict.fromkeys(keys, 3)
        for rep in range(reps):
            t0 = time.monotonic()
            bulk = sync_windows(store, "f", positions)
            t1 = time.monotonic()
            single = {
                (t, p): (sync_window(store, "f", t, p, x), store.floor_sync("f", t, p, NEWEST))
                for (t, p), x in positions.items()
            }
            t2 = time.monotonic()
            same = all(bulk[k].rows == single[k][0] and bulk[k].newest == single[k][1] for k in keys)
            print(f"rep {rep}: bulk {t1 - t0:.2f} s, one by one {t2 - t1:.2f} s, same answers: {same}", flush=True)
        store.close()
    finally:
        node.stop()


if __name__ == "__main__":
    main()
