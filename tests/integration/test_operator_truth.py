"""What an operator sees tells the truth, against real clusters: `mirror validate` with a
cluster down, a topic whose target name Kafka would refuse, and a healthy `mirror run`'s log."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from mirror.cli import main
from mirror.devenv.common import spawn_prefix
from tests.support.kafkautil import create_topic, end_offsets, producer, topics, wait_for
from tests.support.prometheus import free_port

ALIAS = "a" * 230  # prefixed names of 19+ characters pass Kafka's 249


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "mirror.yaml"
    path.write_text(body)
    return path


def _flow(name: str, source: str, target: str, include: str, unique: str) -> str:
    return (
        f"  - {{name: {name}, source: {source}, target: {target}, consumer_group: mirror-{unique}-{name},"
        f" refresh_interval: 1s, topics: {{include: ['{include}']}}}}\n"
    )


def test_validate_fails_naming_every_cluster_that_did_not_answer(clusters, tmp_path, unique, capsys):
    down1, down2 = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    path = _write(
        tmp_path,
        "clusters:\n"
        f"  src: {{bootstrap: '{clusters.bootstrap('src')}', timeout: 10s}}\n"
        f"  gone: {{bootstrap: '{down1}', timeout: 2s}}\n"
        f"  away: {{bootstrap: '{down2}', timeout: 2s}}\n"
        "flows:\n"
        + _flow("to-gone", "src", "gone", f"v-{unique}", unique)
        + _flow("away-to-src", "away", "src", f"v-{unique}", unique),
    )
    # The source answers; only the target of the first flow is down (it used to be never asked).
    assert main(["validate", "-c", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "NOT valid" in out
    for name, bootstrap in (("gone", down1), ("away", down2)):
        assert f"Error: cluster '{name}' did not answer within 2s" in err and f"[bootstrap {bootstrap}]" in err, err
    assert "cluster 'src'" not in err

    assert main(["validate", "-c", str(path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False
    assert sorted(r.split("'")[1] for r in doc["problems"]) == ["away", "gone"]


def test_validate_passes_when_every_cluster_answers(clusters, write_config, unique, capsys):
    path = write_config("flows:\n" + _flow("ok", "src", "dst", f"v-{unique}", unique))
    assert main(["validate", "-c", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is True and doc["problems"] == []


def test_validate_refuses_a_matched_topic_whose_target_name_is_too_long(clusters, tmp_path, unique, capsys):
    src = clusters.bootstrap("src")
    long_topic = f"tl-{unique}.customer-events-v2"  # 30 characters: 261 with the prefix
    create_topic(src, long_topic)
    path = _write(
        tmp_path,
        f"clusters:\n  {ALIAS}: {{bootstrap: '{src}', timeout: 10s}}\n"
        f"  dst: {{bootstrap: '{clusters.bootstrap('dst')}', timeout: 10s}}\n"
        "flows:\n" + _flow("long", ALIAS, "dst", f"tl-{unique}\\..*", unique),
    )
    assert main(["validate", "--offline", "-c", str(path)]) == 0  # a regex: only online can know
    capsys.readouterr()
    assert main(["validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"topic '{long_topic}' would be mirrored as '{ALIAS}.{long_topic}' (261 characters)" in err
    assert "limit of 249" in err


def test_a_healthy_run_logs_start_rebalance_and_stop_and_skips_a_too_long_topic_once(clusters, tmp_path, unique):
    """At the default level (no -v), as `podman logs` shows it."""
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    ok, ok2, long = f"lc-{unique}.ok", f"lc-{unique}.ok2", f"lc-{unique}.customer-events-v2"
    create_topic(src, ok, 2)
    create_topic(src, long)
    p = producer(src)
    for i in range(300):
        p.produce(ok, value=b"v%d" % i, partition=i % 2)
        p.produce(long, value=b"v%d" % i)
    p.flush(30)
    path = _write(
        tmp_path,
        f"clusters:\n  {ALIAS}: {{bootstrap: '{src}', timeout: 10s}}\n  dst: {{bootstrap: '{dst}', timeout: 10s}}\n"
        "flows:\n" + _flow("lc", ALIAS, "dst", f"lc-{unique}\\..*", unique),
    )
    log = tmp_path / "run.stderr"
    with open(log, "wb") as errf:
        proc = subprocess.Popen(
            [*spawn_prefix(), sys.executable, "-m", "mirror", "run", "-c", str(path)],
            stdout=subprocess.DEVNULL,
            stderr=errf,
            stdin=subprocess.DEVNULL,
        )
        try:
            wait_for(
                lambda: (
                    sum(end_offsets(dst, f"{ALIAS}.{ok}", 2).values()) == 300
                    if f"{ALIAS}.{ok}" in topics(dst)
                    else False
                ),
                120,
                "the short-named topic mirrored",
                detail=lambda: log.read_text(errors="replace"),
            )
            create_topic(src, ok2)  # a later refresh and a rebalance, with the long topic still there
            wait_for(lambda: f"{ALIAS}.{ok2}" in topics(dst), 120, "the new topic's target created")
            wait_for(lambda: "rebalanced" in log.read_text(), 120, "a rebalance line", detail=log.read_text)
            assert proc.poll() is None, log.read_text()  # skipping a topic is not a crash
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    text = log.read_text(errors="replace")
    assert rc == 0, text
    lines = text.splitlines()
    started = [line for line in lines if "started:" in line]
    assert len(started) == 1, text
    assert f"flow lc: {ALIAS} -> dst started:" in started[0] and "partitions assigned" in started[0]
    assert "topics matched" in started[0]
    too_long = [line for line in lines if " ERROR " in line and long in line]
    assert len(too_long) == 1, text
    assert "longer than Kafka's limit of 249" in too_long[0]
    assert any("stopped (drained and committed)" in line for line in lines), text
    assert [line for line in lines if "rebalanced" in line and " -" in line.split("rebalanced")[1]] == [], text
    assert f"{ALIAS}.{long}" not in topics(dst)
    # Nothing per record: 300 records each way, a handful of lines.
    assert len(lines) < 20, text
