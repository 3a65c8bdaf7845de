"""MirrorMaker 2 in dedicated mode (`org.apache.kafka.connect.mirror.MirrorMaker`), as users run it.

The jars (connect-mirror and connect-mirror-client of the same Kafka release as the dev
clusters, with their dependencies) come from Maven Central through deps/mm2/pom.xml
(`make bench-setup`). The JVM flags are those of Kafka's own `connect-mirror-maker.sh`
(-Xms256M -Xmx2G, G1), so its memory figure is what an SRE would see.

Settings are matched to the other contenders where MM2's config allows it (see
`properties`); what cannot be matched is said in bench/README.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

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
) -> str:
    """mm2.properties for one source -> target flow of one topic pattern.

    Internal topics get replication factor 1 (single-node dev clusters). Heartbeats,
    checkpoints and offset syncs stay at their defaults: they are MM2's counterpart of this
    project's offset map and checkpointer, and part of what a user runs.
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
    for key, value in producer.items():
        lines.append(f"{target_alias}.producer.{key} = {_java_value(value)}")
    for key, value in consumer.items():
        lines.append(f"{source_alias}.consumer.{key} = {_java_value(value)}")
    return "\n".join(lines) + "\n"


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
