"""The topology file: YAML -> one validated, immutable model tree.

Everything a user can get wrong in the file is caught here, once, with the key path of
the offending entry (`flows[1].topics.include[0]`) and how to fix it. Nothing downstream
re-validates. pydantic does the typing and unknown-key rejection; the cross-references
(cluster names, duplicate flows, loops) are checked in `_topology_problems`, and client
settings that would switch the mirror's guarantees off in `_client_problems`. Every problem
is reported, one line each, not only the first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    ValidationError,
)

from mirror.domain.naming import (
    FlowEdge,
    RenamePolicy,
    TopicFilter,
    find_identity_collisions,
    find_identity_cycles,
    find_relay_collisions,
)
from mirror.errors import ConfigError, ConfigProblems

# ---------------------------------------------------------------------------- value types

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """`10s`, `500ms`, `5m`, `1h` or a bare number of seconds -> seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 10s, 500ms or 5m")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = _DURATION.match(str(value))
        if not m:
            raise ValueError(f"{value!r} is not a duration; write e.g. 10s, 500ms or 5m")
        seconds = float(m.group(1)) * _UNIT[m.group(2)]
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


def _check_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regex {pattern!r}: {exc}") from None
    return pattern


def _check_bootstrap(value: str) -> str:
    for hostport in value.split(","):
        host, _, port = hostport.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"{value!r} is not a host:port list (e.g. 127.0.0.1:9092)")
    return value


Duration = Annotated[float, BeforeValidator(parse_duration)]
Regex = Annotated[str, AfterValidator(_check_regex)]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$", min_length=1)]
ClientSettings = dict[str, str | int | float | bool]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------------------- the tree


class ClusterConfig(_Model):
    bootstrap: Annotated[str, AfterValidator(_check_bootstrap)]
    # librdkafka settings passed through untouched (security.protocol, sasl.*, ssl.*).
    client: ClientSettings = {}
    # How long one request may go unanswered before the cluster counts as unreachable.
    timeout: Duration = 30.0
    # The site the cluster runs in: `mirror failover plan --from DC` moves every group of
    # every flow from its clusters at once. A cluster without one is a site of its own.
    datacenter: Name | None = None


class TopicsConfig(_Model):
    include: Annotated[list[Regex], Field(min_length=1)]
    exclude: list[Regex] = []


class SparkFlowSettings(_Model):
    """How `mirror spark run` sizes its batches (the native engine ignores these)."""

    # A micro-batch's records (Spark's maxOffsetsPerTrigger), over all partitions: a backlog
    # is mirrored and committed a batch at a time, not as one batch of a day's records. Also
    # bounds what a retried task holds to compare with the target (its partition's slice).
    max_records_per_batch: Annotated[int, Field(ge=1)] = 500_000
    # The bytes of source records a task's Python worker takes in at once (one Arrow batch,
    # also at most 10,000 records): with the producer's queue, what a worker holds.
    max_bytes_per_chunk: Annotated[ByteSize, Field(ge=64 * 1024, lt=2**31)] = ByteSize(8 * 1024 * 1024)


class AclFilterConfig(_Model):
    """One `acl_filters:` entry: an ACL is synced when it matches both regexes of any entry."""

    principal: Regex = ".*"
    """Full-match regex over the ACL's principal (`User:app-.*`)."""
    resource: Regex = ".*"
    """Full-match regex over the source resource name (the topic, prefix or group the ACL names)."""


