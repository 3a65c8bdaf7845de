"""The topology file: YAML -> one validated, immutable model tree.

Everything a user can get wrong in the file is caught here, once, with the key path of
the offending entry (`flows[1].topics.include[0]`) and how to fix it. Nothing downstream
re-validates. pydantic does the typing and unknown-key rejection; the cross-references
(cluster names, duplicate flows, loops) are checked in `_check_topology`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)

from .errors import ConfigError
from .naming import (
    FlowEdge,
    RenamePolicy,
    TopicFilter,
    find_identity_collisions,
    find_identity_cycles,
)

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


class TopicsConfig(_Model):
    include: Annotated[list[Regex], Field(min_length=1)]
    exclude: list[Regex] = []


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
    consumer: ClientSettings = {}  # extra librdkafka settings for the source consumer
    producer: ClientSettings = {}  # extra librdkafka settings for the target producer

    @property
    def group_id(self) -> str:
        return self.consumer_group or f"mirror.{self.name}"

    def topic_filter(self, canary_topic: str | None = None) -> TopicFilter:
        return TopicFilter.of(self.topics.include, self.topics.exclude, [canary_topic] if canary_topic else [])


class SqliteStoreConfig(_Model):
    kind: Literal["sqlite"] = "sqlite"
    path: str = ".mirror/offsets.db"  # a relative path is taken from the config file's directory


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


class Config(_Model):
    clusters: Annotated[dict[Name, ClusterConfig], Field(min_length=1)]
    flows: Annotated[list[FlowConfig], Field(min_length=1)]
    offset_store: OffsetStoreConfig = SqliteStoreConfig()
    canary: CanaryConfig = CanaryConfig()
    metrics: MetricsConfig = MetricsConfig()

    def flow(self, name: str) -> FlowConfig:
        for f in self.flows:
            if f.name == name:
                return f
        known = ", ".join(f.name for f in self.flows)
        raise ConfigError("--flow", f"no flow named {name!r}", hint=f"flows in this file: {known}")

    def select_flows(self, names: Sequence[str] = ()) -> list[FlowConfig]:
        return [self.flow(n) for n in names] if names else list(self.flows)

    def cluster(self, name: str) -> ClusterConfig:
        try:
            return self.clusters[name]
        except KeyError:
            known = ", ".join(self.clusters)
            raise ConfigError("--cluster", f"no cluster named {name!r}", hint=f"clusters in this file: {known}") from None


# ---------------------------------------------------------------------------- loading

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


def load(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read, interpolate and validate a topology file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("-c/--config", f"cannot read {str(p)!r}: {exc.strerror}", hint="pass the path of a topology YAML file") from None
    config = parse(text, env=os.environ if env is None else env, source=str(p))
    store = config.offset_store
    if isinstance(store, SqliteStoreConfig) and not Path(store.path).is_absolute():
        # Relative to the file, not the working directory: a daemon started from another
        # directory (systemd, cron, a container) must find the same offset map.
        resolved = store.model_copy(update={"path": str(p.resolve().parent / store.path)})
        config = config.model_copy(update={"offset_store": resolved})
    return config


def parse(text: str, *, env: Mapping[str, str], source: str = "<config>") -> Config:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(None, f"{source}: YAML syntax error at {where}: {problem}", hint="fix the YAML syntax") from None
    if not isinstance(raw, dict):
        raise ConfigError(None, f"{source}: expected a mapping with 'clusters' and 'flows' at the top", hint="see configs/dev.yaml for the shape")
    raw = _interpolate(raw, env, "")
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        raise _config_error(exc) from None
    _check_topology(config)
    return config


def _interpolate(node: Any, env: Mapping[str, str], path: str) -> Any:
    if isinstance(node, dict):
        return {k: _interpolate(v, env, _join(path, k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate(v, env, f"{path}[{i}]") for i, v in enumerate(node)]
    if isinstance(node, str) and "${" in node:

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise ConfigError(path, f"environment variable {name} is not set", hint=f"export {name}, or write ${{{name}:-default}}")

        return _VAR.sub(sub, node)
    return node


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _loc_path(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("sqlite", "cassandra") and out.endswith("offset_store"):
            continue  # pydantic's discriminated-union tag, not a key the user wrote
        else:
            out = _join(out, part)
    return out


def _config_error(exc: ValidationError) -> ConfigError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    key = _loc_path(first["loc"])
    kind = first["type"]
    if kind == "extra_forbidden":
        message, hint = "unknown key", "check the spelling against DESIGN.md's config shape"
    elif kind == "missing":
        message, hint = "required key is missing", "add it"
    elif kind == "union_tag_invalid":
        message, hint = "unknown kind", "use 'sqlite' or 'cassandra'"
    elif kind == "string_pattern_mismatch":
        message, hint = f"{first['input']!r} is not a valid name", "use letters, digits, '_' and '-' only"
    else:
        message = first["msg"].removeprefix("Value error, ")
        hint = None
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return ConfigError(key, message, hint=hint)


def _check_topology(config: Config) -> None:
    """Cross-references pydantic cannot see: cluster names, duplicate flows, loops."""
    names: dict[str, int] = {}
    for i, flow in enumerate(config.flows):
        for role in ("source", "target"):
            cluster = getattr(flow, role)
            if cluster not in config.clusters:
                known = ", ".join(config.clusters)
                raise ConfigError(f"flows[{i}].{role}", f"unknown cluster {cluster!r}", hint=f"clusters defined: {known}")
        if flow.source == flow.target:
            raise ConfigError(f"flows[{i}].target", f"source and target are both {flow.source!r}", hint="a flow mirrors between two different clusters")
        if flow.name in names:
            raise ConfigError(f"flows[{i}].name", f"duplicate flow name {flow.name!r} (also flows[{names[flow.name]}])", hint="give each flow its own name")
        names[flow.name] = i
    pairs: dict[tuple[str, str], str] = {}
    for i, flow in enumerate(config.flows):
        pair = (flow.source, flow.target)
        if pair in pairs:
            raise ConfigError(
                f"flows[{i}]",
                f"flow {flow.name!r} mirrors {flow.source} -> {flow.target} like flow {pairs[pair]!r}",
                hint="merge their topic patterns into one flow",
            )
        pairs[pair] = flow.name
    edges = [FlowEdge(f.name, f.source, f.target, f.rename, tuple(f.topics.include)) for f in config.flows]
    collisions = find_identity_collisions(edges)
    if collisions:
        a, b = collisions[0]
        raise ConfigError(
            "flows",
            f"flows {a} and {b} both write topics with their source names into one target cluster; records from two sources would share a topic",
            hint="use rename: prefix on at least one of them, or make their include patterns disjoint literals",
        )
    cycles = find_identity_cycles(edges)
    if cycles:
        loop = " -> ".join(cycles[0])
        raise ConfigError(
            "flows",
            f"flows {loop} form a loop with rename: identity; a record would be mirrored back to where it came from",
            hint="use rename: prefix on at least one of them, or make their include patterns disjoint literals",
        )


_SECRET = re.compile(r"password|secret|token|(^|\.)key$|jaas", re.IGNORECASE)


def redact(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Client settings fit for a log line: secret values replaced."""
    return {k: ("***" if _SECRET.search(k) else v) for k, v in settings.items()}
