"""`FlowThreads`: the selected flows, one `FlowWorker` thread each, stopped together."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from mirror.config import Config, FlowConfig
from mirror.domain.acks import AckListener
from mirror.engine.worker import FlowWorker
from mirror.errors import MirrorError

log = logging.getLogger(__name__)


class FlowThreads:
    """Runs the selected flows, one thread each, until stopped, caught up, or failed."""

    def __init__(
        self,
        config: Config,
        flows: Sequence[FlowConfig],
        *,
        stop: threading.Event | None = None,
        listeners: Callable[[FlowConfig], Sequence[AckListener]] = lambda flow: (),
        **worker_args: Any,
    ) -> None:
        self.stop = stop or threading.Event()
        self.workers = [FlowWorker(config, f, stop=self.stop, listeners=listeners(f), **worker_args) for f in flows]
        self.errors: list[BaseException] = []

    def run(self) -> None:
        threads = [
            threading.Thread(target=self._run_one, args=(w,), name=f"flow-{w.flow.name}", daemon=True)
            for w in self.workers
        ]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(timeout=0.2)
                if self.errors:
                    self.stop.set()  # one flow failed: stop the others cleanly, then report
        finally:
            self.stop.set()
            for t in threads:
                t.join()
        if self.errors:
            raise self.errors[0]

    def _run_one(self, worker: FlowWorker) -> None:
        try:
            worker.run()
        except BaseException as exc:  # reported by run() on the main thread
            if not isinstance(exc, MirrorError):
                log.exception("flow %s crashed", worker.flow.name)
            self.errors.append(exc)