class FlowConfig(_Model):
    name: Name
    source: str
    target: str
    topics: TopicsConfig
    # prefix is the default because it is loop-safe in every topology; identity needs a
    # topology without cycles (checked at load).
    rename: RenamePolicy = RenamePolicy.PREFIX
    groups: list[Regex] = []  # consumer groups to checkpoint and translate
    consumer_group: str | None = None  # the mirror's own group on the source
    provenance_headers: bool = True
    refresh_interval: Duration = 30.0  # how soon a new matching topic is picked up
    checkpoint_interval: Duration = 10.0
    # Off by default, like MM2: writing offsets on the target is only safe for groups with
    # no members there, and surprising if nobody asked for it.
    sync_group_offsets: bool = False
    commit_interval: Duration = 1.0  # source offset commits are batched this often
    # Off by default: at-least-once is the faster mode, and duplicates after a crash are fine for
    # consumers with idempotent keys. On: the target holds every source record once for its
    # read_committed consumers (a target transaction per commit_interval; docs/design.md).
    exactly_once: bool = False
    # Target topics follow their source's copied configs (retention, cleanup.policy, ...)
    # and partition increases. Off when the target's owners manage their topics themselves
    # (partitions are still grown before mirroring: records keep their partition number).
    sync_topic_configs: bool = True
    # MM2 syncs every 10 minutes; a DR copy keeping data for the wrong time that long is
    # an incident waiting for a failover. One comparison per interval costs a few requests.
    sync_topic_configs_interval: Duration = 60.0
    sync_acls: bool = False
    """Copy the source's READ/DESCRIBE ACLs (ALLOW and DENY) of mirrored topics (literal and
    prefixed, renamed like the topics) and of checkpointed groups to the target, and remove the
    copies the source no longer has. Every `sync_acls_interval`, from `mirror run` (a Spark
    flow: docs/spark.md). Off by default: it needs Describe and Alter on the clusters."""
    sync_acls_interval: Duration = 60.0
    """How often the ACL sync compares the clusters: a revoked grant stays on the target at
    most this long. One DescribeAcls per cluster per interval."""
    acl_filters: list[AclFilterConfig] = []
    """Narrow `sync_acls` to ACLs matching any entry (`principal`, `resource` regexes). Empty:
    every ACL of the flow's topics and groups."""
    consumer: ClientSettings = {}  # extra librdkafka settings for the source consumer
    producer: ClientSettings = {}  # extra librdkafka settings for the target producer
    spark: SparkFlowSettings = SparkFlowSettings()

    @property
    def group_id(self) -> str:
        return self.consumer_group or f"mirror.{self.name}"

    @property
    def progress_group(self) -> str:
        """The group on the target whose offsets, written in the copy's transactions, say how
        far an exactly-once copy got (`mirror.kafka.progress`)."""
        return f"mirror-eos.{self.name}"

    def topic_filter(self, canary_topic: str | None = None) -> TopicFilter:
        return TopicFilter.of(self.topics.include, self.topics.exclude, [canary_topic] if canary_topic else [])


class SqliteStoreConfig(_Model):
    kind: Literal["sqlite"] = "sqlite"
    path: str = ".mirror/offsets.db"  # relative: taken from $MIRROR_STATE_DIR if set, else the config file's directory


class CassandraStoreConfig(_Model):
    kind: Literal["cassandra"]
    contact_points: Annotated[list[str], Field(min_length=1)]
    keyspace: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,47}$")] = "mirror"
    # SimpleStrategy/1 suits one dev node only; production files name their datacenters.
    replication: dict[str, str | int] = {"class": "SimpleStrategy", "replication_factor": 1}
    consistency: Literal["ONE", "LOCAL_ONE", "QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL"] = "LOCAL_QUORUM"
    local_dc: str | None = None
    username: str | None = None
    password: str | None = None
    timeout: Duration = 10.0


OffsetStoreConfig = Annotated[SqliteStoreConfig | CassandraStoreConfig, Field(discriminator="kind")]


class CanaryConfig(_Model):
    topic: str = "mirror-canary"
    interval: Duration = 10.0
    max_latency: Duration = 30.0


class MetricsConfig(_Model):
    port: Annotated[int, Field(ge=0, le=65535)] = 9308
    # 0.0.0.0 so a containerised exporter can be scraped; set 127.0.0.1 on shared hosts.
    host: str = "0.0.0.0"


