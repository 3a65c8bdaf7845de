"""The topology file: YAML -> one validated, immutable model tree.

Everything a user can get wrong in the file is caught here, once, with the key path of
the offending entry (`flows[1].topics.include[0]`) and how to fix it. Nothing downstream
re-validates. pydantic does the typing and unknown-key rejection; the cross-references
(cluster names, duplicate flows, loops) are checked in `_topology_problems`, and client
settings that would switch the mirror's guarantees off in `_client_problems`. Every problem
is reported, one line each, not only the first.
"""

from __future__ import annotations

import difflib
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    ValidationError,
)

from mirror.config_source import ConfigWarning, Interpolation, interpolate, literal_secrets, read_yaml
from mirror.domain.naming import (
    MAX_TOPIC_NAME,
    FlowEdge,
    RenamePolicy,
    TopicFilter,
    find_identity_collisions,
    find_identity_cycles,
    find_relay_collisions,
    literal_name,
    target_topic,
)
from mirror.domain.start_from import StartFrom
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


def _check_start_from(value: str) -> str:
    StartFrom.parse(value, int(time.time() * 1000))
    return value


Duration = Annotated[float, BeforeValidator(parse_duration)]
Regex = Annotated[str, AfterValidator(_check_regex)]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$", min_length=1)]
ClientSettings = dict[str, str | int | float | bool]


class _Model(BaseModel):
    # Each field's docstring (the string literal below it) is its description: what
    # `mirror config reference` prints into docs/config.md.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


# ---------------------------------------------------------------------------- the tree


class ClusterConfig(_Model):
    """A Kafka cluster the flows name (`clusters.NAME`)."""

    bootstrap: Annotated[str, AfterValidator(_check_bootstrap)]
    """The cluster's bootstrap servers, a `host:port` list (e.g. `10.0.0.1:9092,10.0.0.2:9092`)."""
    client: ClientSettings = {}
    """librdkafka settings passed through untouched to every client of this cluster
    (`security.protocol`, `sasl.*`, `ssl.*`). Secrets belong in `${VAR}` or `${file:/path}`
    (docs/security.md); settings that would switch a guarantee off are refused. Both engines."""
    timeout: Duration = 30.0
    """How long one request may go unanswered before the cluster counts as unreachable (a
    duration: `30s`, `500ms`). `mirror validate` gives up on the cluster after it. Both engines."""
    datacenter: Name | None = None
    """The site the cluster runs in: `mirror failover plan --from DC` moves every group of
    every flow from its clusters at once. A cluster without one is a site of its own."""


class TopicsConfig(_Model):
    """Which source topics a flow mirrors."""

    include: Annotated[list[Regex], Field(min_length=1)]
    """Full-match regexes of the topics to mirror (`orders\\..*`). A literal name is checked
    at load against Kafka's 249-character limit once renamed."""
    exclude: list[Regex] = []
    """Full-match regexes of topics left out even though an include pattern matches them."""


class SparkFlowSettings(_Model):
    """How `mirror spark run` sizes its batches (the native engine ignores these)."""

    max_records_per_batch: Annotated[int, Field(ge=1)] = 500_000
    """A micro-batch's records (Spark's maxOffsetsPerTrigger), over all partitions: a backlog
    is mirrored and committed a batch at a time, not as one batch of a day's records. Also
    bounds what a retried task holds to compare with the target (its partition's slice).
    Spark engine only."""
    max_bytes_per_chunk: Annotated[ByteSize, Field(ge=64 * 1024, lt=2**31)] = ByteSize(8 * 1024 * 1024)
    """The bytes of source records a task's Python worker takes in at once (one Arrow batch,
    also at most 10,000 records): with the producer's queue, what a worker holds (`8MiB`).
    Spark engine only."""


class AclFilterConfig(_Model):
    """One `acl_filters:` entry: an ACL is synced when it matches both regexes of any entry."""

    principal: Regex = ".*"
    """Full-match regex over the ACL's principal (`User:app-.*`)."""
    resource: Regex = ".*"
    """Full-match regex over the source resource name (the topic, prefix or group the ACL names)."""


