"""Which source ACLs a flow copies to its target, renamed, and what one sync round changes: pure, no I/O.

The copy follows the data and nothing more. A TOPIC ACL is copied when it names a mirrored
topic (LITERAL) or a prefix some mirrored topic starts with (PREFIXED), renamed as the flow
renames topics. A prefixed ACL is expanded to LITERAL ACLs on the mirrored topics it covers:
renamed, the prefix could cover target topics the flow does not mirror (the target's own, or
source topics another flow or none mirrors). A GROUP ACL is copied when the flow checkpoints
that group (its `groups:` patterns), or, prefixed, as LITERAL ACLs on the checkpointed groups
it covers; group names are never renamed. Only READ and DESCRIBE, ALLOW and DENY: before a
failover the target's mirror topics are written by the mirror alone, so WRITE and the rest
wait for `failover apply --promote` (`promotion_acls`).

The target never grants more than the source: a DENY that can override a copied ALLOW is
copied too, whatever `acl_filters` say: one on the operation, on ALL, or on the wildcard
name `*` (expanded to LITERAL DENYs on the mirrored topics and checkpointed groups). Other
wildcard names and MATCH/ANY patterns are never copied: they would reach past the mirrored
topics.

Ownership: the sync removes only ACLs it created itself. Its record of them (the offset
store's `acl_syncs`) is written *before* an ACL is created and taken back when the creation
fails, so a second worker of the flow that sees the ACL on the target also sees it claimed;
an ACL already on the target before the sync wanted it is someone else's and stays theirs
(never claimed, never removed). Kafka cannot tell identical bindings apart, so an ACL made by
hand that is identical to one the sync created is removed with it.
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

    def target_of(self, acl: Acl, operations: Collection[str] = SYNCED_OPERATIONS) -> list[Acl]:
        """The ACLs to hold on the target for a source ACL (none when it is not copied)."""
        if acl.permission not in ("allow", "deny") or acl.pattern not in ("literal", "prefixed"):
            return []
        if acl.permission == "deny":
            # A DENY is never filtered out: dropped, the ALLOW it overrides would grant more.
            if acl.operation not in (*operations, "All"):
                return []
        elif acl.operation not in operations or acl.name == WILDCARD or not self._passes(acl):
            return []
        if acl.kind == "topic":
            return self._topic(acl)
        if acl.kind == "group":
            return self._group(acl)
        return []

    def _topic(self, acl: Acl) -> list[Acl]:
        if acl.name == WILDCARD and acl.pattern == "literal":
            covered = sorted(self.topics)
        elif acl.pattern == "literal":
            covered = [acl.name] if acl.name in self.topics else []
        else:
            covered = sorted(t for t in self.topics if t.startswith(acl.name))
        return [acl.renamed(target_topic(t, self.source, self.rename), "literal") for t in covered]

    def _group(self, acl: Acl) -> list[Acl]:
        if acl.name == WILDCARD and acl.pattern == "literal":
            return [acl.renamed(g) for g in sorted(self.groups)]
        if acl.pattern == "literal":
            return [acl] if any(re.fullmatch(p, acl.name) for p in self.group_patterns) else []
        # As for topics: the prefix on the target could cover groups of the target's own.
        return [acl.renamed(g, "literal") for g in sorted(self.groups) if g.startswith(acl.name)]


def wanted_acls(scope: AclScope, source: Iterable[Acl]) -> dict[Acl, Acl]:
    """Target ACL -> the source ACL it copies, for every source ACL in the flow's scope."""
    out: dict[Acl, Acl] = {}
    for acl in sorted(source):
        for copied in scope.target_of(acl):
            out.setdefault(copied, acl)
    return out