class SparkConfig(_Model):
    # Each flow's Structured Streaming checkpoint goes in <checkpoint_dir>/<flow name>, kept
    # across restarts (`mirror spark run --checkpoint` overrides it). A relative path is taken
    # from the config file's directory, like the SQLite offset store's, so a driver started
    # from elsewhere finds the same checkpoint. In cluster deploy mode it must be a path the
    # driver's host can reach.
    checkpoint_dir: str = ".mirror/spark"


class Config(_Model):
    clusters: Annotated[dict[Name, ClusterConfig], Field(min_length=1)]
    flows: Annotated[list[FlowConfig], Field(min_length=1)]
    offset_store: OffsetStoreConfig = SqliteStoreConfig()
    canary: CanaryConfig = CanaryConfig()
    metrics: MetricsConfig = MetricsConfig()
    spark: SparkConfig = SparkConfig()

    def flow(self, name: str) -> FlowConfig:
        for f in self.flows:
            if f.name == name:
                return f
        known = ", ".join(f.name for f in self.flows)
        raise ConfigError("--flow", f"no flow named {name!r}", hint=f"flows in this file: {known}")

    def select_flows(self, names: Sequence[str] = ()) -> list[FlowConfig]:
        return [self.flow(n) for n in names] if names else list(self.flows)

    def site(self, name: str, flag: str = "--from") -> list[str]:
        """The clusters NAME stands for: the cluster of that name and every cluster labelled
        with that datacenter (a cluster named for its datacenter is in it either way)."""
        found = [c for c, cc in self.clusters.items() if c == name or cc.datacenter == name]
        if not found:
            dcs = sorted({cc.datacenter for cc in self.clusters.values() if cc.datacenter})
            known = ", ".join(self.clusters) + (f"; datacenters: {', '.join(dcs)}" if dcs else "")
            raise ConfigError(flag, f"no cluster or datacenter named {name!r}", hint=f"clusters in this file: {known}")
        return found

    def cluster(self, name: str) -> ClusterConfig:
        try:
            return self.clusters[name]
        except KeyError:
            known = ", ".join(self.clusters)
            raise ConfigError(
                "--cluster", f"no cluster named {name!r}", hint=f"clusters in this file: {known}"
            ) from None


# ---------------------------------------------------------------------------- loading

# Where the images keep state (Dockerfile ENV); a relative offset_store.path is taken from it.
STATE_DIR_VARIABLE = "MIRROR_STATE_DIR"

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


def load(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read, interpolate and validate a topology file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            "-c/--config", f"cannot read {str(p)!r}: {exc.strerror}", hint="pass the path of a topology YAML file"
        ) from None
    env = os.environ if env is None else env
    config = parse(text, env=env, source=str(p))
    store = config.offset_store
    if isinstance(store, SqliteStoreConfig) and not Path(store.path).is_absolute():
        # Relative to the state directory if one is set (the images set /var/lib/mirror: their
        # config is mounted read-only), else to the file, never the working directory: a
        # daemon started from another directory (systemd, cron) must find the same offset map.
        state_dir = env.get(STATE_DIR_VARIABLE)
        base = Path(state_dir).resolve() if state_dir else p.resolve().parent
        resolved = store.model_copy(update={"path": str(base / store.path)})
        config = config.model_copy(update={"offset_store": resolved})
    if not Path(config.spark.checkpoint_dir).is_absolute():
        spark = config.spark.model_copy(
            update={"checkpoint_dir": str(p.resolve().parent / config.spark.checkpoint_dir)}
        )
        config = config.model_copy(update={"spark": spark})
    return config


