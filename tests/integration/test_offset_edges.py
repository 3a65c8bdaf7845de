"""Offset translation at its edges, on real clusters.

* Partitions nothing was ever mirrored from (empty on both sides, or emptied on the
  source below the group's position) still get a checkpoint, a synced offset and a plan
  entry, at the exact target offset (the target's end), not "no translation" (which makes
  the group fall back to auto.offset.reset on the target).
* With a transactional source, the offset map trails what is on the target by up to a
  commit interval; a group positioned inside that window must be translated to where it
  re-reads, never past records it has not read. And the checkpointer's offset sync must
  never move a group that `failover apply` just positioned.

One mirror run fills the target and stores the offset map; a second one, whose commit
interval is far away, then mirrors more transactions whose offset-map rows are not yet
stored: the trailing window, held open for as long as the test looks at it.
"""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from mirror.cli import main
from mirror.config import load
from mirror.kafka import Admin
from mirror.run.checkpointer import GroupCheckpointer
from mirror.store import open_store
from tests.integration.test_failover import consume_and_commit, group_offsets, produce, produce_transactions
from tests.support.kafkautil import create_topic, read_partition, wait_for
from tests.support.mirrorproc import MirrorProcess


def _flow(unique: str, topic: str, db: Path, *, commit: str, groups: str, sync: bool) -> str:
    return f"""\
flows:
  - name: f-{unique}
    source: src
    target: dst
    consumer_group: mirror-{unique}
    refresh_interval: 1s
    commit_interval: {commit}
    checkpoint_interval: 1s
    sync_group_offsets: {"true" if sync else "false"}
    topics: {{include: ['{topic}']}}
    groups: {groups}
offset_store:
  kind: sqlite
  path: {db}
"""


def _exact_target(dst: str, topic: str, partition: int, position: int) -> int:
    """Where a group at source `position` must resume on the target: the copy of the first
    source record at or after it (read from the provenance headers), or the target end."""
    recs = read_partition(dst, topic, partition)
    for r in recs:
        if int(r.provenance()["offset"]) >= position:
            return r.offset
    return recs[-1].offset + 1 if recs else 0


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        c.close()


def _tick(config: Path):
    cfg = load(config)
    store = open_store(cfg.offset_store)
    try:
        return GroupCheckpointer(cfg, cfg.flows[0], store).tick()
    finally:
        store.close()


