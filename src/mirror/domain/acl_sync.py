"""Which source ACLs a flow copies to its target, renamed, and what one sync round changes: pure, no I/O.

The copy follows the data and nothing more. A TOPIC ACL is copied when it names a mirrored
topic (LITERAL) or a prefix some mirrored topic starts with (PREFIXED), renamed as the flow
renames topics: a prefixed ACL on `orders.` becomes one on `nyc.orders.`. A GROUP ACL is
copied when the flow checkpoints that group (its `groups:` patterns), or, prefixed, when a
checkpointed group starts with the prefix; group names are never renamed. Only READ and
DESCRIBE, ALLOW and DENY: before a failover the target's mirror topics are written by the
mirror alone, so WRITE and the rest wait for `failover apply --promote`
(`promotion_acls`). Wildcard names (`*`) and MATCH/ANY patterns are never copied: they
would reach past the mirrored topics.

Ownership: the sync removes only ACLs it created itself. Its record of them (the offset
store's `acl_syncs`) is written *before* an ACL is created, so a second worker of the flow
that sees the ACL on the target also sees it claimed, and never mistakes it for a hand-made
one; an ACL already on the target before the sync wanted it is someone else's and stays
theirs (never claimed, never removed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from mirror.domain.naming import SEPARATOR, RenamePolicy, source_topic, target_topic

SYNCED_OPERATIONS = frozenset({"Read", "Describe"})
WILDCARD = "*"


@dataclass(frozen=True, order=True)
class Acl:
    """One ACL binding, in Kafka's terms: kind topic | group | transactional-id | cluster,
    pattern literal | prefixed, operation as Kafka names it (Read, Describe, Write, ...),
    permission allow | deny."""

    kind: str
    name: str
    pattern: str
    principal: str
    host: str
    operation: str
    permission: str

    def key(self) -> str:
        """A stable text form (the offset store keeps these)."""
        return json.dumps(
            [self.kind, self.name, self.pattern, self.principal, self.host, self.operation, self.permission]
        )

    @classmethod
    def from_key(cls, key: str) -> Acl:
        kind, name, pattern, principal, host, operation, permission = json.loads(key)
        return cls(kind, name, pattern, principal, host, operation, permission)

    def renamed(self, name: str, pattern: str | None = None) -> Acl:
        return Acl(self.kind, name, pattern or self.pattern, self.principal, self.host, self.operation, self.permission)

    def describe(self) -> str:
        return (
            f"{self.permission.upper()} {self.principal} {self.operation} on {self.kind} "
            f"{self.pattern} {self.name!r} from {self.host}"
        )


@dataclass(frozen=True)
class AclFilter:
    """`acl_filters:` entry: full-match regexes over the principal and the source resource name."""

    principal: str = ".*"
    resource: str = ".*"

    def matches(self, acl: Acl) -> bool:
        return bool(re.fullmatch(self.principal, acl.principal) and re.fullmatch(self.resource, acl.name))


@dataclass(frozen=True)
class AclScope:
    """What a flow's ACLs are chosen by: its rename policy, mirrored topics and checkpointed groups."""

    source: str
    rename: RenamePolicy
    topics: Collection[str]  # mirrored source topic names
    group_patterns: Sequence[str]  # the flow's `groups:` regexes
    groups: Collection[str] = ()  # groups the flow checkpoints (for prefixed group ACLs)
    filters: Sequence[AclFilter] = ()  # none: every ACL in scope

    def _passes(self, acl: Acl) -> bool:
        return not self.filters or any(f.matches(acl) for f in self.filters)

    def target_of(self, acl: Acl, operations: Collection[str] = SYNCED_OPERATIONS) -> Acl | None:
        """The ACL to hold on the target for a source ACL, or None when it is not copied."""
        if acl.operation not in operations or acl.permission not in ("allow", "deny"):
            return None
        if acl.pattern not in ("literal", "prefixed") or acl.name == WILDCARD or not self._passes(acl):
            return None
        if acl.kind == "topic":
            return self._topic(acl)
        if acl.kind == "group":
            return self._group(acl)
        return None

    def _topic(self, acl: Acl) -> Acl | None:
        if acl.pattern == "literal":
            return acl.renamed(target_topic(acl.name, self.source, self.rename)) if acl.name in self.topics else None
        if not any(t.startswith(acl.name) for t in self.topics):
            return None
        # Prefixing the prefix covers exactly the renamed topics the source prefix covered.
        return acl.renamed(target_topic(acl.name, self.source, self.rename))

    def _group(self, acl: Acl) -> Acl | None:
        if acl.pattern == "literal":
            return acl if any(re.fullmatch(p, acl.name) for p in self.group_patterns) else None
        return acl if any(g.startswith(acl.name) for g in self.groups) else None


def wanted_acls(scope: AclScope, source: Iterable[Acl]) -> dict[Acl, Acl]:
    """Target ACL -> the source ACL it copies, for every source ACL in the flow's scope."""
    out: dict[Acl, Acl] = {}
    for acl in sorted(source):
        copied = scope.target_of(acl)
        if copied is not None:
            out.setdefault(copied, acl)
    return out


