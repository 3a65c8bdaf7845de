"""The target's ACLs follow the source's, every `sync_acls_interval` (flows with `sync_acls: true`).

A DR copy nobody may read is not a DR copy: without this, every consumer of a secured
cluster is refused on the target after a failover until someone recreates its grants. Which
ACLs are copied, and how they are renamed, is `mirror.domain.acl_sync`; this loop reads both
clusters' ACLs and the sync's own record in the offset store, and applies the plan.

Invariant: the sync deletes only ACLs its record names, and records an ACL before it creates
it. Two workers of one flow therefore agree on what is theirs (no ACL is created by one and
deleted by the other), and an ACL made on the target by hand is never touched.
"""

from __future__ import annotations

import logging
import threading
from contextlib import ExitStack

from mirror.config import Config, FlowConfig
from mirror.domain.acl_sync import Acl, AclDrift, AclFilter, AclPlan, AclScope, acl_drift, plan_sync, wanted_acls
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

    def scope(self) -> AclScope:
        topics = [m.source for m in match_topics(self.config, self.flow, self.admins.source.topics())]
        return AclScope(
            source=self.flow.source,
            rename=self.flow.rename,
            topics=topics,
            group_patterns=self.flow.groups,
            groups=checkpointed_groups(self.store, self.flow.name),
            filters=[AclFilter(f.principal, f.resource) for f in self.flow.acl_filters],
        )

    def plan(self, target_need: str = "Describe") -> AclPlan:
        """What one round would change (nothing is changed); `target_need`: the grant on the target
        to insist on (a round that will change ACLs needs Alter)."""
        wanted = wanted_acls(self.scope(), self.admins.source.describe_acls())
        owned = {Acl.from_key(k) for k in self.store.synced_acls(self.flow.name)}
        return plan_sync(wanted, owned, self.admins.target.describe_acls(need=target_need))

    def drift(self) -> AclDrift:
        """What `mirror topics --check` reports: copies missing on the target, removals pending."""
        return acl_drift(self.plan())

    def tick(self) -> AclPlan:
        plan = self.plan(target_need="Alter")
        name = self.flow.name
        if plan.create:
            self.store.claim_acls(name, [a.key() for a in plan.create])  # claimed first: see the invariant
            self.admins.target.create_bindings(plan.create)
            log.info("flow %s: copied %d ACLs to %s", name, len(plan.create), self.flow.target)
        if plan.remove:
            self.admins.target.delete_bindings(plan.remove)
            log.info(
                "flow %s: removed %d ACLs from %s the source no longer has", name, len(plan.remove), self.flow.target
            )
        if plan.remove or plan.forget:
            self.store.forget_acls(name, [a.key() for a in (*plan.remove, *plan.forget)])
        if self.metrics is not None:
            self.metrics.observe(name, plan)
        return plan

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
