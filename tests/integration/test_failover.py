"""Offset map, checkpoints and failover on real Kafka (and real Cassandra)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from mirror.cli import main
from mirror.config import load, parse
from mirror.run.checkpointer import GroupCheckpointer
from mirror.store import open_store
from tests.support.kafkautil import create_topic, read_partition, wait_for
from tests.support.metrics import poll, scrape, total
from tests.support.mirrorproc import MirrorProcess
from tests.support.prometheus import free_port

# ---------------------------------------------------------------------------- helpers


@pytest.fixture(params=["sqlite", "cassandra"])
def store_yaml(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> str:
    if request.param == "sqlite":
        return f"offset_store:\n  kind: sqlite\n  path: {tmp_path / 'offsets.db'}\n"
    node = request.getfixturevalue("cassandra")
    return (
        f"offset_store:\n  kind: cassandra\n  contact_points: ['{node.contact_point}']\n  keyspace: mirror_{unique}\n"
        "  consistency: ONE\n  timeout: 5s\n"
    )


def topology(unique: str, include: str, store: str, *, groups: str = "['app-.*']", extra: str = "") -> str:
    return f"""\
flows:
  - name: f-{unique}
    source: src
    target: dst
    consumer_group: mirror-{unique}
    refresh_interval: 1s
    commit_interval: 300ms
    checkpoint_interval: 1s
    topics: {{include: {include}}}
    groups: {groups}
{extra}{store}"""


def produce(
    bootstrap: str,
    topic: str,
    partition: int,
    values: list[bytes],
    *,
    key: bytes | None = None,
    timestamp: int | None = None,
) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})  # keeps produce order
    for v in values:
        kwargs = {"timestamp": timestamp} if timestamp is not None else {}
        p.produce(topic, value=v, key=key if key is not None else v, partition=partition, **kwargs)
    assert p.flush(30) == 0


def produce_transactions(
    bootstrap: str, topic: str, partition: int, batches: list[tuple[list[bytes], bool]], tid: str
) -> None:
    """Each batch in its own transaction, committed or aborted: aborted records and the
    commit/abort markers are source offsets with no record on the target (gaps)."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5})
    p.init_transactions(30)
    for values, commit in batches:
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v, key=v, partition=partition)
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)


def consume_and_commit(bootstrap: str, group: str, topic: str, counts: dict[int, int]) -> dict[int, tuple[bytes, int]]:
    """Read `counts[p]` records of each partition as `group` and commit the consumer's position.

    Returns per partition (value of the last record read, committed position)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    out: dict[int, tuple[bytes, int]] = {}
    try:
        for p, n in counts.items():
            committed = _committed(c, topic, p)
            c.assign([TopicPartition(topic, p, max(committed, 0))])
            last = None
            got = 0
            deadline = time.monotonic() + 30
            while got < n and time.monotonic() < deadline:
                for m in c.consume(n - got, timeout=0.5):
                    if m.error() is None:
                        last, got = m.value(), got + 1
            assert got == n, f"{topic}[{p}]: read {got} of {n}"
            # librdkafka's position after the last record: what a real consumer commits.
            pos = c.position([TopicPartition(topic, p)])[0].offset
            c.commit(offsets=[TopicPartition(topic, p, pos)], asynchronous=False)
            out[p] = (last, pos)
            c.unassign()
    finally:
        c.close()
    return out


def _committed(c: Consumer, topic: str, partition: int) -> int:
    """The group's committed offset; a new cluster answers NOT_COORDINATOR for a moment."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return c.committed([TopicPartition(topic, partition)], timeout=10)[0].offset
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return {
            tp.partition: tp.offset
            for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        }
    finally:
        c.close()


def values_from(bootstrap: str, topic: str, partition: int, offset: int) -> list[bytes]:
    return [r.value for r in read_partition(bootstrap, topic, partition) if r.offset >= offset]


def cli(*args: str) -> int:
    return main(list(args))


# ---------------------------------------------------------------------------- exactness