class FlowConfig(_Model):
    """One direction of mirroring: topics of `source` copied to `target` (`flows[]`)."""

    name: Name
    """The flow's name (letters, digits, `_`, `-`): `--flow NAME`, metric labels, group names."""
    source: str
    """The cluster (a key of `clusters`) the topics are read from."""
    target: str
    """The cluster (a key of `clusters`) the topics are written to."""
    topics: TopicsConfig
    """The source topics to mirror (`include`, `exclude`); the canary topic is always added."""
    rename: RenamePolicy = RenamePolicy.PREFIX
    """Target topic names: `prefix` (`nyc.orders`) or `identity` (`orders`). prefix is the
    default because it is loop-safe in every topology; identity needs a topology without
    cycles (checked at load). Both engines."""
    groups: list[Regex] = []
    """Full-match regexes of the consumer groups to checkpoint and translate for failover
    (native engine: `mirror run`'s checkpointer)."""
    consumer_group: str | None = None
    """The mirror's own consumer group on the source; default `mirror.<flow name>`. Both engines."""
    provenance_headers: bool = True
    """Add a `mirror.origin` header (cluster/topic/partition/offset of the source record) to
    every copy: `mirror audit` joins source and target on it exactly (without it: counts and
    checksums only), and a restart skips the copies it proves on the target instead of copying
    them again (without it: every record since the last commit is copied again). Both engines."""
    refresh_interval: Duration = 30.0
    """How soon a new matching topic, or a new partition of one, is picked up. Both engines."""
    checkpoint_interval: Duration = 10.0
    """How often the flow's `groups` are checkpointed (their translated positions stored for
    failover); the first one interval after start, when the flow is past its busiest moment.
    Native engine only."""
    sync_group_offsets: bool = False
    """Write the checkpointed groups' translated offsets to the target for groups with no
    members there. Off by default, like MM2: writing offsets on the target is only safe for
    groups with no members there, and surprising if nobody asked for it. Native engine only."""
    commit_interval: Duration = 1.0
    """How often source offsets are committed (batched). With `exactly_once` it is the
    latency bound: transactions start half an interval apart, so a copy is readable within
    about one interval; lower it (300ms: a p99 near MirrorMaker 2's exactly-once, bench/README.md)
    for less latency at the cost of throughput. For the Spark engine, the micro-batch trigger.
    Both engines."""
    exactly_once: bool = False
    """On: the target holds every source record once for its read_committed consumers (a
    target transaction per commit_interval; docs/design.md). Off by default: at-least-once is
    the faster mode, and duplicates after a crash are fine for consumers with idempotent keys.
    Both engines."""
    sync_topic_configs: bool = True
    """Target topics follow their source's copied configs (retention, cleanup.policy, ...)
    and partition increases. Off when the target's owners manage their topics themselves
    (partitions are still grown before mirroring: records keep their partition number).
    Native engine only."""
    sync_topic_configs_interval: Duration = 60.0
    """How often topic configs are compared and synced. MM2 syncs every 10 minutes; a DR copy
    keeping data for the wrong time that long is an incident waiting for a failover. One
    comparison per interval costs a few requests. Native engine only."""
    sync_topic_deletes: bool = False
    """Delete a target topic once its source topic has been gone for `topic_delete_grace`
    (native engine; checked every `sync_topic_configs_interval`). Only a topic this mirror
    created (recorded in the offset store with its topic id, still the same id just before the
    deletion) whose records all carry this flow's provenance header is deleted: every record
    of a partition of up to 5,000, else its first and last 100 (the records between are not
    read). Any other is kept, with a WARNING; so is every topic while the source looks rebuilt
    (another cluster id, or all its topics and the canary topic gone at once). Off by default,
    as in MirrorMaker 2: a deletion on the source is often a mistake, and the DR copy may be
    the only one left."""
    topic_delete_grace: Duration = 300.0
    """How long a source topic must stay gone before its target topic is deleted (seconds, or
    `5m`). A topic deleted and created again within it keeps its target (mirrored again from
    its beginning). The count starts over when `mirror run` restarts: later, never sooner."""
    sync_acls: bool = False
    """Copy the source's READ/DESCRIBE ACLs (ALLOW and DENY) of mirrored topics (literal, and
    prefixed as literal ACLs on the mirrored topics covered, renamed like the topics) and of
    checkpointed groups to the target, and remove the copies the source no longer has. Every
    `sync_acls_interval`, from `mirror run` (a Spark flow: docs/spark.md). Off by default: it
    needs Describe and Alter on the clusters."""
    sync_acls_interval: Duration = 60.0
    """How often the ACL sync compares the clusters: a revoked grant stays on the target at
    most this long. One DescribeAcls per cluster per interval."""
    acl_filters: list[AclFilterConfig] = []
    """Narrow `sync_acls` to ACLs matching any entry (`principal`, `resource` regexes); a DENY
    is copied regardless, so the target never grants more. Empty: every ACL of the flow's
    topics and groups."""
    consumer: ClientSettings = {}
    """Extra librdkafka settings for the source consumer; those that would switch a
    guarantee off are refused, with the reason. Both engines."""
    producer: ClientSettings = {}
    """Extra librdkafka settings for the target producer; those that would switch a
    guarantee off are refused, with the reason. Both engines."""
    spark: SparkFlowSettings = SparkFlowSettings()
    """How `mirror spark run` sizes its batches for this flow. Spark engine only."""
    on_source_gap: Literal["skip", "stop"] = "skip"
    """What the flow does when the source lost records before they were copied (retention or
    delete-records while the mirror was behind or stopped, a truncated log, a re-created
    topic): `skip` reports the gap (a WARNING, `mirror_source_records_skipped_total`, the
    offset map) and mirrors on from the first record left; `stop` reports it and stops the
    flow (exit code 4) before copying anything past it. Both engines (Spark: `failOnDataLoss`).
    `skip` by default: a DR copy that stops falls further behind with every minute, and the
    gap is paged on either way."""
    start_from: Annotated[str, AfterValidator(_check_start_from)] = "earliest"
    """Where a partition the flow's group never committed starts: `earliest` (everything the
    source holds), `latest` (only records written after the flow started), or a time (ISO
    8601, epoch ms, or relative such as `-6h`, counted back from the flow's start). Applies
    to a new flow, and to a topic or partition that appears later (copied from the first
    record after that moment); never to a partition the flow already mirrors. Both engines
    (docs/design.md, "Flow controls"). `earliest` by default: a DR copy is complete unless
    asked otherwise."""
    max_bytes_per_second: Annotated[ByteSize, Field(ge=1024)] | None = None
    """Cap on the source bytes (key + value) the flow reads per second, held over any 10 s
    window with at most one second's worth of burst (`1MiB` or a number). `--workers N` each
    take a N-th. Native engine: reading pauses; the Spark engine paces its batches. None (the
    default): no cap, a mirror catching up goes as fast as it can."""
    max_records_per_second: Annotated[int, Field(ge=1)] | None = None
    """Cap on the source records the flow reads per second, as `max_bytes_per_second` (the
    tighter of the two holds). Both engines. None by default."""

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
    """The embedded offset store: one SQLite file, for a mirror on one host."""

    kind: Literal["sqlite"] = "sqlite"
    """`sqlite` (the default) or `cassandra`."""
    path: str = ".mirror/offsets.db"
    """The database file. Relative: taken from $MIRROR_STATE_DIR if set (the images:
    /var/lib/mirror), else from the config file's directory, never the working directory."""


