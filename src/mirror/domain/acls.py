"""The least privilege each command needs, per cluster, as Kafka ACLs: pure, no I/O.

Kafka ACLs name resources literally or by prefix, never by regex, so a flow's patterns are
turned into the narrowest resource covering them: `orders` literal, `orders\\..*` prefixed
`orders.`, anything else the longest literal prefix before the first regex operator
(broader than the pattern: noted in `why`), `*` when there is none. Exclude patterns cannot
narrow a grant.

Operations follow Kafka's authorization of each request (KIP-11 and the protocol guide):
Metadata, ListOffsets and OffsetFetch need Describe on the topic; Fetch needs Read; Produce
needs Write (and since Kafka 3.0, KIP-679, Write on any topic is all an idempotent producer
needs: IdempotentWrite on the cluster only matters to older brokers); JoinGroup and
OffsetCommit need Read on the group; OffsetFetch and DescribeGroups need Describe on it;
DescribeConfigs/AlterConfigs, CreateTopics (Create), CreatePartitions (Alter),
DeleteRecords and DeleteGroups (Delete) what their names say. ListGroups needs nothing: it
lists the groups the principal may Describe. A transactional producer (exactly_once) needs
Write on its transactional.id (InitProducerId, AddPartitionsToTxn, EndTxn; FindCoordinator
needs Describe); the offsets it commits in its transactions need Read on the group
(AddOffsetsToTxn, TxnOffsetCommit) and Read on their topics (TxnOffsetCommit).

An operation Kafka implies from another on the same resource is not listed: Read, Write,
Delete and Alter each imply Describe, AlterConfigs implies DescribeConfigs (Kafka's
AclEntry.supportedOperations / the authorizer's implicit allows). Every listed grant is
then one whose removal alone a command notices (tests/integration/test_security.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mirror.domain.flow import Flow, Topology
from mirror.domain.naming import SEPARATOR, RenamePolicy

# Groups whose names the project makes up itself (assign-only consumers, nothing committed).
READER_GROUP_PREFIX = "mirror-reader-"  # mirror.kafka.reader.PartitionReader


def transactional_id_prefix(flow: str) -> str:
    """What every transactional.id of a flow's exactly-once writers starts with: a new id per
    worker incarnation (`mirror.kafka.progress.new_writer_id`) or per Spark source partition
    (`mirror.spark.exactly_once.writer_id`), so ACLs can only name them by this prefix."""
    return f"mirror.{flow}."


COMMANDS = (
    "validate",
    "topics",
    "run",
    "lag",
    "canary",
    "failover plan",
    "failover apply",
    "failover apply --promote",
    "failover export",
    "failover import",
    "failback",
    "failback --promote",
    "failover plan --from",
    "failover apply --plan",
    "failover import --backup",
    "failback --from",
    "drill",
)

_REGEX_CHARS = set(".^$*+?{}[]\\|()")

# Operation -> the operations that imply it on the same resource (Kafka's authorizer).
IMPLIED_BY = {"Describe": ("Read", "Write", "Delete", "Alter"), "DescribeConfigs": ("AlterConfigs",)}


def minimal_operations(ops: Iterable[str]) -> tuple[str, ...]:
    """`ops` in order, without duplicates and without those another of them implies."""
    unique = tuple(dict.fromkeys(ops))
    return tuple(op for op in unique if not any(o in unique for o in IMPLIED_BY.get(op, ())))


@dataclass(frozen=True, order=True)
class Resource:
    kind: str  # topic | group | cluster | transactional-id
    name: str
    pattern: str = "literal"  # literal | prefixed

    def args(self) -> list[str]:
        if self.kind == "cluster":
            return ["--cluster"]
        out = [f"--{self.kind}", self.name]
        if self.pattern != "literal":
            out += ["--resource-pattern-type", self.pattern]
        return out


@dataclass(frozen=True)
class Grant:
    """Allow `operations` on `resource` to the principal on `cluster`, for `command`."""

    command: str
    cluster: str
    resource: Resource
    operations: tuple[str, ...]
    why: str

    def kafka_acls_args(self, principal: str) -> list[str]:
        ops = [a for op in self.operations for a in ("--operation", op)]
        return ["--add", "--allow-principal", principal, *ops, *self.resource.args()]


CLUSTER = Resource("cluster", "kafka-cluster")


def resource_for(kind: str, regex: str) -> tuple[Resource, bool]:
    """The narrowest literal or prefixed resource covering a full-match regex; True when exact."""
    if not any(c in _REGEX_CHARS for c in regex):
        return Resource(kind, regex), True
    m = re.fullmatch(r"((?:[^.^$*+?{}\[\]\\|()]|\\\.)*)\.\*", regex)
    if m:
        return Resource(kind, m.group(1).replace("\\.", "."), "prefixed") if m.group(1) else Resource(kind, "*"), True
    prefix = ""
    i = 0
    while i < len(regex):
        c = regex[i]
        if c == "\\" and i + 1 < len(regex) and regex[i + 1] == ".":
            prefix, i = prefix + ".", i + 2
            continue
        if c in _REGEX_CHARS:
            break
        prefix, i = prefix + c, i + 1
    # A quantifier applies to the character before it: that one is not certain either.
    if i < len(regex) and regex[i] in "*?{" and prefix:
        prefix = prefix[:-1]
    if "|" in regex:
        prefix = ""  # alternatives: no common literal start is known without parsing
    return (Resource(kind, prefix, "prefixed") if prefix else Resource(kind, "*")), False


def visibility_probes(patterns: Iterable[str], listed: Iterable[str]) -> dict[str, str]:
    """Topic names to ask for by name, for the include patterns no listed topic matches.

    Kafka lists only the topics a principal may Describe, and asked for a name it may not
    Describe answers "not authorized" whether the topic exists or not: a literal pattern is
    asked for itself, a regex for its literal prefix (what the ACL `mirror acls` lists
    covers). Returns pattern -> the name to ask for; a pattern with no prefix is left out.
    """
    names = list(listed)
    out = {}
    for p in patterns:
        res, _ = resource_for("topic", p)
        if res.name == "*" or any(re.fullmatch(p, n) for n in names):
            continue
        out[p] = res.name
    return out


def _renamed(res: Resource, source: str, policy: RenamePolicy) -> Resource:
    if policy is not RenamePolicy.PREFIX:
        return res
    if res.name == "*":
        return Resource(res.kind, f"{source}{SEPARATOR}", "prefixed")
    return Resource(res.kind, f"{source}{SEPARATOR}{res.name}", res.pattern)


def _topics(flow: Flow) -> list[tuple[Resource, bool]]:
    return [resource_for("topic", p) for p in flow.topics.include]


def _groups(flow: Flow) -> list[tuple[Resource, bool]]:
    return [resource_for("group", p) for p in flow.groups]


def _note(exact: bool, what: str) -> str:
    return what if exact else f"{what} (broader than the regex: ACLs take only literal names and prefixes)"


_Add = Callable[[str, str, Resource, Iterable[str], str], None]  # (command, cluster, resource, operations, why)


@dataclass(frozen=True)
class _FlowResources:
    """The resources one flow touches, named on the cluster where each lives."""

    s: str  # source cluster
    t: str  # target cluster
    src_topics: list[tuple[Resource, bool]]  # (resource, exact): as the include patterns name them
    dst_topics: list[tuple[Resource, bool]]  # the same, as named on the target
    groups: list[tuple[Resource, bool]]  # the flow's checkpointed groups
    mirror_group: Resource
    canary_src: Resource
    canary_dst: Resource
    reader: Resource  # assign-only readers' group prefix (they commit nothing)


def flow_grants(config: Topology, flow: Flow) -> list[Grant]:
    """Every grant each command needs for one flow."""
    s = flow.source
    src_topics = _topics(flow)
    canary_src = Resource("topic", config.canary.topic)
    res = _FlowResources(
        s=s,
        t=flow.target,
        src_topics=src_topics,
        dst_topics=[(_renamed(r, s, flow.rename), exact) for r, exact in src_topics],
        groups=_groups(flow),
        mirror_group=Resource("group", flow.group_id),
        canary_src=canary_src,
        canary_dst=_renamed(canary_src, s, flow.rename),
        reader=Resource("group", READER_GROUP_PREFIX, "prefixed"),
    )
    out: list[Grant] = []

    def add(command: str, cluster: str, resource: Resource, ops: Iterable[str], why: str) -> None:
        out.append(Grant(command, cluster, resource, minimal_operations(ops), why))

    for commands in (
        _listing_grants,
        _run_grants,
        _monitoring_grants,
        _failover_grants,
        _site_grants,
        _failback_grants,
        _drill_grants,
    ):
        commands(flow, res, add)
    return out


def _listing_grants(flow: Flow, fr: _FlowResources, add: _Add) -> None:
    """validate and topics: list the topics and read their configs."""
    for r, exact in fr.src_topics:
        add("validate", fr.s, r, ["Describe"], _note(exact, "list the matching source topics"))
        add("topics", fr.s, r, ["Describe", "DescribeConfigs"], _note(exact, "source topics and their configs"))
    for r, exact in fr.dst_topics:
        add("topics", fr.t, r, ["Describe", "DescribeConfigs"], _note(exact, "target topics and their configs"))
    if flow.sync_acls:
        add("topics", fr.s, CLUSTER, ["Describe"], "sync_acls: the source's ACLs (ACL drift)")
        add("topics", fr.t, CLUSTER, ["Describe"], "sync_acls: the target's ACLs (ACL drift)")


def _run_grants(flow: Flow, fr: _FlowResources, add: _Add) -> None:
    """run: read the source, write the target, checkpoint the groups."""
    s, t = fr.s, fr.t
    for r, exact in [*fr.src_topics, (fr.canary_src, True)]:
        add(
            "run",
            s,
            r,
            ["Describe", "Read", "DescribeConfigs"],
            _note(exact, "read the source topics, their offsets and max.message.bytes"),
        )
    # No Create on the canary topic: `mirror canary` makes it; run only tries to, to route it sooner.
    add("run", s, fr.mirror_group, ["Read"], "the mirror's consumer group: join, commit, read back")
    for r, exact in fr.groups:
        add("run", s, r, ["Describe"], _note(exact, "read the checkpointed groups' offsets"))
    tgt_ops = ["Create", "Describe", "Write", "DescribeConfigs", "Alter", "Delete"]
    if flow.sync_topic_configs:
        tgt_ops.insert(4, "AlterConfigs")
    for r, exact in [*fr.dst_topics, (fr.canary_dst, True)]:
        add(
            "run",
            t,
            r,
            tgt_ops,
            _note(exact, "create, grow, configure and write the target topics; empty a recreated one"),
        )
    if flow.sync_group_offsets:
        for r, exact in fr.groups:
            add("run", t, r, ["Read"], _note(exact, "sync_group_offsets: commit translated offsets for idle groups"))
        for r, exact in fr.dst_topics:
            add("run", t, r, ["Read"], _note(exact, "sync_group_offsets: an offset commit needs Read on the topic"))
    if flow.sync_topic_deletes:
        for r, exact in fr.dst_topics:
            add("run", t, r, ["Read"], _note(exact, "sync_topic_deletes: read a copy's first and last records first"))
    if flow.exactly_once:
        _exactly_once_grants(flow, fr, add)
    if flow.sync_acls:
        _acl_grants("run", "sync_acls", fr, add)


def _acl_grants(command: str, why: str, fr: _FlowResources, add: _Add) -> None:
    """sync_acls and failover promotion: read the source's ACLs, create and delete the target's.
    DescribeAcls needs Describe on the cluster; CreateAcls and DeleteAcls need Alter on it
    (which implies the Describe the target's own listing needs)."""
    add(command, fr.s, CLUSTER, ["Describe"], f"{why}: read the source's ACLs")
    add(command, fr.t, CLUSTER, ["Alter"], f"{why}: list, create and delete the copies on the target")


def _exactly_once_grants(flow: Flow, fr: _FlowResources, add: _Add) -> None:
    """run with exactly_once: transactions on the target, each committing the copy's progress."""
    t = fr.t
    txn_ids = Resource("transactional-id", transactional_id_prefix(flow.name), "prefixed")
    add("run", t, txn_ids, ["Describe", "Write"], "exactly_once: the transactional producers (a new id per worker)")
    progress = Resource("group", flow.progress_group)
    add("run", t, progress, ["Describe", "Read"], "exactly_once: the progress committed in each transaction")
    for r, exact in [*fr.dst_topics, (fr.canary_dst, True)]:
        add("run", t, r, ["Read"], _note(exact, "exactly_once: a transaction's offset commit needs Read on the topic"))


def _monitoring_grants(flow: Flow, fr: _FlowResources, add: _Add) -> None:
    """lag and monitor: offsets and groups on both sides, first records on the source;
    canary: probes into the source's canary topic, read back on the target."""
    s, t = fr.s, fr.t
    for r, exact in fr.src_topics:
        add("lag", s, r, ["Describe", "Read"], _note(exact, "end offsets; the oldest unmirrored record's time"))
    add("lag", s, fr.mirror_group, ["Describe"], "the mirror's committed positions")
    add("lag", s, fr.reader, ["Describe"], "the assign-only reader of first records: its coordinator (commits nothing)")
    for r, exact in fr.dst_topics:
        add("lag", t, r, ["Describe"], _note(exact, "target end offsets"))
    for r, exact in fr.groups:
        add("lag", s, r, ["Describe"], _note(exact, "the groups' positions on the source"))
        add("lag", t, r, ["Describe"], _note(exact, "the groups' positions on the target"))

    add("canary", s, fr.canary_src, ["Create", "Describe", "Write"], "create the canary topic and produce probes")
    add("canary", t, fr.canary_dst, ["Describe", "Read"], "read the mirrored probes")
    add("canary", t, fr.reader, ["Describe"], "the assign-only probe reader: its coordinator (commits nothing)")


def _failover_grants(flow: Flow, fr: _FlowResources, add: _Add) -> None:
    """failover: plan reads; apply writes the group's offsets on the target; export/import
    run against one cluster, either side of the flow."""
    s, t = fr.s, fr.t
    for command in ("failover plan", "failover apply"):
        add(command, s, fr.mirror_group, ["Describe"], "how far the mirror got")
        for r, exact in fr.src_topics:
            add(command, s, r, ["Describe"], _note(exact, "source offsets"))
        for r, exact in fr.groups:
            add(command, s, r, ["Describe"], _note(exact, "the group's positions on the source"))
            if command == "failover apply":  # plan never asks the target about the group
                add(command, t, r, ["Read"], _note(exact, "set the group's offsets on the target"))
        for r, exact in fr.dst_topics:
            add(
                command,
                t,
                r,
                ["Describe", "Read"],
                _note(exact, "target offsets; --at counts records at the boundary millisecond"),
            )
        # --at's boundary reader (failover.gather.count_boundary) assigns explicit offsets
        # and commits nothing: no group ACL (test_failover_plan_without_one_grant).
    if flow.sync_acls:  # a flow that manages ACLs lists what moving its producers' grants needs
        _acl_grants("failover apply --promote", "--promote", fr, add)
    for cluster, topics in ((s, fr.src_topics), (t, fr.dst_topics)):
        for r, exact in fr.groups:
            add("failover export", cluster, r, ["Describe"], _note(exact, "the group's committed offsets"))
            add(
                "failover import",
                cluster,
                r,
                ["Describe", "Read", "Delete"],
                _note(exact, "replace the group's offsets"),
            )
        for r, exact in topics:
            add("failover export", cluster, r, ["Describe"], _note(exact, "offsets of the group's topics"))
            add(
                "failover import",
                cluster,
                r,
                ["Describe", "Read"],
                _note(exact, "an offset commit needs Read on the topic"),
            )


def _site_grants(flow: Flow, fr: _FlowResources, add: _Add) -> None:
    """A whole site: the same per flow, and the groups on both sides, which the plan records
    (their state, the target's commits) and apply checks again before it writes."""
    s, t = fr.s, fr.t
    add("failover plan --from", s, fr.mirror_group, ["Describe"], "how far the mirror got")
    for r, exact in fr.src_topics:
        add("failover plan --from", s, r, ["Describe"], _note(exact, "source offsets"))
        add(
            "failover apply --plan",
            s,
            r,
            ["Describe"],
            _note(exact, "the groups' source offsets again: moved since the plan?"),
        )
    for r, exact in fr.groups:
        add(
            "failover plan --from",
            s,
            r,
            ["Describe"],
            _note(exact, "list the groups, their positions and states on the source"),
        )
        add("failover plan --from", t, r, ["Describe"], _note(exact, "the groups' states and commits on the target"))
        add(
            "failover apply --plan",
            s,
            r,
            ["Describe"],
            _note(exact, "the groups' states and offsets on the source again"),
        )
        add(
            "failover apply --plan",
            t,
            r,
            ["Read"],
            _note(exact, "back the groups up and set their offsets on the target"),
        )
        add(
            "failover import --backup",
            t,
            r,
            ["Describe", "Read", "Delete"],
            _note(exact, "replace the groups' offsets"),
        )
    for r, exact in fr.dst_topics:
        add(
            "failover plan --from",
            t,
            r,
            ["Describe", "Read"],
            _note(exact, "target offsets; --at counts records at the boundary millisecond"),
        )
        add("failover apply --plan", t, r, ["Read"], _note(exact, "an offset commit needs Read on the topic"))
        add(
            "failover import --backup",
            t,
            r,
            ["Describe", "Read"],
            _note(exact, "an offset commit needs Read on the topic"),
        )


def _failback_grants(flow: Flow, fr: _FlowResources, add: _Add) -> None:
    """failback: the old primary (the flow's source) is emptied of the flow's topics and groups
    (`failback --from`: the same for every flow of the site)."""
    s, t = fr.s, fr.t
    for command in ("failback", "failback --from"):
        _failback(command, s, t, fr, add)
    if flow.sync_acls:  # the producers' grants back: the DR cluster's ACLs read, the old primary's created
        add("failback --promote", t, CLUSTER, ["Describe"], "--promote: read the DR cluster's ACLs")
        add("failback --promote", s, CLUSTER, ["Alter"], "--promote: list and create the grants on the old primary")
        for cluster, by in ((t, "failover apply --plan --promote"), (s, "failback --promote")):
            add("failover import --backup", cluster, CLUSTER, ["Alter"], f"remove the ACLs `{by}` added")


def _failback(command: str, s: str, t: str, fr: _FlowResources, add: _Add) -> None:
    for r, exact in fr.src_topics:
        add(command, s, r, ["Describe", "Delete"], _note(exact, "offsets, then delete the stranded records"))
    for r, exact in fr.dst_topics:
        add(command, t, r, ["Describe"], _note(exact, "how far each partition was mirrored"))
    add(command, s, fr.mirror_group, ["Describe", "Delete"], "the mirror's positions; deleted with the flow's groups")
    for r, exact in fr.groups:
        add(command, s, r, ["Describe", "Delete"], _note(exact, "delete the flow's groups on the old primary"))


def _drill_grants(flow: Flow, fr: _FlowResources, add: _Add) -> None:
    """drill: its workload plays the application (makes its topic, which the flow mirrors,
    writes it, reads it as the drilled group on the primary, then the copies on the DR
    cluster) and measures the flow's lag at the cutover as `lag` does. The runbook's own
    commands (`failover apply`, `lag`, ...) need their grants too, listed under their names."""
    s, t = fr.s, fr.t
    for r, exact in fr.src_topics:
        add(
            "drill",
            s,
            r,
            ["Create", "Write", "Read"],
            _note(exact, "the workload's topic (--topic): made, written, read"),
        )
    add("drill", s, fr.mirror_group, ["Describe"], "the mirror's positions: the lag at the cutover")
    add("drill", s, fr.reader, ["Describe"], "the oldest unmirrored record's reader: its coordinator (commits nothing)")
    for r, exact in fr.groups:
        add("drill", s, r, ["Read"], _note(exact, "the drilled group consumes and commits on the primary"))
        add("drill", t, r, ["Read"], _note(exact, "the drilled group consumes and commits on the DR cluster"))
    for r, exact in fr.dst_topics:
        add("drill", t, r, ["Read"], _note(exact, "the drilled group reads the copies; their ends for the lag"))


def required_grants(config: Topology, commands: Iterable[str] = COMMANDS) -> list[Grant]:
    """The grants of the given commands over every flow, merged per (command, cluster, resource)."""
    wanted = set(commands)
    merged: dict[tuple[str, str, Resource], Grant] = {}
    for flow in config.flows:
        for g in flow_grants(config, flow):
            if g.command not in wanted:
                continue
            key = (g.command, g.cluster, g.resource)
            prior = merged.get(key)
            if prior is None:
                merged[key] = g
            else:
                ops = minimal_operations([*prior.operations, *g.operations])
                why = prior.why if g.why in prior.why else f"{prior.why}; {g.why}"
                merged[key] = Grant(g.command, g.cluster, g.resource, ops, why)
    order = {c: i for i, c in enumerate(COMMANDS)}
    return sorted(merged.values(), key=lambda g: (order.get(g.command, 99), g.cluster, g.resource))


def cluster_bindings(grants: Iterable[Grant], cluster: str) -> dict[Resource, tuple[str, ...]]:
    """Resource -> operations on one cluster, the union over commands: what a user needs for all of them."""
    out: dict[Resource, tuple[str, ...]] = {}
    for g in grants:
        if g.cluster == cluster:
            out[g.resource] = minimal_operations([*out.get(g.resource, ()), *g.operations])
    return out


def principal_for(client: dict[str, object], default: str = "User:mirror") -> str:
    """The principal a cluster's `client:` settings log in as: the SASL user, else `default`
    (with mTLS the principal comes from the certificate, which the config does not show)."""
    user = client.get("sasl.username")
    return f"User:{user}" if user else default
