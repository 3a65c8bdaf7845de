"""`failover apply --plan PLAN --promote`: the producers' grants follow their consumers.

`sync_acls` keeps READ/DESCRIBE copied ahead of time but never WRITE: before a failover the
target's mirror topics are written by the mirror alone. Promotion copies the source's WRITE
ACLs of the moved topics (and their principals' transactional-id and idempotence grants,
`mirror.domain.acl_sync.promotion_acls`) to the target, renamed as the topics are.

Only ACLs the target lacks are added, and they are recorded in the site backup before they
are created (a creation that fails takes back the record of what the cluster does not hold),
so `failover import --backup` removes those and no ACL someone else made (or the sync copied)
before. Kafka cannot tell identical bindings apart: one made by hand after the promotion,
identical to a promoted one, goes with it.

`failback --promote` is the same in the other direction (`Direction.FAILBACK`): the DR
cluster's grants on the copies (`nyc.orders`) go back to the original source under the
source names (`orders`), recorded in a backup of failback's own that `failover import
--backup` undoes the same way. With `rename: identity` a DR-local topic cannot be told from a
copy by its name, so only the topics the original source lists are moved back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from failover.offsets_file import read_json, write_json
from failover.site import PlanDoc
from failover.siteapply import BACKUP_KIND, read_backup
from mirror.config import Config
from mirror.domain.acl_sync import Acl, covered, failback_topics, promotion_acls
from mirror.domain.flow import Flow
from mirror.domain.naming import RenamePolicy
from mirror.domain.topics import match_topics
from mirror.errors import MirrorError, UsageError
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
        if direction is Direction.FAILBACK and flow.rename is RenamePolicy.IDENTITY:
            # The name proves nothing: only what the original source holds was mirrored from it.
            held = admin(flow.source).topics()
            moved = {dr: src for dr, src in moved.items() if src in held}
        wanted.setdefault(goes, set()).update(promotion_acls(admin(came).describe_acls(), moved))
    out = []
    for cluster, acls in sorted(wanted.items()):
        present = set(admin(cluster).describe_acls(need="Alter"))
        out += [Promotion(cluster, a) for a in sorted(acls - present) if not covered(a, present)]
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
    is always one `import --backup` knows to remove; a failed creation takes back the record
    of what the cluster does not hold)."""
    if not promotions:
        return
    doc = read_json(backup, "--backup")
    known = {(p["cluster"], p["acl"]) for p in doc.get(PROMOTED, [])}
    added = [p for p in promotions if (p.cluster, p.acl.key()) not in known]
    doc[PROMOTED] = [*doc.get(PROMOTED, []), *(p.to_json() for p in added)]
    write_json(backup, doc, indent=None)
    for cluster in sorted({p.cluster for p in promotions}):
        try:
            admin(cluster).create_bindings([p.acl for p in promotions if p.cluster == cluster])
        except Exception:
            _unrecord_absent(backup, [p for p in added if p.cluster == cluster], admin(cluster))
            raise


def _unrecord_absent(backup: Path, added: Sequence[Promotion], cluster: Admin) -> None:
    """Take out of the backup what this run recorded and `cluster` does not hold (all of it
    stays recorded when the cluster cannot be asked: removing a missing ACL is no error)."""
    try:
        present = set(cluster.describe_acls())
    except MirrorError:
        return
    absent = {(p.cluster, p.acl.key()) for p in added if p.acl not in present}
    doc = read_json(backup, "--backup")
    doc[PROMOTED] = [r for r in doc.get(PROMOTED, []) if (r["cluster"], r["acl"]) not in absent]
    write_json(backup, doc, indent=None)


def recorded(doc: Any, where: str = "--backup") -> list[Promotion]:
    """The promotions a site backup records (none in a backup written without --promote); a
    usage error naming `where` for an entry that is not one."""
    rows = doc.get(PROMOTED, []) if isinstance(doc, dict) else []
    if not isinstance(rows, list):
        raise UsageError(f"{where}: {PROMOTED} is not a list")
    out = []
    for i, row in enumerate(rows):
        try:
            out.append(Promotion(str(row["cluster"]), Acl.from_key(row["acl"])))
        except (KeyError, TypeError, ValueError):
            raise UsageError(f"{where}: {PROMOTED}[{i}] is not a promoted ACL: {json.dumps(row)[:200]}") from None
    return out


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
