"""Which source topics a flow mirrors and what they are called on the target (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from mirror.domain.flow import Flow, Topology
from mirror.domain.naming import MAX_TOPIC_NAME, target_topic, too_long, would_loop


@dataclass(frozen=True)
class TopicMapping:
    source: str
    target: str
    partitions: int


def match_topics(config: Topology, flow: Flow, source_topics: Mapping[str, int]) -> list[TopicMapping]:
    """The flow's topics among `source_topics` (name -> partition count), sorted by name.

    The canary topic is always included so that every flow can be probed end to end;
    topics whose names show they came from the target (or went round already) are not.
    Topics whose target name Kafka would refuse are included: lag, failover and the drift
    report must show them (never copied, their lag grows); the data paths copy
    `mirrorable_topics` and say which they leave out.
    """
    return _candidates(config, flow, source_topics)


def mirrorable_topics(
    config: Topology, flow: Flow, source_topics: Mapping[str, int]
) -> tuple[list[TopicMapping], list[TopicMapping]]:
    """(what a data path copies, what it cannot): `match_topics` split by whether Kafka
    would accept the target topic's name (`unmirrorable_topics`)."""
    candidates = _candidates(config, flow, source_topics)
    refused = too_long(candidates)
    return [m for m in candidates if m not in refused], refused


def unmirrorable_topics(config: Topology, flow: Flow, source_topics: Mapping[str, int]) -> list[TopicMapping]:
    """The topics the flow selects but cannot mirror: their target name would be longer than
    Kafka allows. `mirror validate` refuses them; both engines skip them, saying so once."""
    return too_long(_candidates(config, flow, source_topics))


def unmirrorable_reason(flow: str, m: TopicMapping) -> str:
    """The one line an engine logs (once) for a topic it leaves out: which, why, what to do."""
    return (
        f"flow {flow}: not mirroring {m.source}: its target name {m.target} is {len(m.target)} characters, "
        f"longer than Kafka's limit of {MAX_TOPIC_NAME} (use a shorter cluster name, exclude the topic, "
        "or rename: identity)"
    )


def _candidates(config: Topology, flow: Flow, source_topics: Mapping[str, int]) -> list[TopicMapping]:
    flt = flow.topic_filter(config.canary.topic)
    clusters: Iterable[str] = config.clusters.keys()
    out = []
    for name in sorted(source_topics):
        if flt.matches(name) and not would_loop(name, flow.source, flow.target, clusters):
            out.append(TopicMapping(name, target_topic(name, flow.source, flow.rename), source_topics[name]))
    return out


class TopicChange(Enum):
    """What became of a topic since its id was last seen."""

    SAME = "same"  # there with the same id, or not known well enough to say otherwise
    GONE = "gone"  # seen before, not there now
    RECREATED = "recreated"  # there under another id: deleted and created again


def topic_change(seen: str | None, now: str | None, *, present: bool) -> TopicChange:
    """Was this topic deleted (and created again) since its id `seen` was read?

    `now` is its id as read now (None: not known, say while a broker cannot describe a topic
    it just created), `present` whether the cluster has it at all. A topic never seen with
    an id was never seen at all: one just created that the cluster does not show yet is
    not gone. A topic is told apart from an earlier one of the same name only by its id.
    """
    if not present:
        return TopicChange.GONE if seen is not None else TopicChange.SAME
    if now is not None and seen is not None and seen != now:
        return TopicChange.RECREATED
    return TopicChange.SAME
