"""MirrorMaker 2's dedicated-mode properties -> this project's topology (pure).

`mirror import-mm2` writes the YAML from what `translate` returns; nothing here reads files
or talks to a cluster. The rules follow MM2's own resolution (MirrorMakerConfig): a key set
for a pair (`A->B.topics`) wins over the same key at the top (`topics`), which wins over
MM2's default; a cluster's client settings (`A.security.protocol`) win over top-level ones.

Secrets are never copied: a password becomes a `${VAR}` reference the operator exports (an
MM2 `${env:VAR}` reference keeps its variable), so the file can be committed and the import
never prints one. Whatever has no counterpart is listed in `Translation.untranslated` with
the reason, never dropped silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mirror.errors import ConfigError

DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
# MM2's defaults (MirrorSourceConfig, MirrorCheckpointConfig, DefaultTopicFilter, DefaultGroupFilter).
DEFAULT_TOPICS_EXCLUDE = [r".*[\-\.]internal", r".*\.replica", r"__.*"]
DEFAULT_GROUPS_EXCLUDE = [r"console-consumer-.*", r"connect-.*", r"__.*"]
SECRET_SETTINGS = ("ssl.keystore.password", "ssl.key.password", "ssl.truststore.password")

# Per-pair keys and what they become (interval keys in seconds).
_FLOW_INTERVALS = {
    "refresh.topics.interval.seconds": "refresh_interval",
    "emit.checkpoints.interval.seconds": "checkpoint_interval",
    "sync.topic.configs.interval.seconds": "sync_topic_configs_interval",
}
_FLOW_SWITCHES = {
    "sync.group.offsets.enabled": "sync_group_offsets",
    "sync.topic.configs.enabled": "sync_topic_configs",
}
# Keys read to build a flow (or that only steer MM2's own machinery) and need no line of their own.
_FLOW_CONSUMED = {
    "enabled",
    "topics",
    "topics.exclude",
    "topics.blacklist",
    "groups",
    "groups.exclude",
    "groups.blacklist",
    "replication.policy.class",
    "replication.policy.separator",
    "emit.checkpoints.enabled",
    "offset-syncs.topic.location",
    "source.cluster.alias",
    "target.cluster.alias",
    *_FLOW_INTERVALS,
    *_FLOW_SWITCHES,
}
# Client settings whose librdkafka name is the same and whose meaning carries over.
_SAME_NAME_CLIENT = {"security.protocol", "ssl.endpoint.identification.algorithm", "sasl.kerberos.service.name"}
# Not the group timings: MM2's source consumers are assigned, not in a group, so its values
# say nothing about the mirror's workers (and its defaults would be refused by the flow's rules).
_SAME_NAME_CONSUMER = {"fetch.min.bytes", "fetch.max.bytes", "max.partition.fetch.bytes"}
_SAME_NAME_PRODUCER = {"linger.ms", "compression.type", "batch.size", "batch.num.messages"}
_NO_HEARTBEATS = "no heartbeats topic: the canary (`mirror canary run`) measures the route end to end"
# Why some well-known MM2 keys are not carried over.
_REASONS = {
    "tasks.max": "no counterpart in the file: run `mirror run --workers N` (or more containers) for parallelism",
    "replication.factor": "target topics are created with the target broker's default replication factor",
    "offset.flush.interval.ms": "the mirror commits source offsets every flow commit_interval (1s by default)",
    "emit.heartbeats.enabled": _NO_HEARTBEATS,
    "emit.heartbeats.interval.seconds": _NO_HEARTBEATS,
    "sync.topic.acls.enabled": "ACLs are not synced: `mirror acls` prints what each cluster needs",
    "refresh.groups.interval.seconds": "groups are listed again at every checkpoint",
    "sync.group.offsets.interval.seconds": "group offsets are synced at every checkpoint (checkpoint_interval)",
    "exactly.once.source.support": (
        "the mirror is idempotent and commits only after the target acknowledged "
        "(duplicates only after a crash, never loss)"
    ),
}
_CONNECT_INTERNAL = re.compile(
    r"^(offset|config|status)\.storage\..*|^(key|value|header)\.converter.*|^plugin\.(path|discovery)$|.*replication\.factor$"
    r"|^dedicated\.mode\..*|^config\.providers.*|^(checkpoints|heartbeats|offset-syncs)\.topic\..*|^listeners$|^rest\..*"
)
_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_ENV_REF = re.compile(r"^\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}$")


@dataclass(frozen=True)
class Untranslated:
    key: str
    reason: str


@dataclass(frozen=True)
class Mm2Flow:
    """One enabled A->B pair: the flow written to the file and where MM2 kept its progress."""

    name: str
    source: str
    target: str
    read_committed: bool  # MM2's source consumer isolation: read_uncommitted copies aborted records too
    offsets_topic: str  # on the target: the Connect worker of a dedicated-mode pair runs there
    offset_syncs_topic: str
    offset_syncs_on_target: bool
    checkpoints_topic: str  # on the target
    connect_group: str  # the pair's Connect worker group, on the target
    heartbeat_interval: float | None = 1.0  # seconds between MM2's heartbeats on the target; None: it emits none

    @classmethod
    def of(
        cls,
        source: str,
        target: str,
        read_committed: bool,
        syncs_on_target: bool,
        separator: str = ".",
        heartbeat_interval: float | None = 1.0,
    ) -> Mm2Flow:
        return cls(
            name=f"{source}-to-{target}",
            source=source,
            target=target,
            read_committed=read_committed,
            offsets_topic=f"mm2-offsets.{source}.internal",
            offset_syncs_topic=f"mm2-offset-syncs{separator}{target}{separator}internal",
            offset_syncs_on_target=syncs_on_target,
            checkpoints_topic=f"{source}{separator}checkpoints{separator}internal",
            connect_group=f"{source}-mm2",
            heartbeat_interval=heartbeat_interval,
        )


@dataclass
class Translation:
    config: dict[str, Any]  # the topology, in the YAML file's shape
    flows: list[Mm2Flow]
    env: dict[str, str] = field(default_factory=dict)  # variable -> what to export in it
    untranslated: list[Untranslated] = field(default_factory=list)


# ---------------------------------------------------------------------------- properties


def parse_properties(text: str) -> dict[str, str]:
    """java.util.Properties' format: `key=value`, `key: value` or `key value`, `#`/`!`
    comments, a trailing backslash continues the line, backslash escapes (`\\uXXXX` too)."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        if _continues(line):
            line = line[:-1]
        key, value = _split(line)
        out[_unescape(key)] = _unescape(value)
    return out


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split(line: str) -> tuple[str, str]:
    j = 0
    while j < len(line):
        c = line[j]
        if c == "\\":
            j += 2
            continue
        if c in "=: \t\f":
            break
        j += 1
    key, rest = line[:j], line[j:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, j = [], 0
    while j < len(text):
        c = text[j]
        if c != "\\" or j + 1 == len(text):
            out.append(c)
            j += 1
            continue
        n = text[j + 1]
        if n == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[j + 2 : j + 6]):
            out.append(chr(int(text[j + 2 : j + 6], 16)))
            j += 6
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(n, n))
        j += 2
    return "".join(out)


