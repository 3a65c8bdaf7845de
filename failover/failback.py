"""`mirror failback`: after a failover, what the old primary still holds, and the way back.

The book's advice, made a tool: records the old primary accepted that never reached the
new primary are reported per partition (someone must decide about them: they are in no
consumer's future on the new primary); `--scrape` then deletes the mirrored topics' data
and the flow's groups on the old primary, so reversing the flow starts from a clean slate
instead of two diverged histories.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from failover.gather import FlowContext
from failover.plan import mirrored_end_from_target
from mirror.domain.topics import match_topics
from mirror.errors import UnsafeOperation
from mirror.kafka import OFFSET_END
from mirror.store import NEWEST, sync_windows


@dataclass(frozen=True)
class Stranded:
    """One partition of the old primary: records there that the new primary never got."""

    topic: str  # on the old primary
    target_topic: str
    partition: int
    old_end: int
    mirrored_end: int | None
    records: int


@dataclass
class FailbackReport:
    flow: str
    old_primary: str
    new_primary: str
    partitions: list[Stranded]
    groups: list[str]
    scraped: bool = False

    @property
    def stranded(self) -> int:
        return sum(p.records for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        return {
            "flow": self.flow,
            "old_primary": self.old_primary,
            "new_primary": self.new_primary,
            "never_mirrored": self.stranded,
            "partitions": [
                {
                    "topic": p.topic,
                    "target_topic": p.target_topic,
                    "partition": p.partition,
                    "old_end": p.old_end,
                    "mirrored_end": p.mirrored_end,
                    "never_mirrored": p.records,
                }
                for p in self.partitions
            ],
            "groups": self.groups,
            "scraped": self.scraped,
        }


def report(ctx: FlowContext) -> FailbackReport:
    flow = ctx.flow
    old, new = ctx.source, ctx.target
    listed = old.topics()
    # Topics we may not Describe are not listed: that must not pass for nothing to report or scrape.
    old.require_visible(flow.topics.include, listed, "Describe")
    mappings = match_topics(ctx.config, flow, listed)
    parts = [(m.source, p) for m in mappings for p in range(m.partitions)]
    names = {m.source: m.target for m in mappings}
    old_marks = old.watermarks(parts)
    new_topics = new.topics()
    new.require_visible(
        [], new_topics, "Describe", literal=sorted(set(names.values()))
    )  # hidden is not "never mirrored"
    tparts = [(names[t], p) for t, p in parts if names[t] in new_topics]
    new_marks = new.watermarks(tparts)
    committed = old.group_offsets(flow.group_id)
    windows = sync_windows(ctx.store, flow.name, {(t, p): NEWEST for t, p in parts if (names[t], p) in new_marks})
    out = []
    for t, p in parts:
        w = old_marks[(t, p)]
        mirrored: int | None = None
        tw = new_marks.get((names[t], p))
        if tw is not None:
            mirrored = mirrored_end_from_target(tw.high, windows[(t, p)].newest)
        if (t, p) in committed:
            mirrored = max(mirrored or 0, committed[(t, p)])
        start = mirrored if mirrored is not None else w.low
        out.append(Stranded(t, names[t], p, w.high, mirrored, max(0, w.high - max(start, w.low))))
    patterns = [re.compile(g) for g in flow.groups]
    groups = [g for g in old.list_groups() if g == flow.group_id or any(p.fullmatch(g) for p in patterns)]
    return FailbackReport(flow.name, flow.source, flow.target, out, groups)


def scrape(ctx: FlowContext, rep: FailbackReport) -> None:
    """Delete the mirrored topics' records and the flow's groups on the old primary."""
    old = ctx.source
    active = {g: n for g in rep.groups if (n := old.group_members(g))}
    if active:
        who = ", ".join(f"{g} ({n})" for g, n in sorted(active.items()))
        raise UnsafeOperation(
            f"groups still active on {rep.old_primary!r}: {who}; nothing was deleted",
            hint="stop them (and the mirror of this flow) first",
        )
    old.delete_records({(p.topic, p.partition): OFFSET_END for p in rep.partitions if p.old_end > 0})
    old.delete_groups(rep.groups)
    rep.scraped = True


def reversed_flow(ctx: FlowContext) -> str:
    """The flow config mirroring from the new primary back to the old one (YAML to paste)."""
    f = ctx.flow
    body: dict[str, Any] = {
        "name": f"{f.target}-to-{f.source}",
        "source": f.target,
        "target": f.source,
        "topics": {
            "include": list(f.topics.include),
            **({"exclude": list(f.topics.exclude)} if f.topics.exclude else {}),
        },
        "rename": f.rename.value,
    }
    if f.groups:
        body["groups"] = list(f.groups)
    return yaml.safe_dump({"flows": [body]}, sort_keys=False)
