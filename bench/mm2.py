"""MirrorMaker 2 in dedicated mode (`org.apache.kafka.connect.mirror.MirrorMaker`), as users run it.

The jars (connect-mirror and connect-mirror-client of the same Kafka release as the dev
clusters, with their dependencies) come from Maven Central through deps/mm2/pom.xml
(`make bench-setup`). The JVM flags are those of Kafka's own `connect-mirror-maker.sh`
(-Xms256M -Xmx2G, G1), so its memory figure is what an SRE would see.

Settings are matched to the other contenders where MM2's config allows it (see
`properties`); what cannot be matched is said in bench/README.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from mirror.devenv.kafka import LOG4J2_PROPERTIES

KAFKA_VERSION = "4.1.1"
CACHE = Path(os.environ.get("MIRROR_CACHE", Path.home() / ".cache" / "mirror"))


def libs() -> Path:
    path = Path(os.environ.get("MIRROR_MM2_LIBS", CACHE / f"mm2-{KAFKA_VERSION}" / "libs"))
    if not (path / f"connect-mirror-{KAFKA_VERSION}.jar").exists():
        raise FileNotFoundError(f"MirrorMaker 2 jars not found in {path}: run `make bench-setup`")
    return path


def available() -> bool:
    try:
        libs()
    except FileNotFoundError:
        return False
    return True


def properties(
    source_alias: str,
    source_bootstrap: str,
    target_alias: str,
    target_bootstrap: str,
    topic_regex: str,
    tasks: int,
    producer: Mapping[str, object],
    consumer: Mapping[str, object],
    *,
    exactly_once_rest_port: int | None = None,
    transaction_interval_ms: int | None = None,
) -> str:
    """mm2.properties for one source -> target flow of one topic pattern.

    Internal topics get replication factor 1 (single-node dev clusters). Heartbeats,
    checkpoints and offset syncs stay at their defaults: they are MM2's counterpart of this
    project's offset map and checkpointer, and part of what a user runs.

    `exactly_once_rest_port`: exactly-once source support on the target, as Kafka's
    geo-replication docs give it for dedicated mode (see `exactly_once_lines`);
    `transaction_interval_ms`: with it, a transaction per interval instead of per poll.
    """
    lines = [
        f"clusters = {source_alias}, {target_alias}",
        f"{source_alias}.bootstrap.servers = {source_bootstrap}",
        f"{target_alias}.bootstrap.servers = {target_bootstrap}",
        f"{source_alias}->{target_alias}.enabled = true",
        f"{source_alias}->{target_alias}.topics = {topic_regex}",
        f"{target_alias}->{source_alias}.enabled = false",
        f"tasks.max = {tasks}",
        # Single-node clusters: every topic MM2 creates must have one replica.
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "offset.storage.replication.factor = 1",
        "status.storage.replication.factor = 1",
        "config.storage.replication.factor = 1",
        # The harness pre-creates target topics (LogAppendTime, see bench/load.py); MM2 must
        # not rewrite their configs. ACL sync needs an authorizer the dev clusters lack.
        "sync.topic.configs.enabled = false",
        "sync.topic.acls.enabled = false",
        # Connect commits source offsets every 60 s by default; 10 s is closer to what
        # `mirror run` does and costs MM2 nothing measurable.
        "offset.flush.interval.ms = 10000",
        # Start-up only: skip the reflective classpath scan for Connect plugins (Connect's own
        # start-up warning recommends it); no effect on the data path.
        "plugin.discovery = service_load",
        # Dedicated mode hands its Connect worker (which runs on the target) only the
        # target-prefixed keys and a few top-level ones (offset.storage.*, ...): without the
        # prefix the two worker settings above are ignored (its log shows 60000 and hybrid_warn).
        f"{target_alias}.offset.flush.interval.ms = 10000",
        f"{target_alias}.plugin.discovery = service_load",
    ]
    if exactly_once_rest_port is not None:
        lines += exactly_once_lines(target_alias, exactly_once_rest_port)
    if transaction_interval_ms is not None:
        # Connector-level (KIP-618): the pair prefix reaches MM2's connectors' configs.
        lines += [
            f"{source_alias}->{target_alias}.transaction.boundary = interval",
            f"{source_alias}->{target_alias}.transaction.boundary.interval.ms = {transaction_interval_ms}",
        ]
    for key, value in producer.items():
        lines.append(f"{target_alias}.producer.{key} = {_java_value(value)}")
    for key, value in consumer.items():
        lines.append(f"{source_alias}.consumer.{key} = {_java_value(value)}")
    return "\n".join(lines) + "\n"


def exactly_once_lines(target_alias: str, rest_port: int) -> list[str]:
    """Exactly-once writes to the target (KIP-618 in dedicated mode, Kafka >= 3.5).

    The worker that writes to the target runs its source tasks in transactions; the default
    transaction boundary (one per task poll) is kept, as the docs leave it. The docs require
    the internal REST server of KIP-710 with it (followers forward zombie fencing to the
    leader); one node would run without it, but this is the documented setup. The source
    consumer must read read_committed or MirrorSourceConnector declares exactly-once
    unsupported: the engine settings passed as `consumer` already do.
    """
    return [
        f"{target_alias}.exactly.once.source.support = enabled",
        "dedicated.mode.enable.internal.rest = true",
        f"listeners = http://127.0.0.1:{rest_port}",
    ]


class Progress:
    """The source offsets MM2 has committed for one topic, read from its worker's offsets topic.

    With exactly-once support a task's source offsets are written in the same target
    transaction as the records they cover, so a read_committed reader of this topic knows
    how far the committed copy goes without reading the copy (whose end offsets include
    commit markers). Keys are `["MirrorSourceConnector", {"cluster", "partition", "topic"}]`,
    values `{"offset": last copied source offset}` (MirrorSourceTask, MirrorUtils).
    """

    def __init__(self, target_bootstrap: str, source_alias: str, topic: str) -> None:
        self.offsets_topic = f"mm2-offsets.{source_alias}.internal"  # MirrorMakerConfig's default
        self.source_alias = source_alias
        self.topic = topic
        self.committed: dict[int, int] = {}
        self._c = Consumer(
            {
                "bootstrap.servers": target_bootstrap,
                "group.id": "bench-mm2-progress",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
        self._assigned = False

    def covers(self, source_ends: list[int]) -> bool:
        """Every source partition's last record (end - 1) committed on the target."""
        self._read()
        return covers(self.committed, source_ends)

    def _read(self) -> None:
        if not self._assigned:
            try:
                meta = self._c.list_topics(self.offsets_topic, timeout=5).topics.get(self.offsets_topic)
            except KafkaException:
                return
            if meta is None or meta.error is not None or not meta.partitions:
                return  # MM2 has not created it yet
            self._c.assign([TopicPartition(self.offsets_topic, p, OFFSET_BEGINNING) for p in meta.partitions])
            self._assigned = True
        for msg in self._c.consume(10000, 0.1):
            if msg.error() is None:
                found = source_offset(msg.key(), msg.value(), self.source_alias, self.topic)
                if found is not None:
                    p, offset = found
                    self.committed[p] = max(offset, self.committed.get(p, -1))

    def close(self) -> None:
        self._c.close()


