"""A `mirror run` killed before its first commit: the restart skips what the target provably
holds (issue 37, "a restart without a replay"), and copies everything it cannot prove.

The first run commits once an hour, so the SIGKILL always comes before any commit: the group
has no offset, and the restart (committing as usual) starts from the source's beginning.
"""

from __future__ import annotations

from collections import Counter

from mirror.cli import main
from tests.integration.test_mirror_datapath import flow_yaml, produce_numbered
from tests.support.kafkautil import create_topic, end_offsets, group_offsets, producer, read_topic, wait_for
from tests.support.mirrorproc import MirrorProcess

RECORDS = 20_000
PARTITIONS = 3


def _copy_then_kill(clusters, write_config, unique: str, t: str, *, extra: str = "") -> tuple[str, str, object]:
    """Mirror `t` until the target holds every record, then SIGKILL the mirror (no commit yet)."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    create_topic(src, t, PARTITIONS)
    produce_numbered(src, t, RECORDS, PARTITIONS)
    body = flow_yaml(unique, f'["{t}"]', extra=extra)
    with MirrorProcess(write_config(body.replace("commit_interval: 500ms", "commit_interval: 1h"))) as m:
        wait_for(
            lambda: sum(end_offsets(dst, f"src.{t}", PARTITIONS).values()) >= RECORDS,
            120,
            "every record on the target",
            detail=m.output,
        )
        m.kill()
    # The test means something only if the kill came before any commit.
    assert all(o < 0 for o in group_offsets(src, f"mirror-{unique}", t, PARTITIONS).values())
    return src, dst, write_config(body)


def _contents(bootstrap: str, topic: str) -> Counter:
    return Counter(r.content() for recs in read_topic(bootstrap, topic, PARTITIONS).values() for r in recs)


def test_a_restart_after_a_kill_skips_what_the_target_holds(clusters, write_config, unique):
    t = f"replay-{unique}"
    src, dst, cfg = _copy_then_kill(clusters, write_config, unique, t)
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    source, target = _contents(src, t), _contents(dst, f"src.{t}")
    assert sum(source.values()) == RECORDS
    assert not source - target, "a source record is missing on the target"
    duplicates = sum(target.values()) - RECORDS
    print(f"duplicates after the restart: {duplicates} of {RECORDS}")
    assert duplicates <= RECORDS // 100, f"{duplicates} duplicates of {RECORDS}"
    # The commit moved over the skipped records as over copied ones.
    assert group_offsets(src, f"mirror-{unique}", t, PARTITIONS) == end_offsets(src, t, PARTITIONS)


def test_a_tail_that_proves_nothing_is_copied_again(clusters, write_config, unique):
    """A record written to the target by hand after the mirror's copies: the target's last
    record names no source offset, so nothing is skipped (duplicates, never loss)."""
    t = f"replaytail-{unique}"
    src, dst, cfg = _copy_then_kill(clusters, write_config, unique, t)
    p = producer(dst)
    for partition in range(PARTITIONS):
        p.produce(f"src.{t}", key=b"hand", value=b"by hand", partition=partition)
    assert p.flush(30) == 0
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    source, target = _contents(src, t), _contents(dst, f"src.{t}")
    assert all(target[c] == 2 for c in source), "every record copied twice: once before the kill, once after"
    assert sum(target.values()) == 2 * RECORDS + PARTITIONS


def test_without_provenance_headers_nothing_is_skipped(clusters, write_config, unique):
    t = f"replaynohdr-{unique}"
    src, dst, cfg = _copy_then_kill(clusters, write_config, unique, t, extra="    provenance_headers: false\n")
    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    source, target = _contents(src, t), _contents(dst, f"src.{t}")
    assert all(target[c] == 2 for c in source)
    assert sum(target.values()) == 2 * RECORDS


def test_the_replay_checks_read_ends_at_its_byte_budget(clusters, unique):
    """`read_ranges` with `max_bytes` (the replay check's byte budget, enforced by the read):
    small records first, then 64 KiB ones, so no size learnt from the first ones could size
    the read. It ends once the records taken cost the budget (one record past it at most),
    each partition's records in order from its range's start."""
    from mirror.config import ClusterConfig
    from mirror.domain.replay import held_size
    from mirror.kafka.reader import read_ranges

    src = clusters.bootstrap("src")
    t = f"replay-bytes-{unique}"
    create_topic(src, t, 2)
    big = b"x" * (64 << 10)
    p = producer(src)
    for part in range(2):
        for i in range(40):
            p.produce(t, key=b"k%d" % i, value=b"s" if i < 10 else big, partition=part)
    assert p.flush(60) == 0
    cluster = ClusterConfig(bootstrap=src, timeout=30)
    ranges = {(t, 0): (0, 40), (t, 1): (0, 40)}
    whole = read_ranges("src", cluster, ranges, 60)
    assert {k: [r.offset for r in recs] for k, recs in whole.items()} == {k: list(range(40)) for k in ranges}
    budget = 512 << 10
    cut = read_ranges("src", cluster, ranges, 60, budget)
    held = sum(held_size(r) for recs in cut.values() for r in recs)
    assert budget <= held <= budget + held_size(whole[(t, 0)][-1])
    for k, recs in cut.items():
        assert [r.offset for r in recs] == list(range(len(recs))), k
        assert recs == whole[k][: len(recs)]