def _list(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


# ---------------------------------------------------------------------------- translation


def translate(props: dict[str, str]) -> Translation:
    """The topology an MM2 properties file describes; ConfigError names the key that cannot be carried over."""
    aliases = _list(props.get("clusters", ""))
    if len(aliases) < 2:
        raise ConfigError(
            "clusters",
            "an MM2 file names at least two clusters (`clusters = A, B`)",
            hint="pass the properties file MirrorMaker 2 runs with",
        )
    used: set[str] = {"clusters"}
    out = Translation(config={}, flows=[])
    clusters: dict[str, Any] = {}
    for alias in aliases:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", alias):
            raise ConfigError(
                "clusters",
                f"cluster alias {alias!r} cannot be a cluster name here",
                hint="use letters, digits, '_' and '-' only (rename the alias in the MM2 file first)",
            )
        clusters[alias] = _cluster(props, alias, used, out)
    flows = []
    for source in aliases:
        for target in aliases:
            prefix = f"{source}->{target}."
            used.add(prefix + "enabled")
            if source == target or not _true(props.get(prefix + "enabled")):
                used.update(k for k in props if k.startswith(prefix))
                continue
            flows.append(_flow(props, source, target, used, out))
    if not flows:
        raise ConfigError(
            "A->B.enabled",
            "no pair is enabled (`A->B.enabled = true`): nothing to take over",
            hint="check that this is the file MirrorMaker 2 runs with",
        )
    out.config = {"clusters": clusters, "flows": flows}
    for key in sorted(set(props) - used):
        out.untranslated.append(Untranslated(key, _reason(key, aliases)))
    return out


def _reason(key: str, aliases: list[str]) -> str:
    bare = key
    for alias in aliases:
        bare = bare.removeprefix(f"{alias}.")
    bare = re.sub(r"^[^.]*->[^.]*\.", "", bare)
    if bare in _REASONS:
        return _REASONS[bare]
    if _CONNECT_INTERNAL.match(bare):
        return "MirrorMaker 2 / Kafka Connect internals; the mirror keeps its progress in its offset store"
    if bare.startswith(("consumer.", "producer.", "admin.", "source.", "target.")):
        return "no librdkafka counterpart carried over; set it under the flow's consumer:/producer: if it matters"
    return "no counterpart in mirror's config"


def _setting(props: dict[str, str], used: set[str], *keys: str) -> str | None:
    """The first key that is set (most specific first), marking every one of them read."""
    used.update(k for k in keys if k in props)
    for k in keys:
        if k in props:
            return props[k]
    return None


def _env_name(alias: str, setting: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", f"{alias}_{setting}".upper())


def _secret(value: str, var: str, what: str, out: Translation) -> str:
    ref = _ENV_REF.match(value.strip())
    name = ref.group(1) if ref else var
    out.env[name] = what
    return "${" + name + "}"


def _cluster(props: dict[str, str], alias: str, used: set[str], out: Translation) -> dict[str, Any]:
    bootstrap = _setting(props, used, f"{alias}.bootstrap.servers")
    if not bootstrap:
        raise ConfigError(
            f"{alias}.bootstrap.servers", "missing", hint="every cluster in `clusters` needs its bootstrap servers"
        )
    client: dict[str, Any] = {}

    def get(name: str) -> str | None:
        return _setting(props, used, f"{alias}.{name}", name)

    for name in sorted(_SAME_NAME_CLIENT):
        v = get(name)
        if v is not None:
            client[name] = v if v.strip() else "none" if name == "ssl.endpoint.identification.algorithm" else v
    mechanism = get("sasl.mechanism")
    if mechanism:
        client["sasl.mechanism"] = mechanism
    jaas = get("sasl.jaas.config")
    if jaas:
        fields = dict(_JAAS.findall(jaas))
        if ("PlainLoginModule" in jaas or "ScramLoginModule" in jaas) and "username" in fields:
            user = fields["username"]
            ref = _ENV_REF.match(user)
            client["sasl.username"] = "${" + ref.group(1) + "}" if ref else user
            client["sasl.password"] = _secret(
                fields.get("password", ""),
                _env_name(alias, "sasl.password"),
                f"the SASL password of {fields['username']!r} on {alias}",
                out,
            )
        else:
            out.untranslated.append(
                Untranslated(
                    f"{alias}.sasl.jaas.config",
                    "only PLAIN and SCRAM logins (username/password) are carried over; set the "
                    "librdkafka sasl.* settings under clusters." + alias + ".client",
                )
            )
    trust, trust_type = get("ssl.truststore.location"), (get("ssl.truststore.type") or "JKS").upper()
    get("ssl.truststore.password")
    if trust:
        if trust_type == "PEM":
            client["ssl.ca.location"] = trust
        else:
            out.untranslated.append(
                Untranslated(
                    f"{alias}.ssl.truststore.location",
                    f"librdkafka reads CA certificates as PEM, not {trust_type}: export them (keytool "
                    "-exportcert -rfc) and set ssl.ca.location",
                )
            )
    keystore, key_type = get("ssl.keystore.location"), (get("ssl.keystore.type") or "JKS").upper()
    key_password = get("ssl.keystore.password")
    if keystore:
        if key_type == "PKCS12":
            client["ssl.keystore.location"] = keystore
            if key_password is not None:
                client["ssl.keystore.password"] = _secret(
                    key_password, _env_name(alias, "ssl.keystore.password"), f"the keystore password of {alias}", out
                )
        else:
            out.untranslated.append(
                Untranslated(
                    f"{alias}.ssl.keystore.location",
                    f"librdkafka reads a PKCS12 keystore or PEM files, not {key_type}: convert it "
                    "(keytool -importkeystore -deststoretype PKCS12)",
                )
            )
    key_pw = get("ssl.key.password")
    if key_pw is not None and keystore and key_type == "PKCS12":
        client["ssl.key.password"] = _secret(
            key_pw, _env_name(alias, "ssl.key.password"), f"the private key password of {alias}", out
        )
    cluster: dict[str, Any] = {"bootstrap": bootstrap.strip()}
    if client:
        cluster["client"] = client
    return cluster


def _flow(props: dict[str, str], source: str, target: str, used: set[str], out: Translation) -> dict[str, Any]:
    pair = f"{source}->{target}."

    def get(name: str) -> str | None:
        return _setting(props, used, pair + name, name)

    flow: dict[str, Any] = {"name": f"{source}-to-{target}", "source": source, "target": target}
    include = _list(get("topics") or ".*")
    exclude = get("topics.exclude")
    legacy = get("topics.blacklist")
    flow["topics"] = {
        "include": include,
        "exclude": _list(exclude)
        if exclude is not None
        else _list(legacy)
        if legacy is not None
        else list(DEFAULT_TOPICS_EXCLUDE),
    }
    policy = (get("replication.policy.class") or DEFAULT_POLICY).strip()
    separator = get("replication.policy.separator")
    separator = "." if separator is None else separator
    if policy == IDENTITY_POLICY:
        flow["rename"] = "identity"
    elif policy == DEFAULT_POLICY:
        if separator != ".":
            raise ConfigError(
                "replication.policy.separator",
                f"separator {separator!r} is not supported: the mirror names remote topics SOURCE.TOPIC",
                hint="only the default separator '.' maps to rename: prefix",
            )
        flow["rename"] = "prefix"
    else:
        raise ConfigError(
            "replication.policy.class",
            f"{policy} has no counterpart",
            hint="the mirror supports DefaultReplicationPolicy (rename: prefix) and IdentityReplicationPolicy "
            "(rename: identity)",
        )
    checkpoints = get("emit.checkpoints.enabled")
    if checkpoints is None or _true(checkpoints):
        groups = _list(get("groups") or ".*")
        gex = get("groups.exclude")
        glegacy = get("groups.blacklist")
        gexclude = (
            _list(gex) if gex is not None else _list(glegacy) if glegacy is not None else list(DEFAULT_GROUPS_EXCLUDE)
        )
        flow["groups"] = [group_pattern(groups, gexclude)]
    for key, name in _FLOW_INTERVALS.items():
        v = get(key)
        if v is not None:
            flow[name] = f"{v.strip()}s"
    for key, name in _FLOW_SWITCHES.items():
        v = get(key)
        if v is not None:
            flow[name] = _true(v)
    consumer = _overrides(props, used, [f"{pair}consumer.", f"{source}.consumer.", "consumer."], _SAME_NAME_CONSUMER)
    producer = _overrides(props, used, [f"{pair}producer.", f"{target}.producer.", "producer."], _SAME_NAME_PRODUCER)
    if consumer:
        flow["consumer"] = consumer
    if producer:
        flow["producer"] = producer
    # MM2's source consumer takes `consumer.*`, then `source.consumer.*` (which the cluster's
    # `consumer.*` becomes); which wins differs between its versions. Read_committed if any of
    # them says so: counting aborted records MM2 did not copy would place later ones past
    # their copies, counting too few only re-reads.
    isolation_keys = [
        f"{pre}{mid}consumer.isolation.level" for pre in (pair, f"{source}.", "") for mid in ("", "source.")
    ]
    used.update(k for k in isolation_keys if k in props)
    committed = any(props[k].strip() == "read_committed" for k in isolation_keys if k in props)
    location = (get("offset-syncs.topic.location") or "source").strip().lower()
    # Read, not consumed: they are listed as not carried over, and tell whether MM2 still runs.
    beats = props.get(pair + "emit.heartbeats.enabled", props.get("emit.heartbeats.enabled", "true"))
    every = props.get(pair + "emit.heartbeats.interval.seconds", props.get("emit.heartbeats.interval.seconds", "1"))
    try:
        interval: float | None = float(every) if _true(beats) else None
    except ValueError:
        raise ConfigError("emit.heartbeats.interval.seconds", f"{every!r} is not a number of seconds") from None
    out.flows.append(Mm2Flow.of(source, target, committed, location == "target", separator, interval))
    return flow


def _overrides(props: dict[str, str], used: set[str], prefixes: list[str], allowed: set[str]) -> dict[str, str]:
    """Client overrides carried over with the same librdkafka name (`prefixes` most specific first)."""
    out: dict[str, str] = {}
    for prefix in prefixes:
        for key, value in props.items():
            if key.startswith(prefix) and key[len(prefix) :] in allowed:
                out.setdefault(key[len(prefix) :], value.strip())
                used.add(key)
    return out


def group_pattern(include: list[str], exclude: list[str]) -> str:
    """One full-match regex for MM2's include and exclude group lists (a flow's `groups`
    are include patterns only): a negative lookahead keeps the excluded names out."""
    inc = "|".join(include)
    if not exclude:
        return f"(?:{inc})"
    return f"(?!(?:{'|'.join(exclude)})$)(?:{inc})"
