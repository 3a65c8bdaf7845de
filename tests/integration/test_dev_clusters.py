"""The dev clusters are real Kafka: plain confluent-kafka clients work against them."""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from mirror.cli import main
from mirror.devenv.common import pid_alive, port_free
from mirror.devenv.kafka import DevClusters
from tests.support.clusters import free_base_port


def test_each_cluster_creates_produces_and_consumes(clusters, unique):
    for name in clusters.names:
        bootstrap = clusters.bootstrap(name)
        topic = f"smoke-{unique}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        p = Producer({"bootstrap.servers": bootstrap})
        for i in range(10):
            p.produce(topic, key=str(i).encode(), value=f"v{i}-{name}".encode(), partition=i % 2)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{unique}", "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        got = []
        for _ in range(100):
            for m in c.consume(10, timeout=0.5):
                assert m.error() is None
                got.append(m.value().decode())
            if len(got) == 10:
                break
        c.close()
        assert sorted(got) == sorted(f"v{i}-{name}" for i in range(10))


def test_up_twice_status_and_down_leaves_nothing(tmp_path: Path, capsys):
    home = tmp_path / "dev"
    base = free_base_port(1)
    args = ["dev", "up", "--clusters", "solo", "--base-port", str(base), "--home", str(home)]
    assert main(args) == 0
    assert "started" in capsys.readouterr().out
    assert main(args) == 0
    assert "already running" in capsys.readouterr().out

    assert main(["dev", "status", "--home", str(home), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["clusters"]["solo"]["bootstrap"] == f"127.0.0.1:{base}"
    assert status["cassandra"] is None
    pid = DevClusters(home).node("solo").pid()
    assert pid is not None and pid_alive(pid)

    assert main(["dev", "down", "--home", str(home)]) == 0
    assert not pid_alive(pid)
    assert port_free(base) and port_free(base + 1)
    assert not (home / "solo" / "kafka.pid").exists()


def test_up_on_a_taken_port_names_it(tmp_path: Path, capsys):
    import socket

    base = free_base_port(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", base))
        s.listen()
        rc = main(["dev", "up", "--clusters", "x", "--base-port", str(base), "--home", str(tmp_path / "dev")])
    assert rc == 1
    err = capsys.readouterr().err
    assert f"port {base}" in err and err.startswith("Error:")


def test_down_does_not_touch_foreign_processes(tmp_path: Path):
    """A pid file pointing at someone else's process is ignored by `down`."""
    import subprocess

    home = tmp_path / "dev"
    (home / "ghost").mkdir(parents=True)
    (home / "state.json").write_text(
        json.dumps({"clusters": {"ghost": {"port": 1, "bootstrap": "127.0.0.1:1"}}, "cassandra": None})
    )
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (home / "ghost" / "kafka.pid").write_text(str(sleeper.pid))
        assert DevClusters(home).down() == []
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_cluster_that_fails_to_start_is_reported_with_its_log(tmp_path: Path, capsys, monkeypatch):
    """The JVM refuses an impossible heap size and exits: `up` says so, shows the log, exits 1."""
    monkeypatch.setenv("MIRROR_DEV_HEAP", "1q")  # not a size the JVM understands
    home = tmp_path / "dev"
    rc = main(["dev", "up", "--clusters", "broken", "--base-port", str(free_base_port(1)), "--home", str(home)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "kafka cluster 'broken' exited during start" in err
    assert "Invalid" in err and "heap" in err.lower()  # the JVM's own words, from the log tail
    assert DevClusters(home).node("broken").pid() is None