def _cleaner_backoff(bootstrap: str, ms: int | None) -> None:
    """Set (or, with None, delete back to Kafka's 15 s default) each broker's
    log.cleaner.backoff.ms, a dynamic broker setting: the broker restarts its cleaner
    threads with it, so the next cleaning pass starts now instead of after the old backoff."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    op = AlterConfigOpType.SET if ms is not None else AlterConfigOpType.DELETE
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for broker in admin.list_topics(timeout=10).brokers:  # per broker (the client takes no cluster default)
        res = ConfigResource(
            ConfigResource.Type.BROKER,
            str(broker),
            incremental_configs=[
                ConfigEntry("log.cleaner.backoff.ms", str(ms) if ms is not None else None, incremental_operation=op)
            ],
        )
        admin.incremental_alter_configs([res])[res].result(30)


def make_compacted(bootstrap: str, topic: str, log: Path | None = None, timeout: float = 180.0) -> list[int]:
    """A compacted topic whose log really has holes; returns the surviving offsets.

    A record of its own key first, so the rounds compacted away leave a hole inside the log
    (not just a later start) from the first cleaning pass on. The broker's cleaner never
    touches the active segment, so the topic rolls segments every 100 ms and a new record is
    written until holes show up. The cleaner wakes every log.cleaner.backoff.ms (15 s by
    default) when it found nothing to clean: that backoff is lowered on the cluster while
    this topic is made, and restored (Kafka's default) after."""
    create_topic(
        bootstrap,
        topic,
        1,
        {
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "100",
        },
    )
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})  # keeps produce order
    p.produce(topic, key=b"first", value=b"first", partition=0)  # never compacted: offset 0 stays
    for rnd in range(4):  # 8 keys written 4 times: compaction keeps the last round
        for k in range(8):
            p.produce(topic, key=b"k%d" % k, value=b"c%d-k%d" % (rnd, k), partition=0)
    assert p.flush(30) == 0
    _cleaner_backoff(bootstrap, 300)
    try:
        deadline = time.monotonic() + timeout
        n = 0
        while time.monotonic() < deadline:
            offsets = [r.offset for r in read_partition(bootstrap, topic, 0)]
            if offsets and offsets[-1] - offsets[0] + 1 > len(offsets) + 8:
                return offsets
            produce(bootstrap, topic, 0, [b"tick%d" % n], key=b"tick")  # rolls the segment; one key, so it compacts too
            n += 1
            time.sleep(0.3)  # the cleaner's pace (the backoff above); polled, bounded by the deadline
    finally:
        _cleaner_backoff(bootstrap, None)
    # Once in wave 4's CI the cleaner cleaned nothing for 90 s: name what it was doing meanwhile.
    cleaner = [ln for ln in log.read_text(errors="replace").splitlines() if "Cleaner" in ln] if log else []
    raise AssertionError(
        f"{topic} was not compacted within {timeout:g}s; the cleaner's last lines:\n" + "\n".join(cleaner[-15:])
    )


