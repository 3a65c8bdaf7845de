"""The target's ACLs follow the source's, every `sync_acls_interval` (flows with `sync_acls: true`).

A DR copy nobody may read is not a DR copy: without this, every consumer of a secured
cluster is refused on the target after a failover until someone recreates its grants. Which
ACLs are copied, and how they are renamed, is `mirror.domain.acl_sync`; this loop reads both
clusters' ACLs and the sync's own record in the offset store, and applies the plan.

Invariant: the sync deletes only ACLs its record names, and records an ACL before it creates
it. Two workers of one flow therefore agree on what is theirs (no ACL is created by one and
deleted by the other). A claim whose creation failed is taken back, and a claim is forgotten
only once the target no longer lists the ACL: a worker that re-created it meanwhile keeps it
recorded. An ACL another flow into the same target also claims is never deleted (its claim is
shared). One empty target listing while ACLs are expected there is not believed: the round is
skipped with a warning (a refused DescribeAcls can answer nothing).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from contextlib import ExitStack

from mirror.config import Config, FlowConfig
from mirror.domain.acl_sync import (
    Acl,
    AclDrift,
    AclFilter,
    AclPlan,
    AclScope,
    acl_drift,
    failback_topics,
    plan_sync,
    wanted_acls,
)
from mirror.domain.topics import match_topics
from mirror.errors import AuthorizationFailed, MirrorError
from mirror.kafka import Admin
from mirror.kafka.admin import FlowAdmins
from mirror.metrics import AclSyncMetrics
from mirror.store import FullOffsetStore, open_store
from mirror.store.base import checkpointed_groups

log = logging.getLogger(__name__)


class AclSyncer:
    """One flow's ACL sync: `plan()` to compare, `tick()` to apply once, `run(stop)` every interval."""

    def __init__(
        self,
        config: Config,
        flow: FlowConfig,
        store: FullOffsetStore,
        metrics: AclSyncMetrics | None = None,
        *,
        source: Admin | None = None,
        target: Admin | None = None,
    ) -> None:
        self.config = config
        self.flow = flow
        self.store = store
        self.metrics = metrics
        self.admins = FlowAdmins(config, flow, source=source, target=target)
        self._last_listing: int | None = None  # ACLs the target listed in the last round

    def scope(self, owned: Collection[Acl] = ()) -> AclScope:
        """The flow's scope; with `owned`, a topic deleted on the source whose copy (whose ACLs
        the sync copied) the target keeps stays in it: the one copy left stays readable."""
        listed = self.admins.source.topics()
        topics = {m.source for m in match_topics(self.config, self.flow, listed)}
        copied = {a.name for a in owned if a.kind == "topic" and a.pattern == "literal"}
        if copied:
            kept = copied & set(self.admins.target.topics())
            names = failback_topics(dict.fromkeys(kept, 1), self.flow.source, self.flow.rename)
            topics |= {m.source for m in match_topics(self.config, self.flow, names) if m.source not in listed}
        return AclScope(
            source=self.flow.source,
            rename=self.flow.rename,
            topics=sorted(topics),
            group_patterns=self.flow.groups,
            groups=checkpointed_groups(self.store, self.flow.name),
            filters=[AclFilter(f.principal, f.resource) for f in self.flow.acl_filters],
        )

    def plan(self, target_need: str = "Describe") -> AclPlan:
        """What one round would change (nothing is changed); `target_need`: the grant on the target
        to insist on (a round that will change ACLs needs Alter)."""
        owned = self._owned()
        scope, source = self.scope(owned), self.admins.source.describe_acls()
        return plan_sync(
            wanted_acls(scope, source), owned, self.admins.target.describe_acls(need=target_need), self._shared()
        )

    def _owned(self) -> set[Acl]:
        return {Acl.from_key(k) for k in self.store.synced_acls(self.flow.name)}

    def _shared(self) -> set[Acl]:
        """What the records of the other flows into the same target claim."""
        others = [f.name for f in self.config.flows if f.target == self.flow.target and f.name != self.flow.name]
        return {Acl.from_key(k) for name in others for k in self.store.synced_acls(name)}

    def drift(self) -> AclDrift:
        """What `mirror topics --check` reports: copies missing on the target, removals pending."""
        return acl_drift(self.plan())

    def tick(self) -> AclPlan:
        owned, shared = self._owned(), self._shared()
        scope, source = self.scope(owned), self.admins.source.describe_acls()  # the source first, as it always was
        on_target = self.admins.target.describe_acls(need="Alter")
        if self._suspect(on_target, owned or shared):
            return AclPlan()
        plan = plan_sync(wanted_acls(scope, source), owned, on_target, shared)
        name = self.flow.name
        if plan.adopt:
            self.store.claim_acls(name, [a.key() for a in plan.adopt])
        if plan.create:
            self._create(plan.create)
        forget = list(plan.forget)
        if plan.remove:
            self.admins.target.delete_bindings(plan.remove)
            log.info(
                "flow %s: removed %d ACLs from %s the source no longer has", name, len(plan.remove), self.flow.target
            )
            forget += self._absent(plan.remove)
        if forget:
            self.store.forget_acls(name, [a.key() for a in forget])
        self._last_listing = len(on_target) + len(plan.create) - len(plan.remove)  # what the target holds now
        if self.metrics is not None:
            self.metrics.observe(name, plan)
        return plan

    def _suspect(self, on_target: list[Acl], expected: Collection[Acl]) -> bool:
        """True for one empty listing of the target where ACLs were listed, or are recorded, before."""
        last, self._last_listing = self._last_listing, len(on_target)
        if on_target or last == 0 or not (expected or last):
            return False
        log.warning(
            "flow %s: %s listed no ACLs where %s are expected; round skipped, the next listing decides",
            self.flow.name,
            self.flow.target,
            len(expected) or last,
        )
        return True

    def _create(self, acls: tuple[Acl, ...]) -> None:
        keys = [a.key() for a in acls]
        self.store.claim_acls(self.flow.name, keys)  # claimed first: see the invariant
        try:
            self.admins.target.create_bindings(acls)
        except Exception:
            # Un-claimed, or a later hand-made twin would be taken for the sync's own.
            self.store.forget_acls(self.flow.name, [a.key() for a in self._absent(acls)])
            raise
        log.info("flow %s: copied %d ACLs to %s", self.flow.name, len(acls), self.flow.target)

    def _absent(self, acls: Collection[Acl]) -> list[Acl]:
        """Those of `acls` the target does not list now (none when it cannot be asked: the next
        round forgets a claim whose ACL is absent and no longer wanted)."""
        try:
            present = set(self.admins.target.describe_acls())
        except MirrorError:
            return []
        return [a for a in acls if a not in present]

    def run(self, stop: threading.Event) -> None:
        """Tick every `sync_acls_interval` until `stop` is set; a failure is one warning per
        interval (a missing grant named), never fatal: records keep flowing."""
        interval = self.flow.sync_acls_interval
        while True:
            self.safe_tick(interval)
            if stop.wait(interval):
                return

    def safe_tick(self, interval: float) -> None:
        try:
            self.tick()
        except AuthorizationFailed as exc:
            log.warning("flow %s: ACL sync refused (retrying in %gs): %s", self.flow.name, interval, exc)
            self._count("refused")
        except MirrorError as exc:
            log.warning("flow %s: ACL sync skipped (retrying in %gs): %s", self.flow.name, interval, exc)
            self._count("failed")
        except Exception:
            log.exception("flow %s: ACL sync failed unexpectedly", self.flow.name)
            self._count("failed")

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            counter = self.metrics.refused if outcome == "refused" else self.metrics.failures
            counter.labels(self.flow.name).inc()


def start_acl_sync(
    config: Config, flow: FlowConfig, stack: ExitStack, metrics: AclSyncMetrics | None = None
) -> AclSyncer | None:
    """The ACL sync of one flow beside an engine that runs no side loops of its own (the Spark
    driver): its store and thread are closed and stopped with `stack`. None without `sync_acls`."""
    if not flow.sync_acls:
        return None
    store = open_store(config.offset_store)
    stack.callback(store.close)
    syncer = AclSyncer(config, flow, store, metrics)
    stop = threading.Event()
    thread = threading.Thread(target=syncer.run, args=(stop,), name=f"aclsync-{flow.name}", daemon=True)
    thread.start()
    stack.callback(thread.join, 30)
    stack.callback(stop.set)
    return syncer
