"""A site drill's application: several groups over several flows, played together.

One `Workload` per (flow, group), each with its own producer run and consumer group on
the drill topic of its flow's source; the site workload starts, stops and kills them
together, which is what a datacenter failover does to every application at once. Its
numbers are per group (records lost and duplicated, from each workload's sequence
numbers) and for the site: the RTO runs from the cutover (every group stopped, or the
primary died) to the last group's first record read on its DR cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mirror.config import Config, FlowConfig
from mirror.drill.workload import Workload, WorkloadState, snapshot_cost


@dataclass
class SiteState:
    """The site-wide flags the drill sets and reads (its groups keep their own too)."""

    cutover_ms: int | None = None
    primary_killed: bool = False
    producing: bool = False
    consuming_on: str | None = None


@dataclass
class SiteWorkload:
    workloads: dict[str, Workload]  # group -> its workload
    state: SiteState = field(default_factory=SiteState)

    @classmethod
    def build(
        cls,
        config: Config,
        flows: list[FlowConfig],
        groups: dict[str, str],
        topic: str,
        partitions: int,
        saved: dict[str, Any] | None = None,
    ) -> SiteWorkload:
        """`groups`: group -> its flow's name; `saved`: a snapshot to resume from."""
        by_name = {f.name: f for f in flows}
        states = {g: WorkloadState.from_json(doc) for g, doc in (saved or {}).get("groups", {}).items()}
        workloads = {
            g: Workload(config, by_name[f], g, states.get(g) or WorkloadState(topic=topic, partitions=partitions))
            for g, f in groups.items()
        }
        site = cls(workloads)
        if saved:
            site.state = SiteState(
                saved.get("cutover_ms"),
                saved.get("primary_killed", False),
                saved.get("producing", False),
                saved.get("consuming_on"),
            )
        return site

    @property
    def errors(self) -> list[str]:
        return [f"{g}: {e}" for g, w in self.workloads.items() for e in w.errors]

    @property
    def dr_topic(self) -> str:
        return ", ".join(sorted({w.dr_topic for w in self.workloads.values()}))

    def snapshot(self) -> dict[str, Any]:
        return {
            "site": True,
            "cutover_ms": self.state.cutover_ms,
            "primary_killed": self.state.primary_killed,
            "producing": self.state.producing,
            "consuming_on": self.state.consuming_on,
            "groups": {g: w.snapshot() for g, w in self.workloads.items()},
        }

    def ensure_topic(self) -> None:
        done = set()
        for w in self.workloads.values():
            if w.flow.source not in done:
                w.ensure_topic()
                done.add(w.flow.source)
            else:
                w.state.partitions = next(
                    o.state.partitions for o in self.workloads.values() if o.flow.source == w.flow.source
                )

    def start_producer(self) -> None:
        self.state.producing = True
        for w in self.workloads.values():
            w.start_producer()

    def stop_producer(self) -> None:
        for w in self.workloads.values():
            w.stop_producer()
        self.state.producing = False

    def start_consumer(self, side: str) -> None:
        self.state.consuming_on = side
        for w in self.workloads.values():
            w.start_consumer(side)

    def stop_consumer(self) -> None:
        for w in self.workloads.values():
            w.stop_consumer()
        self.state.consuming_on = None

    def wait_first_read(self, side: str, timeout: float) -> None:
        for w in self.workloads.values():
            w.wait_first_read(side, timeout)

    def drain(self) -> None:
        for w in self.workloads.values():
            w.drain()

    def stop_all(self) -> None:
        for w in self.workloads.values():
            w.stop_all()

    def set_cutover(self, ms: int) -> None:
        self.state.cutover_ms = ms
        for w in self.workloads.values():
            w.state.cutover_ms = ms

    def numbers(self) -> dict[str, Any]:
        """The site's RTO and every group's lost and duplicated records."""
        groups = {}
        firsts = []
        for g, w in self.workloads.items():
            snap = w.snapshot()
            c = snapshot_cost(snap)
            groups[g] = {
                "flow": w.flow.name,
                "dr_topic": w.dr_topic,
                "produced": c.produced,
                "read_before": c.read_before,
                "read_after": c.read_after,
                "lost": c.lost,
                "duplicated": c.duplicated,
                "first_dr_read_ms": snap["first_dr_read_ms"],
            }
            firsts.append(snap["first_dr_read_ms"])
        rto = None
        if self.state.cutover_ms is not None and firsts and all(f is not None for f in firsts):
            rto = round((max(firsts) - self.state.cutover_ms) / 1000, 3)
        return {
            "rto_seconds": rto,
            "groups": groups,
            "produced": sum(v["produced"] for v in groups.values()),
            "read_before": sum(v["read_before"] for v in groups.values()),
            "read_after": sum(v["read_after"] for v in groups.values()),
            "lost": sum(v["lost"] for v in groups.values()),
            "duplicated": sum(v["duplicated"] for v in groups.values()),
            "final": self.state.consuming_on is None and not self.state.producing,
        }


def load_snapshot(text: str) -> dict[str, Any] | None:
    """A saved site snapshot (state.json), or None when the file holds a single workload."""
    doc = json.loads(text)
    return doc if isinstance(doc, dict) and doc.get("site") else None
