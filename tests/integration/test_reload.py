"""SIGHUP re-reads `mirror run`'s file: flows added start, removed ones drain and stop, changed
ones restart alone, and a file that does not validate is refused; meanwhile a flow that did not
change keeps mirroring a steady stream without a gap or a duplicate (counted on the target)."""

from __future__ import annotations

import signal
import threading
from collections import Counter

from tests.support.kafkautil import create_topic, end_offsets, group_offsets, producer, read_partition, wait_for
from tests.support.metrics import scrape, total
from tests.support.mirrorproc import MirrorProcess
from tests.support.prometheus import free_port


class Stream:
    """Records produced to a topic at a steady pace from a thread, until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic, self.partitions = topic, partitions
        self.sent = 0
        self._p = producer(bootstrap)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            for _ in range(5):
                self._p.produce(self.topic, value=b"%d" % self.sent, partition=self.sent % self.partitions)
                self.sent += 1
            self._p.poll(0)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(30)
        assert self._p.flush(30) == 0
        return self.sent


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = producer(bootstrap)
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0


def _reload_ok(port: int) -> bool:
    try:
        return total(scrape(port, timeout=5), "mirror_config_reload_successful") == 1
    except OSError:  # not serving yet
        return False


def _values(bootstrap: str, topic: str, partitions: int = 1) -> Counter[bytes]:
    return Counter(r.value for p in range(partitions) for r in read_partition(bootstrap, topic, p))


def test_sighup_adds_removes_and_changes_flows_while_another_flows_records_keep_arriving(
    clusters, write_config, unique
):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    keep, gone, n1, n2 = f"rl-{unique}.keep", f"rl-{unique}.gone", f"rl-{unique}.n1", f"rl-{unique}.n2"
    create_topic(src, keep, 2)
    for t in (gone, n1, n2):
        create_topic(dst, t, 1)
    _produce(dst, gone, [b"g%d" % i for i in range(30)])
    _produce(dst, n1, [b"a%d" % i for i in range(10)])
    _produce(dst, n2, [b"b%d" % i for i in range(10)])

    def flow(name: str, source: str, target: str, include: list[str]) -> str:
        patterns = ", ".join(f'"{t}"' for t in include)
        return f"""\
  - name: {name}-{unique}
    source: {source}
    target: {target}
    consumer_group: mirror-{name}-{unique}
    topics: {{include: [{patterns}]}}
    refresh_interval: 2s
