"""Topic selection, target naming and loop detection: pure functions, no I/O.

Why prefixes are the default: a prefixed name carries its history (`sf.nyc.orders` came
from nyc, then sf), so any flow can tell from the name alone whether a topic would travel
back to a cluster it already passed through. With identity names that history is gone, and
only the topology itself (checked at load, see `find_identity_cycles`) can rule loops out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeVar

SEPARATOR = "."


class RenamePolicy(str, Enum):
    PREFIX = "prefix"  # nyc.orders on the target
    IDENTITY = "identity"  # orders on the target


@dataclass(frozen=True)
class TopicFilter:
    """Full-match include/exclude regexes over source topic names (compiled once)."""

    include: tuple[re.Pattern[str], ...]
    exclude: tuple[re.Pattern[str], ...] = ()
    always: frozenset[str] = frozenset()  # topics mirrored whatever the patterns say (canary)

    @classmethod
    def of(cls, include: Iterable[str], exclude: Iterable[str] = (), always: Iterable[str] = ()) -> TopicFilter:
        return cls(
            tuple(re.compile(p) for p in include),
            tuple(re.compile(p) for p in exclude),
            frozenset(always),
        )

    def matches(self, topic: str) -> bool:
        if topic in self.always:
            return True
        if is_internal(topic) and not any(p.pattern.startswith("__") for p in self.include):
            # `__consumer_offsets`, `__transaction_state`, … are cluster-local state; mirroring
            # them by accident (include ".*") corrupts the target. Only an include pattern
            # that itself starts with "__" opts in.
            return False
        if not any(p.fullmatch(topic) for p in self.include):
            return False
        return not any(p.fullmatch(topic) for p in self.exclude)


def is_internal(topic: str) -> bool:
    return topic.startswith("__")


def origin_chain(topic: str, clusters: Iterable[str]) -> list[str]:
    """Cluster names a prefixed topic passed through, newest first: `sf.nyc.orders` -> [sf, nyc]."""
    known = set(clusters)
    chain: list[str] = []
    for part in topic.split(SEPARATOR)[:-1]:
        if part not in known:
            break
        chain.append(part)
    return chain


def would_loop(topic: str, source: str, target: str, clusters: Iterable[str]) -> bool:
    """True when mirroring `topic` from `source` to `target` sends data back where it was.

    A topic whose name says it came from `target` (directly or through other clusters) is
    that cluster's own data coming home; the source's own name in the chain means the topic
    already went round once.
    """
    chain = origin_chain(topic, clusters)
    return target in chain or source in chain


def target_topic(topic: str, source: str, policy: RenamePolicy) -> str:
    if policy is RenamePolicy.PREFIX:
        return f"{source}{SEPARATOR}{topic}"
    return topic


# Kafka refuses a topic name longer than this (`Topic.MAX_NAME_LENGTH`): a prefix that pushes
# a target name past it makes the topic impossible to create.
MAX_TOPIC_NAME = 249


class _Named(Protocol):
    @property
    def target(self) -> str: ...


N = TypeVar("N", bound=_Named)


def too_long(mappings: Iterable[N]) -> list[N]:
    """The mappings whose target topic name Kafka would refuse as too long."""
    return [m for m in mappings if len(m.target) > MAX_TOPIC_NAME]


def literal_name(pattern: str) -> str | None:
    """The one topic name an include pattern selects when it is a literal (`orders\\.eu` ->
    `orders.eu`), else None."""
    return _unescape(pattern) if _is_literal(pattern) else None


def source_topic(target: str, source: str, policy: RenamePolicy) -> str:
    """Inverse of `target_topic` (used by failover and failback to go back to the source name)."""
    if policy is RenamePolicy.PREFIX:
        prefix = f"{source}{SEPARATOR}"
        if not target.startswith(prefix):
            raise ValueError(f"{target!r} is not a topic mirrored from {source!r}")
        return target[len(prefix) :]
    return target


@dataclass(frozen=True)
class FlowEdge:
    """What loop detection needs to know about a flow."""

    name: str
    source: str
    target: str
    policy: RenamePolicy
    include: tuple[str, ...]


def find_identity_cycles(flows: Sequence[FlowEdge], always: Iterable[str] = ()) -> list[list[str]]:
    """Cycles of flows that all keep topic names, where a record could go round forever.

    A cycle containing a prefixing flow is safe: the prefix names the cluster and
    `would_loop` stops the topic at the next hop home. An all-identity cycle is safe only
    when two consecutive flows provably select disjoint topics; that is decidable here only
    for literal patterns, so anything else is reported (a false alarm costs an edit of the
    config; a missed loop costs an outage).

    `always` names topics every flow mirrors whatever its patterns say (the canary topic):
    two identity flows in opposite directions always share it, so its probes would
    circulate forever however disjoint their patterns are.
    """
    extra = tuple(literal(t) for t in always)
    identity = [
        FlowEdge(f.name, f.source, f.target, f.policy, f.include + extra)
        for f in flows
        if f.policy is RenamePolicy.IDENTITY
    ]
    by_source: dict[str, list[FlowEdge]] = {}
    for f in identity:
        by_source.setdefault(f.source, []).append(f)

    cycles: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def walk(start: FlowEdge, path: list[FlowEdge]) -> None:
        last = path[-1]
        for nxt in by_source.get(last.target, []):
            if not _may_overlap(last.include, nxt.include):
                continue
            if nxt is start:
                key = frozenset(f.name for f in path)
                if key not in seen:
                    seen.add(key)
                    cycles.append([f.name for f in path])
            elif nxt not in path and len(path) < len(identity):
                walk(start, [*path, nxt])

    for f in identity:
        walk(f, [f])
    return cycles


def literal(topic: str) -> str:
    """The include pattern selecting exactly `topic` (Kafka names use only [A-Za-z0-9._-])."""
    return topic.replace(".", "\\.")


def _is_literal(pattern: str) -> bool:
    return re.escape(pattern) == pattern or re.fullmatch(r"[A-Za-z0-9_\-]+(\\\.[A-Za-z0-9_\-]+)*", pattern) is not None


def _unescape(pattern: str) -> str:
    return pattern.replace("\\", "")


def _may_overlap(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether two include lists could select a common topic name."""
    for pa in a:
        for pb in b:
            if _is_literal(pa) and _is_literal(pb):
                if _unescape(pa) == _unescape(pb):
                    return True
            elif _is_literal(pa):
                if re.fullmatch(pb, _unescape(pa)):
                    return True
            elif _is_literal(pb):
                if re.fullmatch(pa, _unescape(pb)):
                    return True
            else:
                return True
    return False


