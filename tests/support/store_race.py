"""Open one new SQLite offset store from several processes at the same instant, as
`mirror run --workers N` does; print the errors, one per line. Run as a script, so the
forked openers come from a process without librdkafka threads:

    python tests/support/store_race.py DIR ROUNDS OPENERS
"""

from __future__ import annotations

import multiprocessing as mp
import sys
from pathlib import Path


def _open(path: str, barrier, errors) -> None:
    from mirror.store import SqliteStore

    barrier.wait()
    try:
        SqliteStore(path)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which asserts on it
        errors.put(str(exc))


def main(directory: str, rounds: int, openers: int) -> int:
    import mirror.store  # noqa: F401 - imported before the fork, so the openers start in step

    ctx = mp.get_context("fork")
    errors = ctx.Queue()
    for r in range(rounds):
        path = str(Path(directory) / f"round{r}.db")
        barrier = ctx.Barrier(openers)
        procs = [ctx.Process(target=_open, args=(path, barrier, errors)) for _ in range(openers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
    failed = 0
    while not errors.empty():
        print(errors.get())
        failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