class CassandraStoreConfig(_Model):
    """The shared offset store: Cassandra, readable from the DR site when the primary is gone."""

    kind: Literal["cassandra"]
    """`cassandra`."""
    contact_points: Annotated[list[str], Field(min_length=1)]
    """Cassandra nodes to connect to (`host` or `host:port`)."""
    keyspace: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,47}$")] = "mirror"
    """The keyspace holding the offset map and checkpoints (created if missing)."""
    replication: dict[str, str | int] = {"class": "SimpleStrategy", "replication_factor": 1}
    """The keyspace's replication when it is created. SimpleStrategy/1 suits one dev node
    only; production files name their datacenters (NetworkTopologyStrategy)."""
    consistency: Literal["ONE", "LOCAL_ONE", "QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL"] = "LOCAL_QUORUM"
    """The consistency level of reads and writes."""
    local_dc: str | None = None
    """The Cassandra datacenter to prefer (the one next to the mirror)."""
    username: str | None = None
    """The login name, if the cluster requires one."""
    password: str | None = None
    """The login password; take it from `${VAR}` or `${file:/path}`, never literally."""
    timeout: Duration = 10.0
    """How long one request may go unanswered before the store counts as unreachable."""


OffsetStoreConfig = Annotated[SqliteStoreConfig | CassandraStoreConfig, Field(discriminator="kind")]