def test_planned_failover_is_exact_across_gaps(clusters, write_config, unique, store_yaml, capsys) -> None:
    """Compacted topic, transactional topic with aborted batches, plain topic; group part-way:
    apply --translate, and on every partition the group's first record on the target is
    exactly the one after its last on the source. Zero lost, zero duplicated."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    txn, plain, cmp, group = f"txn-{unique}", f"plain-{unique}", f"cmp-{unique}", f"app-{unique}"
    make_compacted(src, cmp, clusters.dev.node("src").spec.log_file)
    create_topic(src, txn, 1)
    create_topic(src, plain, 2)
    produce_transactions(
        src,
        txn,
        0,
        [
            ([b"t%d" % i for i in range(5)], True),
            ([b"aborted%d" % i for i in range(5)], False),
            ([b"t%d" % i for i in range(5, 12)], True),
            ([b"aborted-b%d" % i for i in range(3)], False),
            ([b"t%d" % i for i in range(12, 20)], True),
        ],
        tid=f"tx-{unique}",
    )
    for p in range(2):
        produce(src, plain, p, [b"p%d-%d" % (p, i) for i in range(40)])
    config = write_config(topology(unique, f"['{txn}', '{plain}', '{cmp}']", store_yaml))

    assert main(["run", "-c", str(config), "--until-caught-up"]) == 0
    store = open_store(load(config).offset_store)
    try:  # the gaps really are there: each one started a new offset-map row
        assert len(store.syncs(f"f-{unique}", cmp, 0)) > 1 and len(store.syncs(f"f-{unique}", txn, 0)) >= 3
        assert len(store.syncs(f"f-{unique}", plain, 0)) == 1
    finally:
        store.close()

    # The group read part of each partition on the source (positions fall inside gaps too).
    read_txn = consume_and_commit(src, group, txn, {0: 7})
    read_plain = consume_and_commit(src, group, plain, {0: 13, 1: 1})
    read_cmp = consume_and_commit(src, group, cmp, {0: 3})
    cmp_src = read_partition(src, cmp, 0)
    cmp_next = next(r.value for r in cmp_src if r.offset >= read_cmp[0][1])

    rc = cli("failover", "plan", "-c", str(config), "--flow", f"f-{unique}", "--group", group, "--translate", "--json")
    plan = json.loads(capsys.readouterr().out)
    assert rc == 0 and plan["method"] == "translate" and plan["source_of_truth"] == "source-offsets"
    assert all(p["unmirrored"] == 0 for p in plan["partitions"]), plan

    backup = config.parent / f"backup-{unique}.json"
    assert (
        cli(
            "failover",
            "apply",
            "-c",
            str(config),
            "--flow",
            f"f-{unique}",
            "--group",
            group,
            "--translate",
            "--yes",
            "--backup",
            str(backup),
        )
        == 0
    )
    assert backup.exists()

    expected = {
        (f"src.{txn}", 0): (read_txn[0][0], b"t7"),
        (f"src.{plain}", 0): (read_plain[0][0], b"p0-13"),
        (f"src.{plain}", 1): (read_plain[1][0], b"p1-1"),
        (f"src.{cmp}", 0): (read_cmp[0][0], cmp_next),
    }
    assert len(plan["partitions"]) == 4
    for (ttopic, p), (last_read, next_value) in expected.items():
        off = group_offsets(dst, group, ttopic, p + 1)[p]
        target = read_partition(dst, ttopic, p)
        at = [r for r in target if r.offset >= off]
        before = [r for r in target if r.offset < off]
        assert at and at[0].value == next_value, (
            f"{ttopic}[{p}] starts at {at[0].value if at else None}, want {next_value}"
        )
        assert before[-1].value == last_read  # nothing skipped (lost) and nothing repeated


# ---------------------------------------------------------------------------- growth


def test_offset_map_grows_with_partitions_not_records(clusters, write_config, unique, store_yaml) -> None:
    src = clusters.bootstrap("src")
    topic = f"grow-{unique}"
    create_topic(src, topic, 4)
    p = Producer({"bootstrap.servers": src, "linger.ms": 20, "batch.num.messages": 10000, "enable.idempotence": True})
    for i in range(100_000):
        while True:
            try:
                p.produce(topic, value=b"%d" % i, partition=i % 4)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    config = write_config(topology(unique, f"['{topic}']", store_yaml))
    assert main(["run", "-c", str(config), "--until-caught-up"]) == 0
    store = open_store(load(config).offset_store)
    try:
        rows = store.sync_count(f"f-{unique}")
    finally:
        store.close()
    assert rows == 4, f"{rows} offset-map rows for 100000 gap-free records in 4 partitions"


# ---------------------------------------------------------------------------- timestamps


def test_at_time_starts_each_partition_at_first_record_not_before(
    clusters, write_config, unique, tmp_path, capsys
) -> None:
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, group = f"ts-{unique}", f"app-{unique}"
    create_topic(src, topic, 2)
    base = int(time.time() * 1000) - 600_000
    for p in range(2):
        produce(src, topic, p, [b"early%d" % i for i in range(3)], timestamp=base)
        produce(src, topic, p, [b"same%d" % i for i in range(4 + p)], timestamp=base + 1000)  # share one ms
        produce(src, topic, p, [b"late%d" % i for i in range(3)], timestamp=base + 2000)
    config = write_config(
        topology(unique, f"['{topic}']", f"offset_store:\n  kind: sqlite\n  path: {tmp_path / 'o.db'}\n")
    )
    assert main(["run", "-c", str(config), "--until-caught-up"]) == 0
    consume_and_commit(src, group, topic, {0: 1, 1: 1})

    rc = cli(
        "failover",
        "plan",
        "-c",
        str(config),
        "--flow",
        f"f-{unique}",
        "--group",
        group,
        "--at",
        str(base + 1000),
        "--json",
    )
    plan = json.loads(capsys.readouterr().out)
    assert rc == 0 and plan["method"] == "timestamp" and plan["source_of_truth"] == "target-timestamps"
    by_part = {p["partition"]: p for p in plan["partitions"]}
    for p in range(2):
        target = read_partition(dst, f"src.{topic}", p)
        first = next(r for r in target if r.timestamp >= base + 1000)
        assert by_part[p]["target_offset"] == first.offset and first.value == b"same0"
        assert by_part[p]["boundary_records"] == 4 + p
    assert plan["boundary_records"] == 9

    # Between two timestamps: the first record after; ISO 8601 works the same.
    from mirror.cli.times import format_ms

    rc = cli(
        "failover",
        "apply",
        "-c",
        str(config),
        "--flow",
        f"f-{unique}",
        "--group",
        group,
        "--at",
        format_ms(base + 1500),
        "--yes",
        "--backup",
        str(tmp_path / "b.json"),
    )
    assert rc == 0
    offs = group_offsets(dst, group, f"src.{topic}", 2)
    for p in range(2):
        target = read_partition(dst, f"src.{topic}", p)
        assert [r.value for r in target if r.offset == offs[p]] == [b"late0"]


# ---------------------------------------------------------------------------- active group, backup, import


def test_active_group_refused_then_backup_and_import_restore(clusters, write_config, unique, tmp_path, capsys) -> None:
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, group = f"act-{unique}", f"app-{unique}"
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"v%d" % i for i in range(30)])
    config = write_config(
        topology(
            unique,
            f"['{topic}']",
            f"offset_store:\n  kind: sqlite\n  path: {tmp_path / 'o.db'}\n",
            extra="    sync_group_offsets: true\n",
        )
    )
    assert main(["run", "-c", str(config), "--until-caught-up"]) == 0
    consume_and_commit(src, group, topic, {0: 20})
    consume_and_commit(dst, group, f"src.{topic}", {0: 3})  # the group's own offsets on the target: 3
    args = [
        "failover",
        "apply",
        "-c",
        str(config),
        "--flow",
        f"f-{unique}",
        "--group",
        group,
        "--translate",
        "--yes",
        "--backup",
        str(tmp_path / "b.json"),
    ]

    member = Consumer({"bootstrap.servers": dst, "group.id": group, "enable.auto.commit": False})
    member.subscribe([f"src.{topic}"])
    stop = threading.Event()
    t = threading.Thread(target=lambda: [member.poll(0.2) for _ in iter(stop.is_set, True)], daemon=True)
    t.start()
    try:
        wait_for(lambda: _members(dst, group) > 0, 30, "consumer joined the target group")
        capsys.readouterr()
        assert cli(*args) == 3
        assert "active member" in capsys.readouterr().err
        assert group_offsets(dst, group, f"src.{topic}", 1)[0] == 3
        assert not (tmp_path / "b.json").exists()
        # sync_group_offsets never writes for a group with members on the target.
        cfg = load(config)
        store = open_store(cfg.offset_store)
        try:
            tick = GroupCheckpointer(cfg, cfg.flows[0], store).tick()
        finally:
            store.close()
        assert tick.skipped_active == [group] and not tick.synced_groups
        assert group_offsets(dst, group, f"src.{topic}", 1)[0] == 3
    finally:
        stop.set()
        t.join(10)
        member.close()

    assert cli(*args) == 0
    assert group_offsets(dst, group, f"src.{topic}", 1)[0] == 20
    backup = json.loads((tmp_path / "b.json").read_text())
    assert backup["group"] == group and backup["offsets"] == [{"topic": f"src.{topic}", "partition": 0, "offset": 3}]
    assert cli("failover", "import", "-c", str(config), "--cluster", "dst", str(tmp_path / "b.json"), "--yes") == 0
    assert group_offsets(dst, group, f"src.{topic}", 1)[0] == 3
    # export writes the same format import reads.
    assert (
        cli(
            "failover",
            "export",
            "-c",
            str(config),
            "--cluster",
            "dst",
            "--group",
            group,
            "--out",
            str(tmp_path / "e.json"),
        )
        == 0
    )
    assert json.loads((tmp_path / "e.json").read_text())["offsets"] == backup["offsets"]


def _metric(port: int, name: str, labels: dict[str, str]) -> float | None:
    try:
        return total(scrape(port, timeout=5), name, **labels)
    except OSError:
        return None  # not serving yet


def _members(bootstrap: str, group: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    desc = admin.describe_consumer_groups([group])[group].result(10)
    return len(desc.members or [])


# ---------------------------------------------------------------------------- bad input


def test_bad_input_exit_codes_and_nothing_changed(clusters, write_config, unique, tmp_path, capsys) -> None:
    src = clusters.bootstrap("src")
    topic = f"bad-{unique}"
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"x"])
    second = f"  - name: nogroups-{unique}\n    source: dst\n    target: src\n    topics: {{include: ['{topic}']}}\n"
    config = write_config(
        topology(unique, f"['{topic}']", f"offset_store:\n  kind: sqlite\n  path: {tmp_path / 'o.db'}\n", extra=second)
    )
    flow = f"f-{unique}"
    capsys.readouterr()
    assert (
        cli("failover", "plan", "-c", str(config), "--flow", flow, "--group", f"app-nobody-{unique}", "--translate")
        == 2
    )
    assert "no committed offsets" in capsys.readouterr().err
    assert (
        cli("failover", "plan", "-c", str(config), "--flow", f"nogroups-{unique}", "--group", "app-x", "--translate")
        == 2
    )
    assert "groups" in capsys.readouterr().err
    assert (
        cli("failover", "plan", "-c", str(config), "--flow", flow, "--group", "app-x", "--at", "2999-01-01T00:00:00Z")
        == 2
    )
    assert "--at" in capsys.readouterr().err
    assert cli("failover", "plan", "-c", str(config), "--flow", flow, "--group", "app-x", "--at", "tuesday") == 2
    assert "--at" in capsys.readouterr().err
    assert (
        cli("failover", "apply", "-c", str(config), "--flow", flow, "--group", "app-x", "--translate") == 2
    )  # no --yes
    assert "--yes" in capsys.readouterr().err
    assert not list(tmp_path.glob("failover-backup-*"))

    # The group's topic not mirrored yet: nothing to plan (exit 1, one line).
    group = f"app-{unique}"
    consume_and_commit(src, group, topic, {0: 1})
    assert cli("failover", "plan", "-c", str(config), "--flow", flow, "--group", group, "--translate") == 1
    assert "nothing to fail over" in capsys.readouterr().err

    # The store unreachable during plan: exit 1, one line.
    assert main(["run", "-c", str(config), "--until-caught-up"]) == 0
    dead = write_config(
        topology(
            unique,
            f"['{topic}']",
            "offset_store:\n  kind: cassandra\n  contact_points: ['127.0.0.1:9']\n  timeout: 2s\n",
        )
    )
    assert cli("failover", "plan", "-c", str(dead), "--flow", flow, "--group", group, "--translate") == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("Error: offset store") and len(err.splitlines()) == 1


# ---------------------------------------------------------------------------- checkpoints + unplanned


def test_unplanned_failover_uses_checkpoints(clusters, write_config, unique, tmp_path, store_yaml, capsys) -> None:
    """Source cluster stopped: the plan falls back to checkpoints; duplicates are at most what
    the group consumed since its last checkpoint; unmirrored is what never arrived."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, group = f"unp-{unique}", f"app-{unique}"
    create_topic(src, topic, 2)
    for p in range(2):
        produce(src, topic, p, [b"%d-%d" % (p, i) for i in range(100)])
    config = write_config(topology(unique, f"['{topic}']", store_yaml, extra="    sync_group_offsets: true\n"))
    assert main(["run", "-c", str(config), "--until-caught-up"]) == 0
    consume_and_commit(src, group, topic, {0: 30, 1: 30})
    for p in range(2):
        produce(src, topic, p, [b"%d-%d" % (p, i) for i in range(100, 125)])  # never mirrored

    cfg = load(config)
    store = open_store(cfg.offset_store)
    try:
        result = GroupCheckpointer(cfg, cfg.flows[0], store).tick()
    finally:
        store.close()
    assert sorted((c.partition, c.source_offset, c.target_offset) for c in result.checkpoints) == [
        (0, 30, 30),
        (1, 30, 30),
    ]
    assert result.synced_groups == [group]  # idle on the target: sync_group_offsets wrote it there
    assert group_offsets(dst, group, f"src.{topic}", 2) == {0: 30, 1: 30}
    since = {0: 20, 1: 5}
    last_read = consume_and_commit(src, group, topic, since)  # consumed after the last checkpoint

    # The source cluster is gone, as the failover tools meet it: nothing answers at its
    # address (a killed broker's port refuses connections the same way; stopping and
    # restarting the session's broker cost ~25 s per run of this test). `unmirrored` is
    # what the target's last look at the source, the checkpoint, recorded.
    down = tmp_path / "source-down.yaml"
    down.write_text(
        config.read_text().replace(f"bootstrap: {src}\n    timeout: 10s\n", "bootstrap: 127.0.0.1:9\n    timeout: 2s\n")
    )
    assert "127.0.0.1:9" in down.read_text()
    rc = cli("failover", "plan", "-c", str(down), "--flow", f"f-{unique}", "--group", group, "--translate", "--json")
    plan = json.loads(capsys.readouterr().out)
    assert rc == 0 and plan["source_of_truth"] == "checkpoints"
    for part in plan["partitions"]:
        assert part["source_offset"] == 30 and part["target_offset"] == 30
        assert part["unmirrored"] == 25  # 125 on the source, 100 reached the target
    assert (
        cli(
            "failover",
            "apply",
            "-c",
            str(down),
            "--flow",
            f"f-{unique}",
            "--group",
            group,
            "--translate",
            "--yes",
            "--backup",
            str(tmp_path / "b.json"),
        )
        == 0
    )
    offs = group_offsets(dst, group, f"src.{topic}", 2)
    for p in range(2):
        resumed = values_from(dst, f"src.{topic}", p, offs[p])
        assert resumed[0] == b"%d-30" % p  # nothing lost: the record after the checkpoint
        duplicates = resumed.index(last_read[p][0]) + 1  # records it will read a second time
        assert duplicates <= since[p]


