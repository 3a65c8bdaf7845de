"""Run the mirror with the offset-map recorder, in-process, for the failover tests.

`mirror_until_caught_up` is what `mirror run -c CONFIG --until-caught-up` does once the
recorder is wired into `mirror.daemon` (the engine's `Runner` with an
`OffsetMapRecorder` per flow on one shared store); it takes a registry so tests can read
the recorder's metrics.
"""

from __future__ import annotations

import threading
from pathlib import Path

from prometheus_client import CollectorRegistry

from mirror.config import Config, load
from mirror.recorder import OffsetMapRecorder
from mirror.store import FullOffsetStore, open_store


def mirror_until_caught_up(config_path: Path, *, registry: CollectorRegistry | None = None, stop: threading.Event | None = None) -> list[OffsetMapRecorder]:
    from mirror.engine import Runner

    config: Config = load(config_path)
    store: FullOffsetStore = open_store(config.offset_store)
    recorders: list[OffsetMapRecorder] = []

    def listeners(flow):  # type: ignore[no-untyped-def]
        rec = OffsetMapRecorder(store, flow.name, registry=registry)
        recorders.append(rec)
        return [rec]

    try:
        Runner(config, config.flows, stop=stop or threading.Event(), listeners=listeners, until_caught_up=True).run()
    finally:
        store.close()
    return recorders