def source_offset(key: bytes | None, value: bytes | None, source_alias: str, topic: str) -> tuple[int, int] | None:
    """(partition, last copied offset) of one offsets-topic record of MirrorSourceConnector
    for `topic` of `source_alias`; None for anything else (other connectors, tombstones)."""
    try:
        connector, partition = json.loads(key or b"null")
        offset = json.loads(value)["offset"] if value else None
    except (TypeError, ValueError, KeyError):
        return None
    if (
        connector == "MirrorSourceConnector"
        and isinstance(partition, dict)
        and partition.get("cluster") == source_alias
        and partition.get("topic") == topic
        and isinstance(partition.get("partition"), int)
        and isinstance(offset, int)
    ):
        return partition["partition"], offset
    return None


def covers(committed: Mapping[int, int], source_ends: list[int]) -> bool:
    """Every non-empty source partition copied up to its last record (offset end - 1)."""
    return all(end == 0 or committed.get(p, -1) >= end - 1 for p, end in enumerate(source_ends))


def _java_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def command(workdir: Path, props: Path, target_alias: str, heap: str = "-Xms256M -Xmx2G") -> list[str]:
    log4j = workdir / "log4j2.properties"
    log4j.write_text(LOG4J2_PROPERTIES)
    java = str(Path(os.environ["JAVA_HOME"]) / "bin" / "java") if os.environ.get("JAVA_HOME") else "java"
    return [
        java,
        *heap.split(),
        "-server",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:InitiatingHeapOccupancyPercent=35",
        "-XX:+ExplicitGCInvokesConcurrent",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{libs()}/*",
        "org.apache.kafka.connect.mirror.MirrorMaker",
        str(props),
        "--clusters",
        target_alias,
    ]