"""

    keep_flow = flow("keep", "src", "dst", [keep])
    first = "flows:\n" + keep_flow + flow("gone", "dst", "src", [gone])
    path = write_config(first)
    head = path.read_text()[: -len(first)]
    port = free_port()
    stream = Stream(src, keep, 2)
    with MirrorProcess(path, "--metrics-port", str(port)) as m:

        def reload(body: str, applied: int, what: str = "config reloaded from") -> None:
            path.write_text(head + body)
            m.signal(signal.SIGHUP)
            wait_for(lambda: m.output().count(what) == applied, 120, f"reload {applied}", detail=m.output)

        wait_for(lambda: len(read_partition(src, f"dst.{gone}", 0)) == 30, 90, "gone mirrored", detail=m.output)
        wait_for(lambda: sum(_values(dst, f"src.{keep}", 2).values()) > 0, 90, "keep running", detail=m.output)
        samples = scrape(port)
        started = total(samples, "mirror_config_reload_last_success_timestamp_seconds")
        assert started and total(samples, "mirror_config_reload_successful") == 1

        # 1: gone removed, n added (same clusters, another name).
        reload("flows:\n" + keep_flow + flow("n", "dst", "src", [n1]), 1)
        assert group_offsets(dst, f"mirror-gone-{unique}", gone, 1) == end_offsets(dst, gone, 1)  # drained, committed
        wait_for(lambda: _values(src, f"dst.{n1}") == Counter(b"a%d" % i for i in range(10)), 90, "n1", detail=m.output)
        samples = scrape(port)
        assert total(samples, "mirror_flow_state", flow=f"gone-{unique}", state="running") is None  # its series went
        assert total(samples, "mirror_flow_state", flow=f"n-{unique}", state="running") == 1

        # 2: n changed (one more topic): restarted alone, with what it had committed.
        reload("flows:\n" + keep_flow + flow("n", "dst", "src", [n1, n2]), 2)
        _produce(dst, n1, [b"a%d" % i for i in range(10, 20)])
        wait_for(lambda: _values(src, f"dst.{n2}") == Counter(b"b%d" % i for i in range(10)), 90, "n2", detail=m.output)
        wait_for(lambda: sum(_values(src, f"dst.{n1}").values()) >= 20, 90, "n1 after the change", detail=m.output)
        assert _values(src, f"dst.{n1}") == Counter(b"a%d" % i for i in range(20))

        # 3: a file that does not validate: refused, every problem logged, nothing stops.
        broken = (
            "flows:\n"
            + keep_flow.replace("refresh_interval: 2s", "refresh_interval: soon")
            + flow("n", "dst", "nowhere", [n1])
        )
        reload(broken, 1, what="config reload refused")
        samples = scrape(port)
        assert total(samples, "mirror_config_reload_successful") == 0
        assert total(samples, "mirror_config_reload_failures_total") == 1
        assert total(samples, "mirror_config_reload_last_success_timestamp_seconds") > started
        last_good = total(samples, "mirror_config_reload_last_success_timestamp_seconds")

        # 4: the good file again: applied, and nothing in it changed.
        reload("flows:\n" + keep_flow + flow("n", "dst", "src", [n1, n2]), 3)
        samples = scrape(port)
        assert total(samples, "mirror_config_reload_successful") == 1
        assert total(samples, "mirror_config_reload_last_success_timestamp_seconds") >= last_good

        sent = stream.stop()
        wait_for(lambda: sum(_values(dst, f"src.{keep}", 2).values()) >= sent, 120, "keep caught up", detail=m.output)
        m.stop()
        log = m.output()

    got = _values(dst, f"src.{keep}", 2)
    assert got == Counter(b"%d" % i for i in range(sent)), "keep lost or duplicated records"  # exactly once each
    assert sent > 500  # the stream ran through every reload
    assert log.count(f"flow keep-{unique} started") == 1
    assert log.count(f"flow n-{unique} started") == 2  # added, then restarted once for its change
    assert f"flow gone-{unique} stopped (drained and committed)" in log
    assert "flows[0].refresh_interval" in log and "flows[1].target" in log  # every problem of the refused file
    assert "added: n-" in log and "removed: gone-" in log and "changed: n-" in log
    assert "Traceback" not in log, log


def test_the_supervisor_passes_sighup_on_to_every_worker(clusters, write_config, unique):
    src, dst = clusters.bootstrap("src"), clusters.bootstrap("dst")
    a, b = f"rw-{unique}.a", f"rw-{unique}.b"
    create_topic(src, a, 2)
    create_topic(dst, b, 2)
    _produce(dst, b, [b"%d" % i for i in range(20)])
    first = f"""\
flows:
  - name: a-{unique}
    source: src
    target: dst
    consumer_group: mirror-a-{unique}
    topics: {{include: ["{a}"]}}
"""
    added = f"""\
  - name: b-{unique}
    source: dst
    target: src
    consumer_group: mirror-b-{unique}
    topics: {{include: ["{b}"]}}
"""
    path = write_config(first)
    port = free_port(2)  # the pool serves on port and port + 1
    with MirrorProcess(path, "--workers", "2", "--metrics-port", str(port)) as m:
        for i in range(2):
            wait_for(
                lambda i=i: _reload_ok(port + i),
                90,
                f"worker {i} serving",
                detail=m.output,
            )
        path.write_text(path.read_text() + added)
        m.signal(signal.SIGHUP)
        wait_for(lambda: m.output().count("config reloaded from") == 2, 120, "both workers reloaded", detail=m.output)
        wait_for(lambda: sum(_values(src, f"dst.{b}", 2).values()) >= 20, 90, "b mirrored", detail=m.output)
        m.stop()
        log = m.output()
    assert _values(src, f"dst.{b}", 2) == Counter(b"%d" % i for i in range(20))
    assert "passing the reload on to 2 worker(s)" in log
    assert "exited with" not in log, log  # no worker died of the signal