def find_identity_collisions(flows: Sequence[FlowEdge]) -> list[tuple[str, str]]:
    """Pairs of identity flows from different sources that could write into one target topic.

    Two sources feeding one target topic interleave their records: per-partition order
    and the offset map (one delta sequence per target partition) stop meaning anything.
    Prefixing keeps them apart (`nyc.prices`, `sf.prices`).
    """
    identity = [f for f in flows if f.policy is RenamePolicy.IDENTITY]
    out = []
    for i, a in enumerate(identity):
        for b in identity[i + 1 :]:
            if a.target == b.target and a.source != b.source and _may_overlap(a.include, b.include):
                out.append((a.name, b.name))
    return out


@dataclass(frozen=True)
class RelayCollision:
    """An identity flow relaying another cluster's prefixed topics into a target that a
    prefixing flow from that cluster also writes: both produce `origin.topic` there."""

    relay: str  # the identity flow carrying `origin.*` names it received from elsewhere
    direct: str  # the prefixing flow from `origin` into the same target
    target: str
    origin: str


def find_relay_collisions(flows: Sequence[FlowEdge]) -> list[RelayCollision]:
    """Identity flows that may write a topic a prefixing flow from another source also writes.

    A prefixed name exists on a cluster only because a flow wrote it, so the names each
    cluster can hold are followed through the topology by their origin chain (`sf.nyc.x`
    -> (sf, nyc)), to a fixed point, stopping where `would_loop` stops a topic. Patterns
    are not followed (any flow is assumed to select any name it may receive), except that
    an identity flow whose include patterns cannot match `origin.<anything>` relays none.
    Two prefixing flows from different sources never collide (their first prefix differs);
    two identity flows are `find_identity_collisions`' business.
    """
    chains: dict[str, set[tuple[str, ...]]] = {}
    for f in flows:
        chains.setdefault(f.source, {()})
        chains.setdefault(f.target, {()})
    changed = True
    while changed:
        changed = False
        for f in flows:
            for ch in list(chains[f.source]):
                if f.source in ch or f.target in ch:
                    continue  # would_loop: the name shows it would go home
                new = (f.source, *ch) if f.policy is RenamePolicy.PREFIX else ch
                if new not in chains[f.target]:
                    chains[f.target].add(new)
                    changed = True
    out = []
    for relay in flows:
        if relay.policy is not RenamePolicy.IDENTITY:
            continue
        for direct in flows:
            if (
                direct.policy is not RenamePolicy.PREFIX
                or direct.target != relay.target
                or direct.source == relay.source
            ):
                continue
            origin = direct.source
            carried = any(ch and ch[0] == origin and relay.target not in ch for ch in chains[relay.source])
            if carried and _may_overlap(relay.include, (f"{literal(origin)}\\..*",)):
                out.append(RelayCollision(relay.name, direct.name, relay.target, origin))
    return out
