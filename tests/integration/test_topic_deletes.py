"""`sync_topic_deletes`: a clean target topic follows its source into deletion after the grace;
one holding a record the mirror did not write is kept with a WARNING; a source topic deleted and
created again within the grace keeps its target (and is mirrored again)."""

from __future__ import annotations

from tests.support.kafkautil import create_topic, delete_topic, producer, read_partition, topics, wait_for
from tests.support.mirrorproc import MirrorProcess


def _produce(bootstrap: str, topic: str, values: list[bytes], headers: list | None = None) -> None:
    p = producer(bootstrap)
    for v in values:
        p.produce(topic, value=v, partition=0, headers=headers)
    assert p.flush(30) == 0


def test_deletions_follow_the_source_only_for_clean_mirror_topics(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    clean, foreign, back = (f"td-{unique}.{n}" for n in ("clean", "foreign", "back"))
    for t in (clean, foreign, back):
        create_topic(src, t, 1)
        _produce(src, t, [b"%d" % i for i in range(20)])
    grace = 15
    cfg = write_config(f"""\
flows:
  - name: f-{unique}
    source: src
    target: dst
    consumer_group: mirror-{unique}
    topics: {{include: ["td-{unique}\\\\..*"]}}
    refresh_interval: 2s
    sync_topic_configs_interval: 1s
    sync_topic_deletes: true
    topic_delete_grace: {grace}s
""")
    with MirrorProcess(cfg) as m:

        def mirrored(topic: str, n: int) -> bool:
            return f"src.{topic}" in topics(dst) and len(read_partition(dst, f"src.{topic}", 0)) >= n

        for t in (clean, foreign, back):
            wait_for(lambda t=t: mirrored(t, 20), 90, f"{t} to be mirrored", detail=m.output)
        # Somebody writes to the copy of `foreign` on the target.
        _produce(dst, f"src.{foreign}", [b"not the mirror's"])
        for t in (clean, foreign, back):
            delete_topic(src, t)
        wait_for(
            lambda: f"source topic {back} is gone" in m.output(), 60, "the grace to start for back", detail=m.output
        )
        create_topic(src, back, 1)  # within the grace
        _produce(src, back, [b"new-%d" % i for i in range(5)])
        wait_for(
            lambda: f"source topic {back} is back within topic_delete_grace" in m.output(),
            60,
            "the deleter to see back again",
            detail=m.output,
        )
        wait_for(lambda: f"src.{clean}" not in topics(dst), 120, "the clean copy to be deleted", detail=m.output)
        wait_for(lambda: f"target topic src.{foreign} is kept" in m.output(), 60, "the kept warning", detail=m.output)
        # Past the grace of back's first deletion: its copy is still there and got the new records.
        wait_for(
            lambda: {b"new-%d" % i for i in range(5)} <= {r.value for r in read_partition(dst, f"src.{back}", 0)},
            90,
            "the re-created source's records on the target",
            detail=m.output,
        )
        m.stop()
        log = m.output()
    assert f"src.{foreign}" in topics(dst) and f"src.{back}" in topics(dst)
    kept = [line for line in log.splitlines() if f"target topic src.{foreign} is kept" in line]
    assert len(kept) == 1 and "WARNING" in kept[0], kept
    assert f"src.{foreign}[0]@20 was not written by the mirror (it has no provenance header)" in kept[0]
    assert f"deleted target topic src.{clean}" in log
    assert f"deleted target topic src.{back}" not in log
    assert " ERROR " not in log and "Traceback" not in log, log
    assert "source cluster id not recorded" not in log  # DescribeCluster answered: recorded with each topic


def test_the_cassandra_store_keeps_created_topics_per_flow(cassandra, unique):
    from mirror.config import CassandraStoreConfig
    from mirror.store.base import CreatedTopic
    from mirror.store.cassandra import CassandraStore

    store = CassandraStore(
        CassandraStoreConfig(
            kind="cassandra", contact_points=[cassandra.contact_point], keyspace=f"mirror_{unique}", consistency="ONE"
        )
    )
    try:
        store.record_created_topics("f", [CreatedTopic("nyc.a", "a", "id-a", 1), CreatedTopic("nyc.b", "b", "", 2)])
        store.record_created_topics("g", [CreatedTopic("nyc.a", "a", "id-g", 3)])
        assert sorted(store.created_topics("f"), key=lambda c: c.target) == [
            CreatedTopic("nyc.a", "a", "id-a", 1),
            CreatedTopic("nyc.b", "b", "", 2),
        ]
        store.forget_created_topic("f", "nyc.a")
        assert [c.target for c in store.created_topics("f")] == ["nyc.b"]
        assert [c.topic_id for c in store.created_topics("g")] == ["id-g"]
        store.record_created_topics("h", [CreatedTopic("nyc.c", "c", "id-c", 4, source_cluster_id="cluster-1")])
        assert [c.source_cluster_id for c in store.created_topics("h")] == ["cluster-1"]
    finally:
        store.close()


def test_a_cassandra_created_topics_table_without_the_source_cluster_id_gains_it(cassandra, unique):
    from mirror.config import CassandraStoreConfig
    from mirror.store.base import CreatedTopic
    from mirror.store.cassandra import CassandraStore

    config = CassandraStoreConfig(
        kind="cassandra", contact_points=[cassandra.contact_point], keyspace=f"mirror_{unique}", consistency="ONE"
    )
    first = CassandraStore(config)
    try:
        ks = f"mirror_{unique}"
        first._run("reshape", lambda s: s.execute(f"DROP TABLE {ks}.created_topics", timeout=60))
        first._run(
            "reshape",
            lambda s: s.execute(
                f"CREATE TABLE {ks}.created_topics (flow text, target text, source text, topic_id text, "
                "time_ms bigint, PRIMARY KEY ((flow), target))",
                timeout=60,
            ),
        )  # the table as it first shipped
        first._run(
            "write",
            lambda s: s.execute(
                f"INSERT INTO {ks}.created_topics (flow, target, source, topic_id, time_ms) "
                "VALUES ('f', 'nyc.old', 'old', 'id-old', 1)"
            ),
        )
    finally:
        first.close()
    store = CassandraStore(config)
    try:
        store.record_created_topics("f", [CreatedTopic("nyc.a", "a", "id-a", 2, source_cluster_id="cluster-1")])
        found = {c.target: c.source_cluster_id for c in store.created_topics("f")}
        assert found == {"nyc.a": "cluster-1", "nyc.old": ""}
    finally:
        store.close()