def parse(text: str, *, env: Mapping[str, str], source: str = "<config>") -> Config:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            None, f"{source}: YAML syntax error at {where}: {problem}", hint="fix the YAML syntax"
        ) from None
    if not isinstance(raw, dict):
        raise ConfigError(
            None,
            f"{source}: expected a mapping with 'clusters' and 'flows' at the top",
            hint="see configs/dev.yaml for the shape",
        )
    # Every problem in the file is collected and reported at once: fixing a config one
    # error per run is how a 3 a.m. change takes an hour.
    problems: list[ConfigError] = []
    raw = _interpolate(raw, env, "", problems)
    unset = {p.key for p in problems}
    config: Config | None = None
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        # An unset ${VAR} already explains whatever its empty value breaks.
        problems += [p for p in _validation_problems(exc) if p.key not in unset]
    clusters, flows = _salvage(raw, config)
    problems += _client_problems(clusters, flows)
    canary_topic = (
        config.canary.topic
        if config is not None
        else str(
            ((raw.get("canary") or {}) if isinstance(raw.get("canary"), dict) else {}).get(
                "topic", CanaryConfig().topic
            )
        )
    )
    problems += _topology_problems(clusters, flows, canary_topic)
    if problems:
        raise problems[0] if len(problems) == 1 else ConfigProblems(problems)
    assert config is not None
    return config


