"""How `mirror run` starts and stops: unreachable clusters, Ctrl-C, SIGTERM."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

from mirror.cli import main
from tests.support.kafkautil import (
    create_topic,
    end_offsets,
    group_offsets,
    producer,
    topics,
    wait_for,
)
from tests.support.mirrorproc import MirrorProcess


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def test_unreachable_source_at_start_exits_1_naming_the_cluster(tmp_path: Path, capsys):
    cfg = tmp_path / "m.yaml"
    cfg.write_text(f"""\
clusters:
  gone: {{bootstrap: "127.0.0.1:{_closed_port()}", timeout: 2s}}
  here: {{bootstrap: "127.0.0.1:{_closed_port()}", timeout: 2s}}
flows:
  - {{name: f, source: gone, target: here, topics: {{include: [".*"]}}}}
""")
    started = time.monotonic()
    rc = main(["run", "-c", str(cfg), "--until-caught-up"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("Error: cluster 'gone' did not answer within 2s"), err
    assert len(err.strip().splitlines()) == 1
    assert time.monotonic() - started < 30


def test_ctrl_c_drains_commits_and_exits_130(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    t = f"int-{unique}"
    create_topic(src, t, 2)
    p = producer(src)
    for i in range(5000):
        p.produce(t, value=b"%d" % i, partition=i % 2)
    p.flush(30)
    cfg = write_config(f"""\
flows:
  - name: f-{unique}
    source: src
    target: dst
    consumer_group: mirror-{unique}
    commit_interval: 30s
    topics: {{include: ["{t}"]}}
""")
    with MirrorProcess(cfg) as m:
        # commit_interval is 30 s: whatever is committed when it exits, the drain committed
        wait_for(
            lambda: f"src.{t}" in topics(dst) and sum(end_offsets(dst, f"src.{t}", 2).values()) == 5000,
            60,
            "all records on the target",
        )
        m.signal(signal.SIGINT)
        assert m.wait(60) == 130, m.output()
    assert group_offsets(src, f"mirror-{unique}", t, 2) == end_offsets(src, t, 2)