class CanaryConfig(_Model):
    """The canary: probe records written to every flow's source and read on its target."""

    topic: str = "mirror-canary"
    """The canary topic, created on every source and mirrored by every flow whatever its patterns."""
    interval: Duration = 10.0
    """How often a probe is written (`mirror canary run`)."""
    max_latency: Duration = 30.0
    """A probe not on the target this long after it was written counts as late."""


class MetricsConfig(_Model):
    """The Prometheus endpoint of `mirror run` and the other daemons."""

    port: Annotated[int, Field(ge=0, le=65535)] = 9308
    """The port /metrics is served on (a command's `--metrics-port` overrides it)."""
    host: str = "0.0.0.0"
    """The address /metrics listens on. 0.0.0.0 so a containerised exporter can be scraped;
    set 127.0.0.1 on shared hosts."""


class SparkConfig(_Model):
    """Settings of the Spark engine that are not per flow."""

    checkpoint_dir: str = ".mirror/spark"
    """Each flow's Structured Streaming checkpoint goes in <checkpoint_dir>/<flow name>, kept
    across restarts (`mirror spark run --checkpoint` overrides it). A relative path is taken
    from the config file's directory, like the SQLite offset store's, so a driver started
    from elsewhere finds the same checkpoint. In cluster deploy mode it must be a path the
    driver's host can reach. Spark engine only."""


class Config(_Model):
    """The topology file: clusters, the flows between them, and shared settings."""

    clusters: Annotated[dict[Name, ClusterConfig], Field(min_length=1)]
    """The Kafka clusters, by name (letters, digits, `_`, `-`)."""
    flows: Annotated[list[FlowConfig], Field(min_length=1)]
    """The flows: what is mirrored from where to where."""
    offset_store: OffsetStoreConfig = SqliteStoreConfig()
    """Where the offset map and group checkpoints are kept (`kind: sqlite` or `cassandra`)."""
    canary: CanaryConfig = CanaryConfig()
    """The canary's topic and timings."""
    metrics: MetricsConfig = MetricsConfig()
    """Where /metrics is served."""
    spark: SparkConfig = SparkConfig()
    """Settings of the Spark engine that are not per flow."""

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