def _interpolate(node: Any, env: Mapping[str, str], path: str, problems: list[ConfigError]) -> Any:
    if isinstance(node, dict):
        return {k: _interpolate(v, env, _join(path, k), problems) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate(v, env, f"{path}[{i}]", problems) for i, v in enumerate(node)]
    if isinstance(node, str) and "${" in node:

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            problems.append(
                ConfigError(
                    path,
                    f"environment variable {name} is not set",
                    hint=f"export {name}, or write ${{{name}:-default}}",
                )
            )
            return ""

        return _VAR.sub(sub, node)
    return node


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _loc_path(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            continue  # pydantic's marker for "the dict key itself is invalid"
        elif part in ("sqlite", "cassandra") and out.endswith("offset_store"):
            continue  # pydantic's discriminated-union tag, not a key the user wrote
        else:
            out = _join(out, part)
    return out


def _validation_problems(exc: ValidationError) -> list[ConfigError]:
    out = []
    for err in exc.errors(include_url=False):
        kind = err["type"]
        if kind == "extra_forbidden":
            message, hint = "unknown key", "check the spelling against the config shape in docs/design.md"
        elif kind == "missing":
            message, hint = "required key is missing", "add it"
        elif kind == "union_tag_invalid":
            message, hint = "unknown kind", "use 'sqlite' or 'cassandra'"
        elif kind == "string_pattern_mismatch":
            message, hint = f"{err['input']!r} is not a valid name", "use letters, digits, '_' and '-' only"
        else:
            message, hint = err["msg"].removeprefix("Value error, "), None
        out.append(ConfigError(_loc_path(err["loc"]), message, hint=hint))
    return out


def _salvage(
    raw: dict[str, Any], config: Config | None
) -> tuple[dict[str, ClusterConfig | None] | None, list[tuple[int, FlowConfig]]]:
    """The clusters and flows the cross-checks can look at, even when others are invalid.

    A cluster that failed validation still counts as defined (its own error is already
    reported; "unknown cluster" for every flow naming it would be noise); a flow that failed
    is left out of the cross-checks for the same reason.
    """
    if config is not None:
        return dict(config.clusters), list(enumerate(config.flows))
    clusters: dict[str, ClusterConfig | None] | None = None  # None: no usable `clusters:` at all
    if isinstance(raw.get("clusters"), dict):
        clusters = {}
        for name, body in raw["clusters"].items():
            try:
                clusters[str(name)] = ClusterConfig.model_validate(body)
            except ValidationError:
                clusters[str(name)] = None
    flows: list[tuple[int, FlowConfig]] = []
    if isinstance(raw.get("flows"), list):
        for i, body in enumerate(raw["flows"]):
            try:
                flows.append((i, FlowConfig.model_validate(body)))
            except ValidationError:
                pass
    return clusters, flows


def _topology_problems(
    clusters: Mapping[str, ClusterConfig | None] | None, flows: Sequence[tuple[int, FlowConfig]], canary_topic: str
) -> list[ConfigError]:
    """Cross-references pydantic cannot see: cluster names, duplicate flows, loops."""
    return _reference_problems(clusters, flows) + _collision_problems(flows, canary_topic)


def _reference_problems(
    clusters: Mapping[str, ClusterConfig | None] | None, flows: Sequence[tuple[int, FlowConfig]]
) -> list[ConfigError]:
    """Flows naming unknown clusters, or one cluster twice, or another flow's name or pair."""
    out: list[ConfigError] = []
    names: dict[str, int] = {}
    for i, flow in flows:
        for role in ("source", "target"):
            cluster = getattr(flow, role)
            if clusters is not None and cluster not in clusters:
                known = ", ".join(clusters)
                out.append(
                    ConfigError(f"flows[{i}].{role}", f"unknown cluster {cluster!r}", hint=f"clusters defined: {known}")
                )
        if flow.source == flow.target:
            out.append(
                ConfigError(
                    f"flows[{i}].target",
                    f"source and target are both {flow.source!r}",
                    hint="a flow mirrors between two different clusters",
                )
            )
        if flow.name in names:
            out.append(
                ConfigError(
                    f"flows[{i}].name",
                    f"duplicate flow name {flow.name!r} (also flows[{names[flow.name]}])",
                    hint="give each flow its own name",
                )
            )
        else:
            names[flow.name] = i
    pairs: dict[tuple[str, str], str] = {}
    for i, flow in flows:
        pair = (flow.source, flow.target)
        if pair in pairs:
            out.append(
                ConfigError(
                    f"flows[{i}]",
                    f"flow {flow.name!r} mirrors {flow.source} -> {flow.target} like flow {pairs[pair]!r}",
                    hint="merge their topic patterns into one flow",
                )
            )
        else:
            pairs[pair] = flow.name
    return out


def _collision_problems(flows: Sequence[tuple[int, FlowConfig]], canary_topic: str) -> list[ConfigError]:
    """Flows whose topics would meet in one target topic, or go round a loop."""
    out: list[ConfigError] = []
    edges = [FlowEdge(f.name, f.source, f.target, f.rename, tuple(f.topics.include)) for _, f in flows]
    for a, b in find_identity_collisions(edges):
        out.append(
            ConfigError(
                "flows",
                f"flows {a} and {b} both write topics with their source names into one target cluster; "
                "records from two sources would share a topic",
                hint="use rename: prefix on at least one of them, or make their include patterns disjoint literals",
            )
        )
    for r in find_relay_collisions(edges):
        out.append(
            ConfigError(
                "flows",
                f"flows {r.relay} and {r.direct} could both write {r.origin}.* topics into {r.target}: "
                f"{r.relay} relays the copies it receives from {r.origin} under the same names",
                hint=f"exclude {r.origin}\\..* in {r.relay}, or use rename: prefix on it",
            )
        )
    cycles = find_identity_cycles(edges)
    canary = ""
    if not cycles:
        # The canary topic is mirrored by every flow whatever its patterns, so disjoint
        # patterns do not keep it from going round an identity cycle forever.
        cycles = find_identity_cycles(edges, always=[canary_topic])
        canary = f" (the canary topic {canary_topic!r}, which every flow mirrors, would circulate forever)"
    for cycle in cycles:
        loop = " -> ".join(cycle)
        out.append(
            ConfigError(
                "flows",
                f"flows {loop} form a loop with rename: identity; a record would be mirrored back to "
                f"where it came from{canary}",
                hint="use rename: prefix on at least one of them"
                + ("" if canary else ", or make their include patterns disjoint literals"),
            )
        )
    return out


# ---------------------------------------------------------------------------- client settings
#
# The engine's guarantees rest on a few librdkafka settings (mirror.kafka.settings and
# mirror.engine.worker): a flow's `producer:` / `consumer:` overrides, or a cluster's
# `client:` settings, that switch one of them off are refused here, at load, with the reason.
# librdkafka also accepts aliases (`request.required.acks` for `acks`) and a `topic.` prefix
# for topic-level properties (`topic.acks`); both are matched, and values are compared the
# way librdkafka parses them (case-insensitive; true/t/1, false/f/0).

_ALIASES = {
    "request.required.acks": "acks",
    "delivery.timeout.ms": "message.timeout.ms",
    "max.in.flight": "max.in.flight.requests.per.connection",
    "message.send.max.retries": "retries",
    "metadata.broker.list": "bootstrap.servers",
    "auto.commit.enable": "enable.auto.commit",
}
_TRUE, _FALSE = {"true", "t", "1"}, {"false", "f", "0"}
_INT32_MAX = 2147483647


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value).strip().lower()


