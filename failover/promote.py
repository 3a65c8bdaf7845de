"""`failover apply --plan PLAN --promote`: the producers' grants follow their consumers.

`sync_acls` keeps READ/DESCRIBE copied ahead of time but never WRITE: before a failover the
target's mirror topics are written by the mirror alone. Promotion copies the source's WRITE
ACLs of the moved topics (and their principals' transactional-id and idempotence grants,
`mirror.domain.acl_sync.promotion_acls`) to the target, renamed as the topics are.

Only ACLs the target lacks are added, and they are recorded in the site backup before they
are created, so `failover import --backup` removes exactly those and never an ACL someone
else made (or the sync copied).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from failover.offsets_file import read_json, write_json
from failover.site import PlanDoc
from mirror.config import Config
from mirror.domain.acl_sync import Acl, promotion_acls
from mirror.domain.topics import match_topics
from mirror.kafka import Admin

PROMOTED = "promoted_acls"  # the site backup's key


@dataclass(frozen=True)
class Promotion:
    cluster: str  # where the ACL is added (a flow's target)
    acl: Acl

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "acl": self.acl.key()}


def plan_pairs(plan: PlanDoc) -> set[tuple[str, str]]:
    """(source, target) of every flow a site plan moves groups along."""
    return {(s, g.target) for g in plan.groups for s in g.sources}


def plan_promotions(
    config: Config, pairs: Collection[tuple[str, str]], admin: Callable[[str], Admin]
) -> list[Promotion]:
    """The ACLs to add, per target: for every flow from a source to a target of `pairs`, the
    promotion ACLs of its mirrored topics that the target does not hold yet."""
    wanted: dict[str, set[Acl]] = {}
    for flow in config.flows:
        if (flow.source, flow.target) not in pairs:
            continue
        src = admin(flow.source)
        moved = {m.source: m.target for m in match_topics(config, flow, src.topics())}
        wanted.setdefault(flow.target, set()).update(promotion_acls(src.describe_acls(), moved))
    out = []
    for cluster, acls in sorted(wanted.items()):
        present = set(admin(cluster).describe_acls(need="Alter"))
        out += [Promotion(cluster, a) for a in sorted(acls - present)]
    return out


def promote(backup: Path, promotions: Sequence[Promotion], admin: Callable[[str], Admin]) -> None:
    """Record `promotions` in the site backup, then create them (recorded first: an ACL created
    is always one `import --backup` knows to remove)."""
    if not promotions:
        return
    doc = read_json(backup, "--backup")
    known = {(p["cluster"], p["acl"]) for p in doc.get(PROMOTED, [])}
    doc[PROMOTED] = [
        *doc.get(PROMOTED, []),
        *(p.to_json() for p in promotions if (p.cluster, p.acl.key()) not in known),
    ]
    write_json(backup, doc, indent=None)
    for cluster in sorted({p.cluster for p in promotions}):
        admin(cluster).create_bindings([p.acl for p in promotions if p.cluster == cluster])


def recorded(doc: Any) -> list[Promotion]:
    """The promotions a site backup records (none in a backup written without --promote)."""
    rows = doc.get(PROMOTED, []) if isinstance(doc, dict) else []
    return [Promotion(str(r["cluster"]), Acl.from_key(r["acl"])) for r in rows]


def demote(promotions: Sequence[Promotion], admin: Callable[[str], Admin]) -> None:
    """Remove what a promotion added (deleting an ACL that is gone already is no error)."""
    for cluster in sorted({p.cluster for p in promotions}):
        admin(cluster).delete_bindings([p.acl for p in promotions if p.cluster == cluster])
