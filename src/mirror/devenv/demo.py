"""`make demo`: real clusters, a sample workload, the mirror, and what happened.

Runs `mirror dev up` (nyc on 127.0.0.1:19092, sf on :19192), writes a workload to nyc
(several topics, one of them excluded by configs/dev.yaml), starts `mirror run` in the
background, waits until it has caught up, runs the same flow once through the Spark
pipeline (`mirror spark run`, local mode) into topics of its own, and prints per topic what
arrived where by each engine, the lag report and one canary round. The mirror keeps running
so you can look around; `make demo-down` stops it and the clusters.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml

from mirror import config as cfg
from mirror.devenv.common import owned_pid, terminate
from mirror.devenv.kafka import DEFAULT_BASE_PORT, DevClusters
from mirror.errors import MirrorError
from mirror.kafka import Admin, make_consumer, make_producer

CONFIG = Path("configs/dev.yaml")
HOME = Path(".mirror/dev")
DEMO = Path(".mirror/demo")
SPARK_SOURCE, SPARK_FLOW = "nyc-spark", "nyc-to-sf-spark"  # the demo flow again, for the Spark pipeline
WORKLOAD = {  # topic -> (partitions, records); orders.tmp is excluded by the config
    "orders": (3, 30_000),
    "orders.eu": (2, 10_000),
    "users": (1, 5_000),
    "payments": (2, 8_000),
    "orders.tmp": (1, 2_000),
}


def say(text: str = "") -> None:
    print(text, flush=True)


def up() -> None:
    say("== 1. Two real Kafka clusters (KRaft, Apache Kafka 4.1.1 from Maven Central)")
    result = DevClusters(HOME).up(["nyc", "sf"], DEFAULT_BASE_PORT)
    for name, c in result.status["clusters"].items():
        say(f"   {name}: {c['bootstrap']} ({'already running' if name in result.already_running else 'started'})")


def workload(config: cfg.Config) -> None:
    say("\n== 2. A sample workload on nyc")
    nyc = config.clusters["nyc"]
    admin = Admin("nyc", nyc)
    existing = admin.topics()
    producer = make_producer("nyc-demo", nyc, {"linger.ms": 20, "compression.type": "zstd"})
    for topic, (partitions, count) in WORKLOAD.items():
        admin.create_topic(topic, partitions, 1)
        if existing.get(topic):
            say(f"   {topic}: exists, adding {count} records")
        for i in range(count):
            while True:
                try:
                    producer.produce(
                        topic,
                        key=b"customer-%d" % (i % 997),
                        value=b'{"n": %d, "topic": "%s"}' % (i, topic.encode()),
                        headers=[("source", b"demo")],
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
        say(f"   {topic}: {count} records over {partitions} partitions")
    producer.flush(60)
    # A consumer group that read part of `orders`: the mirror checkpoints it (groups in the config).
    consumer = make_consumer(
        "nyc-demo", nyc, {"group.id": "billing", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe(["orders"])
    read = 0
    deadline = time.monotonic() + 30
    while read < 12_000 and time.monotonic() < deadline:
        read += len(consumer.consume(1000, timeout=1))
    consumer.commit(asynchronous=False)
    consumer.close()
    say(f"   consumer group 'billing' read {read} records of orders and committed")


def start_mirror() -> int:
    DEMO.mkdir(parents=True, exist_ok=True)
    pid_file = DEMO / "mirror.pid"
    pid = owned_pid(pid_file, str(CONFIG))
    if pid:
        say(f"\n== 3. The mirror is already running (pid {pid})")
        return pid
    log = open(DEMO / "mirror.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mirror", "-v", "run", "-c", str(CONFIG), "--metrics-port", "9308"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    pid_file.write_text(str(proc.pid))
    say(f"\n== 3. mirror run started in the background (pid {proc.pid}, log {DEMO / 'mirror.log'})")
    return proc.pid


def wait_caught_up(config: cfg.Config, timeout: float = 180) -> None:
    flow = config.flows[0]
    source = Admin("nyc", config.clusters["nyc"])
    parts = [(t, p) for t, (n, _) in WORKLOAD.items() if t != "orders.tmp" for p in range(n)]
    ends = source.watermarks(parts)
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    while time.monotonic() < deadline:
        try:
            committed = source.group_offsets(flow.group_id)
        except MirrorError:
            committed = {}
        if all(committed.get(tp, -1) >= w.high for tp, w in ends.items()):
            say(f"   caught up in {time.monotonic() - started:.1f}s")
            return
        time.sleep(0.5)
    raise MirrorError(f"the mirror did not catch up within {timeout:.0f}s", hint=f"see {DEMO / 'mirror.log'}")


def spark_config(config: cfg.Config) -> Path:
    """The demo flow for the Spark pipeline: the same topics of nyc, under a cluster alias
    (`nyc-spark`) so its copies on sf are `nyc-spark.*` beside `mirror run`'s `nyc.*`, with
    its own consumer group, offset map and checkpoint (one engine per flow at a time)."""
    flow = config.flows[0]
    doc = {
        "clusters": {
            SPARK_SOURCE: {"bootstrap": config.clusters[flow.source].bootstrap},
            flow.target: {"bootstrap": config.clusters[flow.target].bootstrap},
        },
        "flows": [
            {
                "name": SPARK_FLOW,
                "source": SPARK_SOURCE,
                "target": flow.target,
                "rename": "prefix",
                "topics": {"include": list(flow.topics.include), "exclude": list(flow.topics.exclude)},
            }
        ],
        "offset_store": {"kind": "sqlite", "path": "spark-offsets.db"},
        "spark": {"checkpoint_dir": "spark-checkpoints"},
    }
    DEMO.mkdir(parents=True, exist_ok=True)
    path = DEMO / "spark.yaml"
    path.write_text(
        "# Written by `make demo`: the demo flow for `mirror spark run`.\n" + yaml.safe_dump(doc, sort_keys=False)
    )
    return path


def run_spark(config: cfg.Config) -> None:
    path = spark_config(config)
    say("\n== 4. The same flow through the Spark pipeline (mirror spark run, local mode)")
    argv = [
        sys.executable,
        "-m",
        "mirror",
        "spark",
        "run",
        "-c",
        str(path),
        "--flow",
        SPARK_FLOW,
        "--master",
        "local[2]",
        "--until-caught-up",
        "--no-ui",
    ]
    say(f"   mirror spark run -c {path} --flow {SPARK_FLOW} --master local[2] --until-caught-up --no-ui")
    started = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    if out.returncode != 0:
        raise MirrorError(
            f"mirror spark run failed: {lines[-1] if lines else f'exit {out.returncode}'}",
            hint=f"run it by hand: {' '.join(argv[1:])}",
        )
    say(f"   {lines[-1] if lines else 'done'} in {time.monotonic() - started:.0f}s (Spark start-up included)")


def report(config: cfg.Config) -> None:
    say("\n== 5. What arrived on sf, per engine")
    source, target = Admin("nyc", config.clusters["nyc"]), Admin("sf", config.clusters["sf"])
    names = target.topics()

    def count(admin: Admin, topic: str, partitions: int) -> int:
        return sum(w.high - w.low for w in admin.watermarks([(topic, p) for p in range(partitions)]).values())

    say(
        f"   {'source topic':<12} {'records':>8}   {'mirror run copy':<16} {'records':>8}   "
        f"{'Spark copy':<22} {'records':>8}"
    )
    for topic, (n, _) in WORKLOAD.items():
        native, spark = f"nyc.{topic}", f"{SPARK_SOURCE}.{topic}"
        if native in names or spark in names:
            cells = [
                f"{t:<{w}} {count(target, t, names[t]) if t in names else '-':>8}"
                for t, w in ((native, 16), (spark, 22))
            ]
            say(f"   {topic:<12} {count(source, topic, n):>8}   {cells[0]}   {cells[1]}")
        else:
            say(
                f"   {topic:<12} {count(source, topic, n):>8}   {'(excluded)':<16} {'-':>8}   "
                f"{'(excluded)':<22} {'-':>8}"
            )
    for title, args in (
        ("6. Lag (mirror lag)", ["lag"]),
        ("7. One canary round (mirror canary once)", ["canary", "once"]),
    ):
        say(f"\n== {title}")
        out = subprocess.run(
            [sys.executable, "-m", "mirror", *args, "-c", str(CONFIG)], capture_output=True, text=True, timeout=120
        )
        say("   " + (out.stdout or out.stderr).strip().replace("\n", "\n   "))


def main() -> int:
    try:
        config = cfg.load(CONFIG)
        up()
        workload(config)
        start_mirror()
        wait_caught_up(config)
        run_spark(config)
        report(config)
    except MirrorError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code
    say(
        f"""
== Look around
   .venv/bin/mirror validate -c {CONFIG}       flows, matched topics, target names
   .venv/bin/mirror lag -c {CONFIG} --watch    lag per partition, refreshed
   curl -s 127.0.0.1:9308/metrics | grep ^mirror_    the mirror's own metrics
   .venv/bin/mirror failover plan -c {CONFIG} --flow nyc-to-sf --group billing --translate
   tail -f {DEMO / "mirror.log"}
   .venv/bin/mirror spark run -c {DEMO / "spark.yaml"} --flow {SPARK_FLOW} --master local[2]   Spark pipeline, UI :4040

== Stop
   make demo-down      (stops the mirror, then `mirror dev down`; data stays in .mirror/)"""
    )
    return 0


def down() -> int:
    pid = owned_pid(DEMO / "mirror.pid", str(CONFIG))
    if pid:
        terminate(pid)
        print(f"mirror (pid {pid}) stopped")
    stopped = DevClusters(HOME).down()
    print(f"clusters stopped: {', '.join(stopped) or 'none running'}")
    return 0


if __name__ == "__main__":
    sys.exit(down() if sys.argv[1:] == ["down"] else main())