def _is(allowed: set[str]) -> Callable[[Any], bool]:
    return lambda v: _text(v) in allowed


def _is_exactly(*allowed: str) -> Callable[[Any], bool]:
    return lambda v: str(v).strip() in allowed  # librdkafka matches assignor names case-sensitively


def _int_at_most(limit: int) -> Callable[[Any], bool]:
    return lambda v: _text(v).isdigit() and 1 <= int(_text(v)) <= limit


def _never(_: Any) -> bool:
    return False


# canonical name -> (accepted value, why the engine needs it)
_PRODUCER_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "acks": (
        _is({"all", "-1"}),
        "must be all: a source offset is committed once the target acknowledged the records, and with "
        "fewer acks a target broker failure loses acknowledged records",
    ),
    "enable.idempotence": (
        _is(_TRUE),
        "must stay true: without it a retried batch can be written twice or out of order",
    ),
    "enable.gapless.guarantee": (
        _is(_TRUE),
        "must stay true: the mirror takes a run of records as acknowledged from its last delivery "
        "report, which holds only if a refused record stops the producer instead of leaving a gap",
    ),
    "message.timeout.ms": (
        _is({"0"}),
        "must stay 0 (no limit): a record that times out while the target is unreachable fails the flow "
        "instead of waiting for the target",
    ),
    "retries": (
        _is({str(_INT32_MAX)}),
        "must stay unlimited: a target outage longer than the retries fails the flow instead of only growing lag",
    ),
    "max.in.flight.requests.per.connection": (
        _int_at_most(5),
        "must be 1-5: the idempotent producer keeps a partition's order only with at most 5 requests in flight",
    ),
    "queuing.strategy": (_is({"fifo"}), "must stay fifo: records must reach the target in source order"),
    "delivery.report.only.error": (
        _is(_FALSE),
        "must stay false: source offsets are committed from successful delivery reports, so nothing "
        "would ever be committed",
    ),
    "transactional.id": (
        _never,
        "cannot be set here: with exactly_once the mirror gives each worker its own id (and fences the "
        "previous writers'); without it, a transactional producer refuses records sent outside a transaction",
    ),
}
# One assignor, never a list: every worker of a flow must speak the same rebalance protocol.
ASSIGNORS = ("cooperative-sticky", "roundrobin", "range")
_CONSUMER_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "isolation.level": (
        _is({"read_committed"}),
        "must stay read_committed: with read_uncommitted, records of aborted transactions reach the target",
    ),
    "enable.auto.commit": (
        _is(_FALSE),
        "must stay false: source offsets would be committed before the target acknowledged the records, "
        "and a crash would lose them",
    ),
    "enable.auto.offset.store": (
        _is(_FALSE),
        "must stay false: the mirror stores and commits offsets itself, only after the target acknowledged the records",
    ),
    "auto.offset.reset": (
        _is({"earliest", "smallest", "beginning"}),
        "must stay earliest: when the mirror's position is out of range (records deleted before it "
        "mirrored them) any other value skips records still on the source",
    ),
    "group.id": (
        _never,
        "cannot be set here: lag, checkpoints and --until-caught-up read the flow's group; set the "
        "flow's consumer_group instead",
    ),
    "group.instance.id": (
        _never,
        "is not supported: every worker of a flow runs with these settings, and workers sharing one "
        "static member id fence each other",
    ),
    "group.protocol": (
        _is({"classic"}),
        "must stay classic: the mirror hands partitions over with the cooperative-sticky assignor and "
        "its own session timeout, which the consumer protocol does not accept",
    ),
    "partition.assignment.strategy": (
        _is_exactly(*ASSIGNORS),
        "must be one assignor of "
        + ", ".join(ASSIGNORS)
        + ": cooperative-sticky (the default) moves only the partitions that must move; roundrobin and "
        "range are eager (every rebalance pauses every partition) but assign 10,000 partitions in under "
        "a second where librdkafka's cooperative-sticky takes tens of seconds",
    ),
}
_COMMON_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "allow.auto.create.topics": (
        _is(_FALSE),
        "must stay false: the mirror creates target topics itself, with the source's partition count and "
        "configs; an auto-created topic gets the broker's defaults",
    ),
    "bootstrap.servers": (
        _never,
        "cannot be set here: the flow's clients must talk to the clusters the flow names; set "
        "clusters.NAME.bootstrap instead",
    ),
}