def test_translation_edges_empty_partitions_trailing_rows_and_failover_vs_sync(
    clusters, write_config, unique, tmp_path, capsys
) -> None:
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    topic, group, inside = f"edge-{unique}", f"app-{unique}", f"app-in-{unique}"
    target = f"src.{topic}"
    db = tmp_path / "offsets.db"
    # p0: transactions (a marker after each: source gaps). p1: empty on both sides.
    # p2: 5 records deleted from the source before anything mirrored them (log start = end = 5),
    # and a target partition emptied the same way (start = end = 3): MirrorMaker 2's 0 would
    # be out of range there.
    run_once = write_config(_flow(unique, topic, db, commit="300ms", groups="[]", sync=False))
    clusters_cfg = load(run_once).clusters
    create_topic(src, topic, 3)
    create_topic(dst, target, 3)
    produce(src, topic, 2, [b"gone-%d" % i for i in range(5)])
    produce(dst, target, 2, [b"old-%d" % i for i in range(3)])
    Admin("src", clusters_cfg["src"]).delete_records({(topic, 2): 5})
    Admin("dst", clusters_cfg["dst"]).delete_records({(target, 2): 3})
    produce_transactions(
        src, topic, 0, [([b"a%d-%d" % (t, i) for i in range(4)], True) for t in range(5)], f"tx-{unique}"
    )
    assert main(["run", "-c", str(run_once), "--until-caught-up"]) == 0
    dst_admin = Admin("dst", clusters_cfg["dst"])
    checker = write_config(_flow(unique, topic, db, commit="300ms", groups="['app-.*']", sync=True))

    # The window: a mirror that acknowledges records but stores no offset-map row for an hour.
    trailing = write_config(_flow(unique, topic, db, commit="1h", groups="[]", sync=False))
    with MirrorProcess(trailing) as mirror:
        produce_transactions(
            src, topic, 0, [([b"b%d-%d" % (t, i) for i in range(4)], True) for t in range(3)], f"tx2-{unique}"
        )
        wait_for(
            lambda: dst_admin.watermarks([(target, 0)])[(target, 0)].high == 32,
            60,
            "the second mirror to copy 3 more transactions",
            detail=mirror.output,
        )

        # `group` read 8 records past the stored rows (2 more transaction markers); `inside`
        # stopped within what the offset map covers. p1 and p2: positions with nothing to read.
        window_pos = consume_and_commit(src, group, topic, {0: 28})[0][1]
        inside_pos = consume_and_commit(src, inside, topic, {0: 9})[0][1]
        _commit(src, group, {(topic, 1): 0, (topic, 2): 5})
        exact = {0: _exact_target(dst, target, 0, window_pos), 1: 0, 2: 3}
        exact_inside = _exact_target(dst, target, 0, inside_pos)

        tick = _tick(checker)
        observed: dict[str, object] = {}
        cps = {(c.group, c.partition): c.target_offset for c in tick.checkpoints}
        for p in range(3):
            observed[f"checkpoint p{p}"] = cps.get((group, p))
        observed["checkpoint inside"] = cps.get((inside, 0))
        observed["synced"] = group_offsets(dst, group, target, 3)

        capsys.readouterr()
        assert (
            main(
                [
                    "failover",
                    "plan",
                    "-c",
                    str(checker),
                    "--flow",
                    f"f-{unique}",
                    "--group",
                    group,
                    "--translate",
                    "--json",
                ]
            )
            == 0
        )
        plan = json.loads(capsys.readouterr().out)
        observed["plan"] = {p["partition"]: (p["target_offset"], p.get("exact", True)) for p in plan["partitions"]}
    mirror_log = mirror.output()

    # Records of the window the group re-reads (never skips): the window is what the second
    # mirror acknowledged since the first one's last stored row.
    rereads = exact[0] - 20
    expected = {
        "checkpoint p0": 20,
        "checkpoint p1": 0,
        "checkpoint p2": 3,
        "checkpoint inside": exact_inside,
        "synced": {0: 20, 1: 0, 2: 3},
        "plan": {0: (20, True), 1: (0, True), 2: (3, True)},
    }
    assert observed == expected, f"exact targets {exact} (window re-reads {rereads}); mirror log:\n{mirror_log[-3000:]}"
    assert 0 < rereads <= 8

    # The source is gone: the plan comes from the checkpoints, empty partitions included.
    gone = tmp_path / "gone.yaml"
    text = checker.read_text().replace(src, "127.0.0.1:9").replace("timeout: 10s", "timeout: 2s")
    gone.write_text(text)
    capsys.readouterr()
    assert (
        main(["failover", "plan", "-c", str(gone), "--flow", f"f-{unique}", "--group", group, "--translate", "--json"])
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["source_of_truth"] == "checkpoints"
    assert {p["partition"]: p["target_offset"] for p in plan["partitions"]} == {0: 20, 1: 0, 2: 3}

    # failover apply --to earliest, then a checkpoint with offset sync: the sync leaves the
    # group where the failover put it (it would otherwise jump it forward again).
    assert (
        main(
            [
                "failover",
                "apply",
                "-c",
                str(checker),
                "--flow",
                f"f-{unique}",
                "--group",
                group,
                "--to",
                "earliest",
                "--yes",
                "--backup",
                str(tmp_path / "b.json"),
            ]
        )
        == 0
    )
    assert group_offsets(dst, group, target, 3) == {0: 0, 1: 0, 2: 3}
    tick = _tick(checker)
    assert {(c.partition, c.target_offset) for c in tick.checkpoints if c.group == group} == {(0, 20), (1, 0), (2, 3)}
    assert group not in tick.synced_groups
    assert group_offsets(dst, group, target, 3) == {0: 0, 1: 0, 2: 3}
    # ... and says so: only partition 0 was held back (1 and 2 already stand where the sync would put them).
    assert tick.held == {group: [(target, 0)]}
