"""A live reload of `mirror run`'s config file (SIGHUP): what changes, and applying it.

`plan_reload` is pure: it compares the flows running now with the flows of the new file and
says which start, which stop and which restart. A flow is *changed* when anything that
reaches its worker differs: its own settings, either cluster's settings (but its
`datacenter` label), or the canary topic (every flow mirrors it; the canary's other settings
are `mirror canary run`'s). A flow whose inputs are all equal is *kept* and never touched: its
worker, its consumer group membership and its records in flight carry on as if nothing
happened. Keys no flow reads live (the offset store, the metrics server) are reported as
needing a restart, not applied.

`Reloader` reads and validates the file, plans, and applies the plan to a `FlowSet`. A file
that does not load (YAML, validation, an unknown `--flow`, a source topic the principal may
not see) is refused as a whole: every problem is logged, nothing running changes, and
`mirror_config_reload_failures_total` counts it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mirror.config import Config, FlowConfig, load
from mirror.errors import ConfigProblems, MirrorError
from mirror.metrics import ReloadMetrics

log = logging.getLogger(__name__)

# Top-level keys a running process reads once, at start: a change waits for a restart.
RESTART_KEYS = ("offset_store", "metrics")


@dataclass(frozen=True)
class ReloadPlan:
    """What a reload does to the running flows (names, in the new file's order where they are in it)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    kept: tuple[str, ...]
    needs_restart: tuple[str, ...]  # top-level keys that changed but are not applied live

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def describe(self) -> str:
        parts = [
            f"{what}: {', '.join(names)}"
            for what, names in (("added", self.added), ("removed", self.removed), ("changed", self.changed))
            if names
        ]
        return "; ".join(parts) or "no flow changed"


def _inputs(config: Config, flow: FlowConfig) -> tuple[object, ...]:
    """Everything in a config file that a flow's worker and side loops read.

    Of the canary, only its topic (the probe interval and max latency are `mirror canary
    run`'s); of a cluster, all but its `datacenter` label (read by `mirror failover` only)."""
    return (flow, _cluster(config, flow.source), _cluster(config, flow.target), config.canary.topic)


def _cluster(config: Config, name: str) -> object:
    cluster = config.clusters.get(name)
    return None if cluster is None else cluster.model_copy(update={"datacenter": None})


def plan_reload(old: Config, old_flows: Sequence[str], new: Config, new_flows: Sequence[FlowConfig]) -> ReloadPlan:
    """The difference between the running flows (`old_flows` of `old`) and `new_flows` of `new`."""
    before = {f.name: f for f in old.flows if f.name in set(old_flows)}
    after = {f.name: f for f in new_flows}
    added = tuple(n for n in after if n not in before)
    removed = tuple(n for n in old_flows if n not in after)
    changed = tuple(n for n in after if n in before and _inputs(old, before[n]) != _inputs(new, after[n]))
    kept = tuple(n for n in after if n in before and n not in changed)
    needs_restart = tuple(k for k in RESTART_KEYS if getattr(old, k) != getattr(new, k))
    return ReloadPlan(added, removed, changed, kept, needs_restart)


class FlowControl(Protocol):
    """What the reloader needs of the running flows (`mirror.run.flowset.FlowSet`)."""

    def check(self, config: Config, flows: Sequence[FlowConfig]) -> None:
        """Raise `MirrorError` if these flows cannot start (checked before anything stops)."""

    def start(self, config: Config, flows: Sequence[FlowConfig]) -> None:
        """Start these flows with `config`."""

    def stop(self, names: Sequence[str]) -> None:
        """Drain, commit and stop these flows; return once they have."""


class Reloader:
    """Re-reads the config file and applies the difference to the running flows.

    Invariant: a flow that is neither removed nor changed is never stopped, and a refused
    file changes nothing. Changed flows stop before they start again with the new settings,
    so no two workers of one flow run in this process at once.
    """

    def __init__(
        self,
        path: str | Path,
        config: Config,
        names: Sequence[str],
        flows: FlowControl,
        *,
        metrics: ReloadMetrics | None = None,
        loader: Callable[[str | Path], Config] = load,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.config = config  # the file as it is running now
        self.names = tuple(names)  # --flow NAME...; empty: every flow in the file
        self.running = [f.name for f in config.select_flows(self.names)]
        self._flows = flows
        self._metrics = metrics
        self._load = loader
        self._clock = clock
        if metrics is not None:
            metrics.succeeded(clock())  # the file read at start counts as the first load, as Prometheus's does

    def reload(self) -> ReloadPlan | None:
        """Apply the file as it is now; None when it was refused (the problems are logged)."""
        log.info("reloading %s", self.path)
        try:
            new = self._load(self.path)
            selected = new.select_flows(self.names)
            plan = plan_reload(self.config, self.running, new, selected)
            starting = [f for f in selected if f.name in set(plan.added) | set(plan.changed)]
            self._flows.check(new, starting)
        except MirrorError as exc:
            self._refused(exc)
            return None
        for key in plan.needs_restart:
            log.warning("config reload: %s changed; it takes effect at the next restart of mirror run", key)
        self._flows.stop([*plan.removed, *plan.changed])
        self._flows.start(new, starting)
        self.config, self.running = new, [f.name for f in selected]
        if self._metrics is not None:
            self._metrics.succeeded(self._clock())
        log.info("config reloaded from %s: %s", self.path, plan.describe())
        return plan

    def _refused(self, exc: MirrorError) -> None:
        problems = exc.problems if isinstance(exc, ConfigProblems) else [exc]
        log.error(
            "config reload refused (%d problem(s)); the running flows carry on with the file as it was",
            len(problems),
        )
        for problem in problems:
            log.error("config reload: %s", problem)
        if self._metrics is not None:
            self._metrics.failed()