def _setting_problems(
    path: str, settings: Mapping[str, Any], rules: Mapping[str, tuple[Callable[[Any], bool], str]]
) -> list[ConfigError]:
    out = []
    for key, value in settings.items():
        name = key.removeprefix("topic.")
        name = _ALIASES.get(name, name)
        rule = rules.get(name)
        if rule is not None and not rule[0](value):
            what = name if name == key else f"{name} (which {key} sets)"
            shown = "" if rule[0] is _never else f"{(_text(value) if isinstance(value, bool) else str(value))!r} "
            out.append(
                ConfigError(
                    f"{path}.{key}",
                    f"{shown}refused: {what} {rule[1]}",
                    hint="remove it; the mirror sets what it needs",
                )
            )
    return out


def _client_problems(
    clusters: Mapping[str, ClusterConfig | None] | None, flows: Sequence[tuple[int, FlowConfig]]
) -> list[ConfigError]:
    """Client settings that would switch the mirror's guarantees off (see the rules above)."""
    out: list[ConfigError] = []
    everything = {**_PRODUCER_RULES, **_CONSUMER_RULES, **_COMMON_RULES}
    for name, cluster in (clusters or {}).items():
        if cluster is not None:
            # A cluster's `client:` settings reach the mirror's producer and consumer too
            # (under the engine's own, but aliases and settings it does not set get through).
            out += _setting_problems(f"clusters.{name}.client", cluster.client, everything)
    for i, flow in flows:
        out += _setting_problems(f"flows[{i}].producer", flow.producer, {**_PRODUCER_RULES, **_COMMON_RULES})
        out += _setting_problems(f"flows[{i}].consumer", flow.consumer, {**_CONSUMER_RULES, **_COMMON_RULES})
        out += _timing_problems(f"flows[{i}].consumer", flow.consumer)
        out += _transaction_problems(f"flows[{i}]", flow)
    return out


# Exactly-once: how long a transaction may stay open before the target's coordinator aborts
# it (mirror.kafka.settings uses it; it lives here because the rule below judges overrides
# against it). It bounds how long a writer that died unfenced holds back read_committed
# consumers of the partitions it wrote, and must leave room for a commit interval and a slow commit.
TRANSACTION_TIMEOUT_MS = 60_000
# The broker's default transaction.max.timeout.ms: a longer transaction timeout fails every
# exactly-once producer's init on a default broker.
MAX_TRANSACTION_TIMEOUT_MS = 900_000


