"""`mirror topics` shows missing targets, partition gaps and config drift from real clusters."""

from __future__ import annotations

import json

from mirror.cli import main
from tests.support.kafkautil import create_topic


def test_topics_reports_missing_fewer_partitions_and_drift(clusters, write_config, unique, capsys):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    create_topic(src, f"tp-{unique}.a", 2, {"retention.ms": "86400000"})
    create_topic(src, f"tp-{unique}.b", 3)
    create_topic(dst, f"src.tp-{unique}.a", 1, {"retention.ms": "3600000"})
    cfg = write_config(f"""\
flows:
  - name: f-{unique}
    source: src
    target: dst
    consumer_group: mirror-{unique}
    topics: {{include: ["tp-{unique}\\\\..*"]}}
""")
    assert main(["topics", "-c", str(cfg), "--json"]) == 0
    [flow] = json.loads(capsys.readouterr().out)
    by = {t["source"]: t for t in flow["topics"]}
    a, b = by[f"tp-{unique}.a"], by[f"tp-{unique}.b"]
    assert (a["source_partitions"], a["target_partitions"]) == (2, 1)
    assert a["drift"] == {"retention.ms": ["86400000", "3600000"]}
    assert b["target_partitions"] is None and not b["ok"]

    assert main(["run", "-c", str(cfg), "--until-caught-up"]) == 0
    capsys.readouterr()
    assert main(["topics", "-c", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert f"tp-{unique}.b" in out and "3/3" in out  # created with the source's partition count
    # grown; and the drift is gone: `run --until-caught-up` ends with a topic-config sync
    # (sync_topic_configs is on by default)
    assert "2/2" in out and "retention.ms" not in out
