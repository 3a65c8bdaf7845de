"""`failover apply --plan PLAN --promote`: the producers' grants follow their consumers.

`sync_acls` keeps READ/DESCRIBE copied ahead of time but never WRITE: before a failover the
target's mirror topics are written by the mirror alone. Promotion copies the source's WRITE
ACLs of the moved topics (and their principals' transactional-id and idempotence grants,
`mirror.domain.acl_sync.promotion_acls`) to the target, renamed as the topics are.

Only ACLs the target lacks are added, and they are recorded in the site backup before they
are created, so `failover import --backup` removes exactly those and never an ACL someone
else made (or the sync copied).

`failback --promote` is the same in the other direction (`Direction.FAILBACK`): the DR
cluster's grants on the copies (`nyc.orders`) go back to the original source under the
source names (`orders`), recorded in a backup of failback's own that `failover import
--backup` undoes the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from failover.offsets_file import read_json, write_json
from failover.site import PlanDoc
from failover.siteapply import BACKUP_KIND, read_backup
from mirror.config import Config
from mirror.domain.acl_sync import Acl, failback_topics, promotion_acls
from mirror.domain.flow import Flow
from mirror.domain.topics import match_topics
from mirror.kafka import Admin

PROMOTED = "promoted_acls"  # the site backup's key


class Direction(Enum):
    FAILOVER = "failover"  # the source's grants onto the flow's target, renamed as mirrored
    FAILBACK = "failback"  # the DR copies' grants back onto the source, under the source names


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
    config: Config,
    pairs: Collection[tuple[str, str]],
    admin: Callable[[str], Admin],
    direction: Direction = Direction.FAILOVER,
) -> list[Promotion]:
    """The ACLs to add: for every flow from a source to a target of `pairs`, the promotion
    ACLs of its mirrored topics that the cluster they move to (the target; the source at
    failback) does not hold yet."""
    wanted: dict[str, set[Acl]] = {}
    for flow in config.flows:
        if (flow.source, flow.target) not in pairs:
            continue
        came, goes = (flow.source, flow.target) if direction is Direction.FAILOVER else (flow.target, flow.source)
        moved = _moved(config, flow, admin(came).topics(), direction)
        wanted.setdefault(goes, set()).update(promotion_acls(admin(came).describe_acls(), moved))
    out = []
    for cluster, acls in sorted(wanted.items()):
        present = set(admin(cluster).describe_acls(need="Alter"))
        out += [Promotion(cluster, a) for a in sorted(acls - present)]
    return out


def _moved(config: Config, flow: Flow, listed: dict[str, int], direction: Direction) -> dict[str, str]:
    """Topic on the cluster the grants come from -> its name where they go. At failback the
    DR cluster's topics are named back (`failback_topics`) and chosen by the flow's own rules,
    so the old primary need not hold the topics (nor answer) for its grants to be planned."""
    if direction is Direction.FAILOVER:
        return {m.source: m.target for m in match_topics(config, flow, listed)}
    back = match_topics(config, flow, failback_topics(listed, flow.source, flow.rename))
    return {m.target: m.source for m in back if m.target in listed}


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


def start_backup(path: Path, config_path: str, now_ms: int) -> None:
    """Start failback's backup unless an earlier run did: a site backup of no groups, so
    `failover import --backup` takes it and removes the ACLs it records (`promote` appends)."""
    if path.exists():
        read_backup(path)  # refuses a plan or a file that is no backup
        return
    write_json(
        path,
        {"version": 1, "kind": BACKUP_KIND, "plan_id": None, "config": config_path, "time_ms": now_ms, "groups": []},
        indent=None,
    )