def _transaction_problems(path: str, flow: FlowConfig) -> list[ConfigError]:
    """Settings that break exactly-once transactions (or mean nothing without them)."""
    raw = flow.producer.get("transaction.timeout.ms", flow.producer.get("topic.transaction.timeout.ms"))
    if not flow.exactly_once:
        if raw is None:
            return []
        return [
            ConfigError(
                f"{path}.producer.transaction.timeout.ms",
                "refused: the producer is transactional only with exactly_once: true",
                hint="remove it, or set exactly_once: true",
            )
        ]
    if raw is not None and not (_text(raw).isdigit() and 1 <= int(_text(raw)) <= MAX_TRANSACTION_TIMEOUT_MS):
        return [
            ConfigError(
                f"{path}.producer.transaction.timeout.ms",
                f"{str(raw)!r} refused: must be a whole number of milliseconds up to {MAX_TRANSACTION_TIMEOUT_MS} "
                "(the broker's default transaction.max.timeout.ms)",
            )
        ]
    timeout_ms = int(_text(raw)) if raw is not None else TRANSACTION_TIMEOUT_MS
    # A transaction stays open for a commit interval, then commits: with less than three
    # intervals of room, a slow commit or a short target hiccup makes the coordinator abort
    # it, and the copy starts over from the last progress again and again.
    if flow.commit_interval * 3 * 1000 > timeout_ms:
        key = "producer.transaction.timeout.ms" if raw is not None else "commit_interval"
        return [
            ConfigError(
                f"{path}.{key}",
                f"refused: with exactly_once a transaction stays open for commit_interval "
                f"({flow.commit_interval:g}s), which must be at most a third of transaction.timeout.ms ({timeout_ms})",
                hint="lower commit_interval or raise producer.transaction.timeout.ms",
            )
        ]
    return []


# A worker that has not run for session.timeout.ms - heartbeat.interval.ms fences itself
# (its partitions may have moved on): the gap must leave room for a normal loop, or it
# fences, drops what is in flight and re-mirrors it on every loop. And a worker thread may
# block up to the engine's DRAIN_TIMEOUT (30 s) draining a revoked partition: a shorter
# max.poll.interval.ms makes the group drop it mid-drain.
MIN_MAX_POLL_INTERVAL_MS = 60_000
# The engine's session timings (mirror.kafka.settings spreads them into the consumer's
# defaults; they live here because the rule above judges overrides against them). A dead
# worker's partitions move within seconds, not the 45 s default.
CONSUMER_TIMINGS: dict[str, int] = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 2000}


def _timing_problems(path: str, consumer: Mapping[str, Any]) -> list[ConfigError]:
    effective = {**CONSUMER_TIMINGS, **consumer}
    values = {}
    for key in ("session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms"):
        raw = effective.get(key)
        if raw is None:
            continue
        if not _text(raw).isdigit():
            return [ConfigError(f"{path}.{key}", f"{raw!r} is not a whole number of milliseconds")]
        values[key] = int(_text(raw))
    out = []
    session, heartbeat = values["session.timeout.ms"], values["heartbeat.interval.ms"]
    if heartbeat * 3 > session:
        key = "heartbeat.interval.ms" if "heartbeat.interval.ms" in consumer else "session.timeout.ms"
        out.append(
            ConfigError(
                f"{path}.{key}",
                f"refused: heartbeat.interval.ms ({heartbeat}) must be at most a third of "
                f"session.timeout.ms ({session}): "
                "a worker that has not run for their difference fences itself and re-mirrors what it had in flight",
                hint="lower heartbeat.interval.ms or raise session.timeout.ms",
            )
        )
    if values.get("max.poll.interval.ms", MIN_MAX_POLL_INTERVAL_MS) < MIN_MAX_POLL_INTERVAL_MS:
        out.append(
            ConfigError(
                f"{path}.max.poll.interval.ms",
                f"refused: below {MIN_MAX_POLL_INTERVAL_MS} the group can drop a worker while it drains a "
                "revoked partition (up to 30 s)",
                hint=f"remove it or set at least {MIN_MAX_POLL_INTERVAL_MS}",
            )
        )
    return out


_SECRET = re.compile(r"password|secret|token|(^|\.)key$|jaas", re.IGNORECASE)


def redact(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Client settings fit for a log line: secret values replaced."""
    return {k: ("***" if _SECRET.search(k) else v) for k, v in settings.items()}
