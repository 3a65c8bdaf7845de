"""Target topics follow their sources: config changes and partition increases reach the target
while `mirror run` runs, and `mirror topics --check` says so (exit 1 before, 0 after)."""

from __future__ import annotations

import signal

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourceType,
)

from mirror.cli import main
from tests.support.kafkautil import create_topic, producer, topics, wait_for
from tests.support.metrics import scrape, total
from tests.support.mirrorproc import MirrorProcess
from tests.support.prometheus import free_port


def _configs(bootstrap: str, topic: str) -> dict[str, str]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the answer is in
    entries = admin.describe_configs([res])[res].result(30)
    return {k: e.value for k, e in entries.items()}


def _alter(bootstrap: str, topic: str, **settings: str) -> None:
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()
    ]
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([res])[res].result(30)


def _grow(bootstrap: str, topic: str, total_partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, total_partitions)])[topic].result(30)


def test_config_changes_and_partition_increases_follow_the_source(clusters, write_config, unique, capsys):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    a, b = f"ts-{unique}.a", f"ts-{unique}.b"
    create_topic(src, a, 2, {"retention.ms": "86400000"})
    create_topic(src, b, 2)
    # The target's owner gave b more partitions and its own segment size: neither is undone.
    create_topic(dst, f"src.{b}", 3, {"segment.ms": "3600000"})
    p = producer(src)
    for i in range(20):
        p.produce(a, value=b"%d" % i, partition=i % 2)
        p.produce(b, value=b"%d" % i, partition=i % 2)
    p.flush(30)
    flow = f"f-{unique}"
    cfg = write_config(f"""\
flows:
  - name: {flow}
    source: src
    target: dst
    consumer_group: mirror-{unique}
    topics: {{include: ["ts-{unique}\\\\..*"]}}
    refresh_interval: 10m
    sync_topic_configs_interval: 2s
""")
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    assert _configs(dst, f"src.{a}")["retention.ms"] == "86400000"  # copied at creation

    _alter(src, a, retention_ms="3600000", cleanup_policy="compact,delete")
    _grow(src, a, 3)
    capsys.readouterr()
    assert main(["topics", "-c", str(cfg), "--check"]) == 1
    out = capsys.readouterr()
    assert "retention.ms: 3600000 -> 86400000" in out.out and "cleanup.policy: compact,delete -> default" in out.out
    assert f"src.{a}" in out.err

    port = free_port()
    with MirrorProcess(cfg, "--metrics-port", str(port)) as m:

        def in_line(partitions: int) -> bool:
            c = _configs(dst, f"src.{a}")
            return (c["retention.ms"], c["cleanup.policy"], topics(dst)[f"src.{a}"]) == (
                "3600000",
                "compact,delete",
                partitions,
            )

        # The worker's first refresh grows a to 3 partitions; the configs are the syncer's.
        wait_for(lambda: in_line(3), 60, "the target to follow the source's configs", detail=m.output)
        # Refreshes are 10 minutes apart: this increase can only be the syncer's.
        _grow(src, a, 4)
        wait_for(lambda: in_line(4), 60, "the target to follow the partition increase", detail=m.output)
        samples = scrape(port)
        assert total(samples, "mirror_topic_config_drift", flow=flow, topic=a) == 0
        assert total(samples, "mirror_topic_config_drift", flow=flow, topic=b) == 0
        assert (total(samples, "mirror_topic_sync_changes_total", flow=flow) or 0) >= 3  # 2 configs + 1 increase
        assert not total(samples, "mirror_topic_sync_failures_total", flow=flow)
        m.signal(signal.SIGTERM)
        assert m.wait(60) == 0, m.output()

    capsys.readouterr()
    assert main(["topics", "-c", str(cfg), "--check"]) == 0, capsys.readouterr()
    assert topics(dst)[f"src.{b}"] == 3  # never lowered to the source's 2
    assert _configs(dst, f"src.{b}")["segment.ms"] == "3600000"  # not a copied config: left alone