# ---------------------------------------------------------------------------- store outage


def test_cassandra_stopped_while_mirroring_loses_nothing(clusters, write_config, unique, cassandra, capsys) -> None:
    """The store goes away mid-run: records keep flowing, source commits stop (lag grows,
    the metric says why), and when Cassandra is back the mirror catches up by itself with
    an offset map that still translates exactly."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, group = f"cas-{unique}", f"app-{unique}"
    create_topic(src, topic, 1)
    produce(src, topic, 0, [b"a%d" % i for i in range(50)])
    store = (
        f"offset_store:\n  kind: cassandra\n  contact_points: ['{cassandra.contact_point}']\n"
        f"  keyspace: mirror_{unique}\n  consistency: ONE\n  timeout: 3s\n"
    )
    config = write_config(topology(unique, f"['{topic}']", store))
    assert main(["run", "-c", str(config), "--until-caught-up"]) == 0
    assert group_offsets(src, f"mirror-{unique}", topic, 1)[0] == 50

    cassandra.stop()
    restarted = False
    try:
        # New data with a delta change (an aborted transaction leaves a gap): a row that
        # must be stored before the mirror may commit past it.
        produce_transactions(
            src,
            topic,
            0,
            [([b"x%d" % i for i in range(5)], False), ([b"b%d" % i for i in range(30)], True)],
            tid=f"tx-{unique}",
        )
        port = free_port()
        flow_label = {"flow": f"f-{unique}"}
        with MirrorProcess(config, "--until-caught-up", "--metrics-port", str(port)) as mirror:
            wait_for(
                lambda: len(read_partition(dst, f"src.{topic}", 0)) == 80,
                60,
                "records mirrored while the store is down",
            )
            poll(
                lambda: _metric(port, "mirror_offset_store_healthy", flow_label) == 0,
                60,
                what="the store-health metric to drop",
            )
            assert group_offsets(src, f"mirror-{unique}", topic, 1)[0] == 50  # no commit past the unsaved delta
            assert mirror.alive()  # not caught up: it keeps trying, it does not give up
            errors = _metric(port, "mirror_offset_store_errors_total", flow_label)

            cassandra.start()
            cassandra.wait_ready()
            restarted = True
            # Recovers by itself: the metric goes back to 1 and the run finishes (caught up, committed).
            poll(
                lambda: not mirror.alive() or _metric(port, "mirror_offset_store_healthy", flow_label) == 1,
                120,
                what="the store-health metric to recover",
            )
            assert mirror.wait(180) == 0, mirror.output()[-3000:]
    finally:
        if not restarted:
            cassandra.start()
            cassandra.wait_ready()
    assert errors is not None and errors >= 1
    end = group_offsets(src, f"mirror-{unique}", topic, 1)[0]
    assert end >= 86  # 50 + 5 aborted + marker + 30 (+ marker): committed to the end
    values = [r.value for r in read_partition(dst, f"src.{topic}", 0)]
    assert values == [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(30)]  # nothing lost, nothing twice

    # The row written after the outage translates exactly: a group that read a0..a49, b0..b9.
    consume_and_commit(src, group, topic, {0: 60})
    assert (
        cli(
            "failover",
            "apply",
            "-c",
            str(config),
            "--flow",
            f"f-{unique}",
            "--group",
            group,
            "--translate",
            "--yes",
            "--backup",
            str(config.parent / "b.json"),
        )
        == 0
    )
    off = group_offsets(dst, group, f"src.{topic}", 1)[0]
    assert values[off] == b"b10"


# ---------------------------------------------------------------------------- failback


def test_failback_reports_stranded_records_scrapes_and_reverses(
    clusters, write_config, unique, tmp_path, capsys
) -> None:
    src = clusters.bootstrap("src")
    topic, group = f"fb-{unique}", f"app-{unique}"
    create_topic(src, topic, 2)
    for p in range(2):
        produce(src, topic, p, [b"v%d" % i for i in range(40)])
    # Only this test's group: the scrape deletes every group the patterns match.
    config = write_config(
        topology(
            unique,
            f"['{topic}']",
            f"offset_store:\n  kind: sqlite\n  path: {tmp_path / 'o.db'}\n",
            groups=f"['{group}']",
        )
    )
    assert main(["run", "-c", str(config), "--until-caught-up"]) == 0
    produce(src, topic, 1, [b"late%d" % i for i in range(7)])  # accepted by the old primary, never mirrored
    consume_and_commit(src, group, topic, {0: 10})
    flow = f"f-{unique}"

    capsys.readouterr()
    assert cli("failback", "-c", str(config), "--flow", flow, "--json") == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["old_primary"] == "src" and rep["new_primary"] == "dst" and rep["never_mirrored"] == 7
    assert {p["partition"]: p["never_mirrored"] for p in rep["partitions"]} == {0: 0, 1: 7}
    assert sorted(rep["groups"]) == sorted([group, f"mirror-{unique}"]) and not rep["scraped"]

    reversed_doc = yaml.safe_load(rep["reversed_flow"])
    assert reversed_doc["flows"][0]["source"] == "dst" and reversed_doc["flows"][0]["target"] == "src"
    clusters_yaml = config.read_text().split("flows:")[0]
    parse(clusters_yaml + rep["reversed_flow"], env={})  # the printed flow is a valid config

    assert cli("failback", "-c", str(config), "--flow", flow, "--scrape") == 2  # needs --yes
    assert cli("failback", "-c", str(config), "--flow", flow, "--scrape", "--yes") == 0
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": src})
    left = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    assert group not in left and f"mirror-{unique}" not in left
    c = Consumer({"bootstrap.servers": src, "group.id": "probe"})
    try:
        for p in range(2):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            assert lo == hi  # the old primary's copy is gone; the new primary is the truth
    finally:
        c.close()


# ---------------------------------------------------------------------------- mirror run's checkpointer


def test_mirror_run_stores_checkpoints_of_the_flow_groups(clusters, write_config, unique, tmp_path) -> None:
    """`mirror run` checkpoints the groups matching `groups` (and only those), translated."""
    src = clusters.bootstrap("src")
    topic, group, other = f"cp-{unique}", f"app-{unique}", f"other-{unique}"
    create_topic(src, topic, 2)
    for p in range(2):
        produce(src, topic, p, [b"%d" % i for i in range(30)])
    consume_and_commit(src, group, topic, {0: 12, 1: 30})
    consume_and_commit(src, other, topic, {0: 5})
    config = write_config(
        topology(
            unique,
            f"['{topic}']",
            f"offset_store:\n  kind: sqlite\n  path: {tmp_path / 'o.db'}\n",
            groups=f"['{group}']",
        )
    )
    before_ms = int(time.time() * 1000)
    assert main(["run", "-c", str(config), "--until-caught-up"]) == 0
    store = open_store(load(config).offset_store)
    try:
        cps = store.checkpoints(f"f-{unique}", group)
        assert [(c.partition, c.source_offset, c.target_offset) for c in cps] == [(0, 12, 12), (1, 30, 30)]
        assert all(c.time_ms >= before_ms for c in cps)
        assert store.checkpoints(f"f-{unique}", other) == []
        assert store.source_ends(f"f-{unique}")[(topic, 0)][0] == 30
    finally:
        store.close()
