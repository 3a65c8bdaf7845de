"""Which source topics a flow mirrors and what they are called on the target (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mirror.domain.flow import Flow, Topology
from mirror.domain.naming import target_topic, would_loop


@dataclass(frozen=True)
class TopicMapping:
    source: str
    target: str
    partitions: int


def match_topics(config: Topology, flow: Flow, source_topics: Mapping[str, int]) -> list[TopicMapping]:
    """The flow's topics among `source_topics` (name -> partition count), sorted by name.

    The canary topic is always included so that every flow can be probed end to end;
    topics whose names show they came from the target (or went round already) are not.
    """
    flt = flow.topic_filter(config.canary.topic)
    clusters: Iterable[str] = config.clusters.keys()
    out = []
    for name in sorted(source_topics):
        if flt.matches(name) and not would_loop(name, flow.source, flow.target, clusters):
            out.append(TopicMapping(name, target_topic(name, flow.source, flow.rename), source_topics[name]))
    return out
