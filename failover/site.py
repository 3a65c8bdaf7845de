"""A datacenter's failover as one reviewed plan: every group of every flow from it (pure).

`failover.sitegather` collects the per-flow plans (`failover.gather`) and the facts apply
must re-check; this module holds the plan document, its totals, and the decision apply
makes per group. The document is what a person reviews and what `apply` executes as
written, so it carries, per group, the exact offsets to commit and what the group's
offsets were when it was planned: apply refuses a group whose offsets moved since (someone
committed, the group came back), and recognises the partitions it already moved itself,
which makes a second run after a failure finish the rest without redoing anything.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from failover.offsets_file import malformed
from failover.plan import Method, Plan
from mirror.errors import UnsafeOperation, UsageError

VERSION = 1
KIND = "site-failover-plan"
Key = tuple[str, int]
# Connections per cluster for a site's group requests (`mirror.kafka.admin.base.AdminBase`
# says why more than one): hundreds of groups' commits and deletions go over them together.
LANES = 8


def _pairs(offsets: Mapping[Key, int]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]


def _unpairs(rows: Any) -> dict[Key, int]:
    return {(str(r["topic"]), int(r["partition"])): int(r["offset"]) for r in rows}


@dataclass
class SiteGroup:
    """One consumer group of the site: its plans (one per flow carrying it) and what apply re-checks."""

    group: str
    target: str  # the cluster it moves to
    sources: list[str]  # the clusters its flows read from
    plans: list[Plan] = field(default_factory=list)
    offsets: dict[Key, int] = field(default_factory=dict)  # (target topic, partition) -> offset to commit
    target_before: dict[Key, int] = field(default_factory=dict)  # the group's commits there when planned
    source_seen: dict[str, dict[Key, int]] | None = (
        None  # cluster -> its live source offsets when planned (None: from checkpoints)
    )
    source_state: str | None = (
        None  # the group's state there (STABLE, EMPTY, ...); None: not asked (gone) or no such group
    )
    target_state: str | None = None
    refused: str | None = None
    errors: list[str] = field(default_factory=list)  # flows it could not be planned for
    checkpoint_time_ms: int | None = None

    @property
    def truth(self) -> str:
        truths = sorted({p.truth.value for p in self.plans})
        return "+".join(truths) if truths else "-"

    @property
    def unmirrored(self) -> int:
        return sum(p.unmirrored for p in self.plans)

    @property
    def may_reread(self) -> int:
        return sum(p.may_reread for p in self.plans)

    def to_json(self, now_ms: int) -> dict[str, Any]:
        return {
            "group": self.group,
            "target": self.target,
            "sources": self.sources,
            "truth": self.truth,
            "refused": self.refused,
            "source_state": self.source_state,
            "target_state": self.target_state,
            "partitions": len(self.offsets),
            "unmirrored": self.unmirrored,
            "may_reread": self.may_reread,
            "checkpoint_time_ms": self.checkpoint_time_ms,
            "checkpoint_age_ms": None if self.checkpoint_time_ms is None else max(0, now_ms - self.checkpoint_time_ms),
            "errors": self.errors,
            "offsets": _pairs(self.offsets),
            "target_before": _pairs(self.target_before),
            "source_seen": None if self.source_seen is None else {c: _pairs(o) for c, o in self.source_seen.items()},
            "flows": [p.to_json() for p in self.plans],
        }


@dataclass
class SitePlan:
    site: str
    clusters: list[str]  # the clusters the site stands for
    to: str | None
    method: Method
    created_ms: int
    config: str  # the config file's absolute path: apply reuses it when -c is not given
    flows: list[tuple[str, str, str]]  # (flow, source, target) in the plan
    groups: list[SiteGroup]
    at_ms: int | None = None
    notes: list[str] = field(default_factory=list)

    def flow_totals(self) -> list[dict[str, Any]]:
        out = []
        for name, source, target in self.flows:
            plans = [(g, p) for g in self.groups for p in g.plans if p.flow == name]
            errors = [e for g in self.groups for e in g.errors if e.startswith(f"{name}: ")]
            out.append(
                {
                    "flow": name,
                    "source": source,
                    "target": target,
                    "groups": len(plans),
                    "refused": sum(1 for g, _ in plans if g.refused),
                    "partitions": sum(len(p.partitions) for _, p in plans),
                    "unmirrored": sum(p.unmirrored for _, p in plans),
                    "may_reread": sum(p.may_reread for _, p in plans),
                    "errors": len(errors),
                }
            )
        return out

    def totals(self) -> dict[str, int]:
        return {
            "groups": len(self.groups),
            "refused": sum(1 for g in self.groups if g.refused),
            "partitions": sum(len(g.offsets) for g in self.groups),
            "unmirrored": sum(g.unmirrored for g in self.groups),
            "may_reread": sum(g.may_reread for g in self.groups),
        }

    def to_text(self) -> str:
        """The document as one JSON line, with its id: one encoding of a plan that may
        hold 50,000 partitions (the id is the hash of the rest, so it is encoded once)."""
        body = self._body()
        text = json.dumps(body)
        return text[:-1] + f', "id": "{plan_id(text)}"}}'

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.to_text())
        return doc

    def _body(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "kind": KIND,
            "from": self.site,
            "from_clusters": self.clusters,
            "to": self.to,
            "method": self.method.value,
            "at_ms": self.at_ms,
            "created_ms": self.created_ms,
            "config": self.config,
            "totals": self.totals(),
            "flows": self.flow_totals(),
            "groups": [g.to_json(self.created_ms) for g in self.groups],
            "notes": self.notes,
        }


@dataclass(frozen=True)
class ApplyGroup:
    """What `apply` needs of one planned group (read back from the plan file)."""

    group: str
    target: str
    sources: list[str]
    offsets: dict[Key, int]
    target_before: dict[Key, int]
    source_seen: dict[str, dict[Key, int]] | None
    refused: str | None


@dataclass(frozen=True)
class PlanDoc:
    id: str
    site: str
    config: str
    groups: list[ApplyGroup]


def plan_id(body_text: str) -> str:
    return hashlib.sha256(body_text.encode()).hexdigest()[:16]


def read_plan(doc: Any, source: str) -> PlanDoc:
    """The plan file as apply needs it; a usage error naming --plan when it is not one,
    a refusal (exit 3) when it was changed after it was written: apply runs the plan that
    was reviewed, as written, or nothing."""
    if isinstance(doc, dict) and "kind" not in doc and {"flow", "group", "partitions"} <= set(doc):
        raise UsageError(
            f"--plan: {source} is the --json output of a one-group plan, not a plan file",
            hint="write the plan file with `mirror failover plan --flow F --group G ... --out PLAN`",
        )
    try:
        if doc.get("kind") != KIND or doc.get("version") != VERSION:
            raise ValueError(
                f"not a {KIND} version {VERSION}, but kind {doc.get('kind')!r} version {doc.get('version')!r}"
            )
        groups = [
            ApplyGroup(
                str(g["group"]),
                str(g["target"]),
                [str(s) for s in g["sources"]],
                _unpairs(g["offsets"]),
                _unpairs(g["target_before"]),
                None if g.get("source_seen") is None else {str(c): _unpairs(o) for c, o in g["source_seen"].items()},
                g.get("refused"),
            )
            for g in doc["groups"]
        ]
        read = PlanDoc(str(doc["id"]), str(doc["from"]), str(doc.get("config") or ""), groups)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"--plan: {source} is not a failover plan file ({malformed(exc)})",
            hint="write one with `mirror failover plan (--from NAME | --flow F --group G) ... --out PLAN`",
        ) from None
    if plan_id(json.dumps({k: v for k, v in doc.items() if k != "id"})) != read.id:
        raise UnsafeOperation(
            f"--plan: {source} was changed after it was written (its id {read.id} is not the hash of its "
            "content); nothing was applied",
            hint="plan again (narrow it with --group or --to) instead of editing the file, review it, apply that",
        )
    return read


IDLE = ("EMPTY", "DEAD")  # group states without members


def active(state: str | None) -> bool:
    return state is not None and state not in IDLE


class State(str, Enum):
    TODO = "todo"  # every partition still where it was when planned
    PARTIAL = "partial"  # some partitions moved by an earlier run, the rest where they were
    DONE = "done"  # every partition at the plan's offset
    CHANGED = "changed"  # a partition neither where it was nor where the plan puts it


def classify(g: ApplyGroup, current: Mapping[Key, int]) -> tuple[State, list[Key]]:
    """The group's state on the target now, and the partitions that moved behind our back.

    Per partition: at the plan's offset is done (by us, earlier: never moved twice), at its
    planned-time offset (or still uncommitted if it had none) is to do, anything else is a
    commit since the plan, which the plan no longer accounts for.
    """
    done = todo = 0
    changed = []
    for key, offset in g.offsets.items():
        now = current.get(key)
        if now == offset:
            done += 1
        elif now == g.target_before.get(key):
            todo += 1
        else:
            changed.append(key)
    if changed:
        return State.CHANGED, sorted(changed)
    if todo == 0:
        return State.DONE, []
    return (State.PARTIAL if done else State.TODO), []


def source_moved(seen: Mapping[Key, int], current: Mapping[Key, int]) -> list[Key]:
    """Source partitions the group committed past since the plan (it kept consuming there)."""
    return sorted(k for k, o in seen.items() if current.get(k, o) != o)