@dataclass(frozen=True)
class AclPlan:
    """One sync round: claim and create the missing, remove and forget what the source lost."""

    create: tuple[Acl, ...] = ()  # wanted, not on the target: claim in the store, then create
    remove: tuple[Acl, ...] = ()  # claimed by the sync, no longer wanted: delete, then forget
    forget: tuple[Acl, ...] = ()  # claimed, no longer wanted and already gone from the target
    in_sync: int = 0  # wanted ACLs present on the target (the sync's or someone else's)
    foreign: tuple[Acl, ...] = field(default=())  # wanted but made by someone else: left alone

    @property
    def changes(self) -> int:
        return len(self.create) + len(self.remove)


def plan_sync(wanted: Collection[Acl], owned: Collection[Acl], on_target: Collection[Acl]) -> AclPlan:
    """What makes the target hold `wanted`, touching only ACLs in `owned` (the sync's own record)."""
    wanted_set, owned_set, present = set(wanted), set(owned), set(on_target)
    create = sorted(wanted_set - present)
    stale = sorted(owned_set - wanted_set)
    return AclPlan(
        create=tuple(create),
        remove=tuple(a for a in stale if a in present),
        forget=tuple(a for a in stale if a not in present),
        in_sync=len(wanted_set & present),
        foreign=tuple(sorted((wanted_set & present) - owned_set)),
    )


@dataclass(frozen=True)
class AclDrift:
    """What `mirror topics --check` reports of a flow's ACLs: copies missing, removals pending."""

    missing: tuple[Acl, ...]
    stale: tuple[Acl, ...]

    def lines(self) -> list[str]:
        return [f"ACL missing on the target: {a.describe()}" for a in self.missing] + [
            f"ACL the source no longer has, still on the target: {a.describe()}" for a in self.stale
        ]


def acl_drift(plan: AclPlan) -> AclDrift:
    return AclDrift(plan.create, plan.remove)


def promotion_acls(source: Iterable[Acl], moved: Mapping[str, str]) -> list[Acl]:
    """The producer-side ACLs `failover apply --promote` adds on the target (and `failback
    --promote` on the original source: then `source` is the DR cluster's ACLs and `moved`
    the inverse rename).

    The source's WRITE ACLs (ALLOW and DENY) on the moved topics (`moved`: source topic ->
    target topic), renamed as the topic was; a prefixed one when its prefix covers a moved
    topic. For the principals these name, also their WRITE/DESCRIBE on transactional ids and
    IDEMPOTENT_WRITE on the cluster, copied as they are (producers keep their ids): what a
    transactional or idempotent producer needs besides the topic."""
    acls = [a for a in source if a.permission in ("allow", "deny") and a.pattern in ("literal", "prefixed")]
    out: set[Acl] = set()
    for acl in acls:
        if acl.kind == "topic" and acl.operation == "Write" and acl.name != WILDCARD:
            out.update(_promoted_topic(acl, moved))
    producers = {a.principal for a in out}
    for acl in acls:
        if acl.principal not in producers:
            continue
        if (acl.kind == "transactional-id" and acl.operation in ("Write", "Describe")) or (
            acl.kind == "cluster" and acl.operation == "IdempotentWrite"
        ):
            out.add(acl)
    return sorted(out)


def _promoted_topic(acl: Acl, moved: Mapping[str, str]) -> list[Acl]:
    if acl.pattern == "literal":
        return [acl.renamed(moved[acl.name])] if acl.name in moved else []
    out = []
    for src, dst in moved.items():
        if src.startswith(acl.name) and (prefix := renamed_prefix(acl.name, src, dst)) is not None:
            out.append(acl.renamed(prefix))
    return out


def renamed_prefix(prefix: str, src: str, dst: str) -> str | None:
    """A prefix covering topic `src`, renamed as `src` is renamed to `dst`, or None when no
    prefix covers the same names there.

    Either way round: adding the flow's prefix (`orders` -> `nyc.orders`: `ord` -> `nyc.ord`)
    or taking it away at failback (`nyc.orders` -> `orders`: `nyc.ord` -> `ord`). A prefix no
    longer than the part taken away (`nyc.`, `ny`) would cover every topic of the other
    cluster once renamed, so it has no counterpart."""
    if dst.endswith(src):
        return dst[: len(dst) - len(src)] + prefix
    if not src.endswith(dst):
        return None
    cut = len(src) - len(dst)
    return prefix[cut:] if len(prefix) > cut and prefix.startswith(src[:cut]) else None


def failback_topics(dr_topics: Mapping[str, int], source: str, policy: RenamePolicy) -> dict[str, int]:
    """The source names the DR cluster's topics were mirrored from (the inverse of the flow's
    rename: `nyc.orders` -> `orders`), name -> partitions. A topic whose name cannot have come
    from `source` (no `nyc.` under the prefix policy) is left out."""
    out = {}
    for name, partitions in dr_topics.items():
        if policy is RenamePolicy.PREFIX and not name.startswith(f"{source}{SEPARATOR}"):
            continue
        out[source_topic(name, source, policy)] = partitions
    return out
