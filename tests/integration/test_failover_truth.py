"""The failover commands tell the truth when clusters are down or nothing can be planned.

"Down" is a bootstrap address nobody listens on (127.0.0.1:9): what the tools meet when a
broker is gone, without stopping the session's clusters under other tests.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mirror.cli import main
from mirror.config import load
from mirror.domain.offsetmap import Checkpoint
from mirror.store import open_store
from tests.integration.test_failover import group_offsets, produce
from tests.support.kafkautil import create_topic

DEAD = "127.0.0.1:9"


def _config(path: Path, source: str, target: str, unique: str, *, groups: str = "['billing.*']") -> Path:
    path.write_text(
        f"""\
clusters:
  nyc: {{bootstrap: '{source}', timeout: 2s}}
  sf: {{bootstrap: '{target}', timeout: 5s}}
flows:
  - name: nyc-to-sf
    source: nyc
    target: sf
    consumer_group: mirror-{unique}
    topics: {{include: ['orders-{unique}']}}
    groups: {groups}
offset_store: {{kind: sqlite, path: '{path.parent / "offsets.db"}'}}
"""
    )
    return path


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return err


def test_a_site_plan_moving_no_group_is_refused_saying_why(tmp_path, unique, capsys) -> None:
    """Both clusters down, no checkpoint: exit 3, why per flow, no plan file to apply."""
    cfg = _config(tmp_path / "m.yaml", DEAD, DEAD, unique)
    out = tmp_path / "p.json"
    assert main(["failover", "plan", "-c", str(cfg), "--from", "nyc", "--translate", "--out", str(out)]) == 3
    err = _err(capsys)
    assert "flow nyc-to-sf" in err and "cluster 'nyc' did not answer" in err and "billing.*" in err, err
    assert not out.exists()


def test_a_site_plan_with_no_live_group_and_no_checkpoint_is_refused(clusters, tmp_path, unique, capsys) -> None:
    """Both clusters up, but no group matches the flow's `groups:` anywhere."""
    cfg = _config(tmp_path / "m.yaml", clusters.bootstrap("src"), clusters.bootstrap("dst"), unique)
    cfg.write_text(cfg.read_text().replace("billing.*", f"billing-{unique}.*"))
    assert main(["failover", "plan", "-c", str(cfg), "--from", "nyc", "--translate", "--json"]) == 3
    err = _err(capsys)
    assert "flow nyc-to-sf" in err and "no group on 'nyc'" in err and f"billing-{unique}.*" in err, err
    assert "did not answer" not in err


def test_one_group_with_its_source_down_and_no_checkpoint_says_the_cluster_did_not_answer(
    tmp_path, unique, capsys
) -> None:
    cfg = _config(tmp_path / "m.yaml", DEAD, DEAD, unique)
    args = ["failover", "plan", "-c", str(cfg), "--flow", "nyc-to-sf", "--group", "billing-1", "--translate"]
    assert main(args) == 1
    err = _err(capsys)
    assert "cluster 'nyc' did not answer" in err and len(err.strip().splitlines()) == 1, err


def test_one_group_plan_from_checkpoints_is_saved_and_applied_as_a_plan_file(
    clusters, tmp_path, unique, capsys
) -> None:
    """The source down: the plan falls back to the stored checkpoints and says so; `--out`
    writes the plan file format `apply --plan` takes, which moves the group as planned."""
    dst = clusters.bootstrap("dst")
    topic, group = f"orders-{unique}", f"billing-{unique}"
    create_topic(dst, f"nyc.{topic}", 2)  # what the mirror copied before the source went away
    for p in range(2):
        produce(dst, f"nyc.{topic}", p, [b"%d" % i for i in range(10)])
    cfg = _config(tmp_path / "m.yaml", DEAD, dst, unique)
    store = open_store(load(cfg).offset_store)
    try:
        now = int(time.time() * 1000)
        store.write_checkpoints("nyc-to-sf", [Checkpoint(group, topic, p, 4 + p, 4 + p, now) for p in range(2)])
    finally:
        store.close()
    out = tmp_path / "one.json"
    base = ["failover", "plan", "-c", str(cfg), "--flow", "nyc-to-sf", "--group", group, "--translate"]
    assert main([*base, "--out", str(out), "-v"]) == 0
    printed = capsys.readouterr().out
    assert "note: the source did not answer: positions are the group's newest checkpoints" in printed, printed
    assert f"apply it with: mirror failover apply --plan {out} --yes" in printed, printed
    doc = json.loads(out.read_text())
    assert doc["kind"] == "site-failover-plan" and [g["group"] for g in doc["groups"]] == [group], doc
    assert {(r["partition"], r["offset"]) for r in doc["groups"][0]["offsets"]} == {(0, 4), (1, 5)}
    assert main(["failover", "apply", "--plan", str(out), "--yes"]) == 0
    assert group_offsets(dst, group, f"nyc.{topic}", 2) == {0: 4, 1: 5}