@dataclass(frozen=True)
class AclPlan:
    """One sync round: claim and create the missing, remove and forget what the source lost."""

    create: tuple[Acl, ...] = ()  # wanted, not on the target: claim in the store, then create
    remove: tuple[Acl, ...] = ()  # claimed by the sync, no longer wanted: delete, then forget
    forget: tuple[Acl, ...] = ()  # claimed, no longer wanted and already gone (or another flow's too)
    in_sync: int = 0  # wanted ACLs present on the target (the sync's or someone else's)
    foreign: tuple[Acl, ...] = field(default=())  # wanted but made by someone else: left alone
    adopt: tuple[Acl, ...] = ()  # wanted, on the target and another flow's copy: claimed as shared

    @property
    def changes(self) -> int:
        return len(self.create) + len(self.remove)


def plan_sync(
    wanted: Collection[Acl], owned: Collection[Acl], on_target: Collection[Acl], shared: Collection[Acl] = ()
) -> AclPlan:
    """What makes the target hold `wanted`, touching only ACLs in `owned` (the sync's own record).

    `shared`: what the records of other flows into the same target claim. Such an ACL is a
    copy, not a hand-made one: a flow that wants it claims it too, and a flow that no longer
    wants it only forgets its claim while another flow still claims it."""
    wanted_set, owned_set, present, others = set(wanted), set(owned), set(on_target), set(shared)
    stale = sorted(owned_set - wanted_set)
    remove = tuple(a for a in stale if a in present and a not in others)
    # A literal copy a kept prefixed (or `*`) twin already grants is not made again.
    missing = [a for a in wanted_set - present if not covered(a, present - set(remove))]
    unowned = (wanted_set & present) - owned_set
    return AclPlan(
        create=tuple(sorted(missing)),
        remove=remove,
        forget=tuple(a for a in stale if a not in present or a in others),
        in_sync=len(wanted_set) - len(missing),
        foreign=tuple(sorted(unowned - others)),
        adopt=tuple(sorted(unowned & others)),
    )


def covered(acl: Acl, held: Collection[Acl]) -> bool:
    """Whether `held` grants (or denies) what `acl` does: the same binding, or one on a prefix
    of its name or on `*` for the same principal, host, operation and permission."""
    if acl in held:
        return True
    same = (acl.kind, acl.principal, acl.host, acl.operation, acl.permission)
    return any(
        (h.kind, h.principal, h.host, h.operation, h.permission) == same
        and (acl.name.startswith(h.name) if h.pattern == "prefixed" else h.name == WILDCARD)
        for h in held
        if h.pattern in ("prefixed", "literal")
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
    target topic), renamed as the topic was. A prefixed one, or a DENY on the wildcard `*`,
    becomes LITERAL ACLs on the moved topics it covers: renamed, a prefix could cover topics
    never moved. A DENY of ALL on a moved topic comes too, so it still overrides the WRITE.
    For the principals granted WRITE, also their WRITE/DESCRIBE on transactional ids and
    IDEMPOTENT_WRITE on the cluster, copied as they are (producers keep their ids)."""
    acls = [a for a in source if a.permission in ("allow", "deny") and a.pattern in ("literal", "prefixed")]
    out: set[Acl] = set()
    for acl in acls:
        if acl.kind == "topic" and _promotes(acl):
            out.update(_promoted_topic(acl, moved))
    producers = {a.principal for a in out if a.permission == "allow" and a.operation == "Write"}
    for acl in acls:
        if acl.principal not in producers:
            continue
        if (acl.kind == "transactional-id" and acl.operation in ("Write", "Describe")) or (
            acl.kind == "cluster" and acl.operation == "IdempotentWrite"
        ):
            out.add(acl)
    return sorted(out)


def _promotes(acl: Acl) -> bool:
    if acl.permission == "deny":
        return acl.operation in ("Write", "All")
    return acl.operation == "Write" and acl.name != WILDCARD


def _promoted_topic(acl: Acl, moved: Mapping[str, str]) -> list[Acl]:
    if acl.name == WILDCARD and acl.pattern == "literal":
        return [acl.renamed(dst) for dst in sorted(moved.values())]
    if acl.pattern == "literal":
        return [acl.renamed(moved[acl.name])] if acl.name in moved else []
    return [acl.renamed(dst, "literal") for src, dst in sorted(moved.items()) if src.startswith(acl.name)]


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