def load(
    path: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    *,
    offline: bool = False,
    warnings: list[ConfigWarning] | None = None,
) -> Config:
    """Read, interpolate and validate a topology file (`offline`, `warnings`: see `parse`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            "-c/--config", f"cannot read {str(p)!r}: {exc.strerror}", hint="pass the path of a topology YAML file"
        ) from None
    env = os.environ if env is None else env
    config = parse(text, env=env, source=str(p), offline=offline, warnings=warnings)
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


def parse(
    text: str,
    *,
    env: Mapping[str, str],
    source: str = "<config>",
    offline: bool = False,
    warnings: list[ConfigWarning] | None = None,
) -> Config:
    """Validate a topology file's text; every problem is raised at once.

    `offline`: the file is being checked away from where it runs (a laptop, CI), so a secret
    this machine does not have (an unset `${VAR}`, a missing `${file:}`) is a warning, not an
    error; its value is taken as empty. `warnings` collects what is wrong but not fatal.
    """
    raw, problems = read_yaml(text, source)
    if not isinstance(raw, dict):
        raise ConfigError(
            None,
            f"{source}: expected a mapping with 'clusters' and 'flows' at the top",
            hint="see configs/dev.yaml for the shape",
        )
    # Every problem in the file is collected and reported at once: fixing a config one
    # error per run is how a 3 a.m. change takes an hour.
    notes = literal_secrets(raw)
    found = Interpolation([], [])
    raw = interpolate(raw, env, found)
    problems += found.errors
    if offline:
        notes += [ConfigWarning(p.key, f"{p.message} (offline: not checked)") for p in found.absent]
    else:
        problems += found.absent
    absent = {p.key for p in found.absent}
    config: Config | None = None
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        # An absent secret already explains whatever its empty value breaks.
        problems += [p for p in _validation_problems(exc) if p.key not in absent]
    clusters, flows = _salvage(raw, config)
    problems += _client_problems(clusters, flows)
    canary_topic = config.canary.topic if config is not None else _raw_canary_topic(raw)
    problems += _topology_problems(clusters, flows, canary_topic)
    if config is None and not problems:
        problems = list(found.absent)  # offline, yet the key cannot be empty: the error stands
    if problems:
        raise problems[0] if len(problems) == 1 else ConfigProblems(problems)
    assert config is not None
    if warnings is not None:
        warnings += notes
    return config


def _raw_canary_topic(raw: Mapping[str, Any]) -> str:
    canary = raw.get("canary")
    return str((canary if isinstance(canary, dict) else {}).get("topic", CanaryConfig().topic))


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


REFERENCE = "docs/config.md"


def _validation_problems(exc: ValidationError) -> list[ConfigError]:
    out = []
    for err in exc.errors(include_url=False):
        kind = err["type"]
        path = _loc_path(err["loc"])
        if kind == "extra_forbidden":
            message, hint = "unknown key", _unknown_key_hint(err["loc"])
        elif kind == "missing":
            message, hint = "required key is missing", f"add it; see {REFERENCE}"
        elif kind == "union_tag_invalid":
            message, hint = "unknown kind", "use 'sqlite' or 'cassandra'"
        elif kind == "string_pattern_mismatch":
            message, hint = f"{err['input']!r} is not a valid name", "use letters, digits, '_' and '-' only"
        else:
            message, hint = err["msg"].removeprefix("Value error, "), f"see {_reference_key(path)} in {REFERENCE}"
        out.append(ConfigError(path, message, hint=hint))
    return out


def _reference_key(path: str, *, item: bool = False) -> str:
    """A key path as the reference lists it: `flows[2].commit_interval` -> `flows[].commit_interval`
    (`item`: the path names an entry of a list or mapping, `flows[2]` -> `flows[]`)."""
    path = re.sub(r"^clusters\.[^.]+", "clusters.NAME", re.sub(r"\[\d+\]", "[]", path))
    return path if item else path.removesuffix("[]")


def _unknown_key_hint(loc: Sequence[Any]) -> str:
    """The closest known key where an unknown one was written (a typo's fix), and the reference."""
    known = _known_keys(loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    where = f"see the keys of {_reference_key(_loc_path(loc[:-1]), item=True) or 'the top level'} in {REFERENCE}"
    return f"did you mean `{close[0]}`? {where}" if close else where


def _known_keys(loc: Sequence[Any]) -> list[str]:
    """The keys the model accepts at a pydantic error location (its parents' path)."""
    node: Any = Config
    for part in loc:
        node = _unwrap(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = node.model_fields.get(str(part))
            if field is None:
                return []
            node = field.annotation
        elif get_origin(node) in (list, dict):
            node = get_args(node)[-1]
        elif isinstance(node, list):  # a discriminated union: the tag names the member
            node = next((m for m in node if m.model_fields["kind"].default == part), None)
    node = _unwrap(node)
    return list(node.model_fields) if isinstance(node, type) and issubclass(node, BaseModel) else []


def _unwrap(node: Any) -> Any:
    """An annotation without `Annotated`/`| None`; a union of models as the list of its members."""
    while get_origin(node) is Annotated:
        node = get_args(node)[0]
    if get_origin(node) in (Union, UnionType):
        members = [a for a in get_args(node) if a is not type(None)]
        models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        if len(members) == 1:
            return _unwrap(members[0])
        return models if len(models) > 1 else (models[0] if models else node)
    return node


M = TypeVar("M", bound=BaseModel)


def _lenient(model: type[M], body: Any) -> M | None:
    """`body` validated with its bad optional keys left at their defaults (their own errors are
    already reported), so the cross-checks still see the rest; None when a required key is bad."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        if not isinstance(body, dict):
            return None
        bad = {err["loc"][0] for err in exc.errors() if err["loc"]}
        if any(str(k) in model.model_fields and model.model_fields[str(k)].is_required() for k in bad):
            return None
        try:
            return model.model_validate({k: v for k, v in body.items() if k not in bad})
        except ValidationError:
            return None


def _salvage(
    raw: dict[str, Any], config: Config | None
) -> tuple[dict[str, ClusterConfig | None] | None, list[tuple[int, FlowConfig]]]:
    """The clusters and flows the cross-checks can look at, even when others are invalid.

    An entry with a bad optional key is looked at without it. A cluster whose required key
    is bad still counts as defined (its own error is already reported; "unknown cluster" for
    every flow naming it would be noise); such a flow is left out of the cross-checks.
    """
    if config is not None:
        return dict(config.clusters), list(enumerate(config.flows))
    clusters: dict[str, ClusterConfig | None] | None = None  # None: no usable `clusters:` at all
    if isinstance(raw.get("clusters"), dict):
        clusters = {str(name): _lenient(ClusterConfig, body) for name, body in raw["clusters"].items()}
    flows: list[tuple[int, FlowConfig]] = []
    if isinstance(raw.get("flows"), list):
        for i, body in enumerate(raw["flows"]):
            flow = _lenient(FlowConfig, body)
            if flow is not None:
                flows.append((i, flow))
    return clusters, flows


def _topology_problems(
    clusters: Mapping[str, ClusterConfig | None] | None, flows: Sequence[tuple[int, FlowConfig]], canary_topic: str
) -> list[ConfigError]:
    """Cross-references pydantic cannot see: cluster names, duplicate flows, loops."""
    return (
        _reference_problems(clusters, flows)
        + _collision_problems(flows, canary_topic)
        + _name_length_problems(flows, canary_topic)
    )


def _name_length_problems(flows: Sequence[tuple[int, FlowConfig]], canary_topic: str) -> list[ConfigError]:
    """Target names Kafka would refuse as too long, for the topics known from the file alone:
    literal include patterns, and the canary topic every flow mirrors. Regexes are checked
    against the topics they match, online (`mirror validate`) and by `mirror run`."""
    out: list[ConfigError] = []
    for i, flow in flows:
        named = [(f"flows[{i}].topics.include[{j}]", literal_name(p)) for j, p in enumerate(flow.topics.include)]
        for key, topic in [*named, (f"flows[{i}]", canary_topic)]:
            target = target_topic(topic, flow.source, flow.rename) if topic else ""
            if len(target) > MAX_TOPIC_NAME:
                what = "the canary topic" if key == f"flows[{i}]" else "topic"
                out.append(
                    ConfigError(
                        key,
                        f"{what} {topic!r} would be mirrored as {target!r} ({len(target)} characters), longer than "
                        f"Kafka's limit of {MAX_TOPIC_NAME}",
                        hint="use a shorter cluster name or topic, or rename: identity",
                    )
                )
    return out


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
        _is({"error", "earliest", "smallest", "beginning"}),
        "must stay error or earliest: the mirror handles a position out of range itself and reports "
        "the records the source deleted before they were copied (the flow's on_source_gap chooses what follows)",
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
