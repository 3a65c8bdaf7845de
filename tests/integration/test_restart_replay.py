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
