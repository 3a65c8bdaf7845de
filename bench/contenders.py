"""The contenders: how each one is started, on which topics, and how it is known to be done.

Every contender copies the same preloaded source topic to a fresh target topic named
`<alias>.<topic>` (the prefix naming both `mirror` and MirrorMaker 2's default policy use),
where `alias` is unique per run so no run sees another's topics, groups or offsets.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import experiments, mm2
from bench.procs import Contender
from mirror.engine.worker import CONSUME_BATCH
from mirror.kafka.settings import CONSUMER_DEFAULTS, PRODUCER_DEFAULTS

ROOT = Path(__file__).resolve().parent.parent

# What `mirror run` uses when the flow sets nothing (mirror.kafka.settings); MirrorMaker 2
# and the ceiling get the same values so that batching and compression are not what differs.


def engine_settings() -> tuple[dict[str, Any], dict[str, Any], int]:
    """(producer, consumer, consume batch) as `mirror run` ships them."""
    return dict(PRODUCER_DEFAULTS), dict(CONSUMER_DEFAULTS), CONSUME_BATCH


def mm2_client_settings(
    producer: Mapping[str, Any], consumer: Mapping[str, Any], batch: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """librdkafka settings -> the closest Java client settings MirrorMaker 2 accepts."""
    p: dict[str, Any] = {}
    for key in ("acks", "linger.ms", "batch.size", "compression.type", "enable.idempotence"):
        if key in producer:
            p[key] = producer[key]
    if "queue.buffering.max.kbytes" in producer:
        p["buffer.memory"] = int(producer["queue.buffering.max.kbytes"]) * 1024
    # Connect's worker pins max.in.flight.requests.per.connection=1 for source connectors;
    # librdkafka's idempotent producer keeps up to 5 in flight, and so may Java's.
    if producer.get("enable.idempotence"):
        p["max.in.flight.requests.per.connection"] = 5
    c: dict[str, Any] = {"max.poll.records": batch}
    if "isolation.level" in consumer:
        c["isolation.level"] = consumer["isolation.level"]
    if "fetch.wait.max.ms" in consumer:
        c["fetch.max.wait.ms"] = consumer["fetch.wait.max.ms"]
    return p, c


@dataclass
class Env:
    """What every contender needs to know about the run."""

    src: str
    dst: str
    workdir: Path
    partitions: int
    producer: dict[str, Any]
    consumer: dict[str, Any]
    batch: int
    free_port: Any  # (count=1) -> the first of `count` consecutive free ports
    source_ends: list[int] = field(default_factory=list)  # end offset of each source partition after preload
    spark_master: str | None = None  # the standalone cluster's URL, when a `spark-standalone` row runs
    spark_pids: list[int] = field(default_factory=list)  # its master and worker: sampled with the contender
    dst_data: Path | None = None  # the target broker's log directory: deleted topics' files gone from it
    base: Path | None = None  # another tree, for the `spark-base` row
    cassandra: str | None = None  # the dev Cassandra's contact point, when a `store: cassandra` row runs


@dataclass
class Spec:
    key: str
    label: str
    kind: str  # mirror | mm2 | ceiling | spark | unavailable
    workers: int = 1
    options: dict[str, Any] = field(default_factory=dict)
    reason: str = ""  # why it is not available
    exits_when_done: bool = True  # False: the harness watches the target and stops it
    opt_in: bool = False  # a diagnostic row, run only when named in --only

    @property
    def transactional(self) -> bool:
        """Writes the target in transactions: commit markers take offsets, so its records are
        counted by reading them read_committed, not from end offsets."""
        return bool(self.options.get("flow", {}).get("exactly_once") or self.options.get("exactly_once"))

    def start(self, env: Env, alias: str, topic: str, target: str, *, daemon: bool = False) -> Contender:
        """Start copying `topic` -> `target` (daemon: keep running, for latency runs)."""
        run_dir = env.workdir / alias
        run_dir.mkdir(parents=True, exist_ok=True)
        log = run_dir / f"{self.key}.log"
        if self.kind == "mirror":
            cfg = run_dir / "mirror.yaml"
            cfg.write_text(mirror_config(env, alias, topic, run_dir, self.options))
            argv = [sys.executable, "-m", "mirror", "run", "-c", str(cfg)]
            if "prelude" in self.options:
                # Diagnostic: the same CLI with a prelude (bench/experiments.py) run first.
                argv = [
                    sys.executable,
                    "-c",
                    f"import gc, runpy, sys\n{self.options['prelude']}\nsys.argv = ['mirror'] + sys.argv[1:]\n"
                    "runpy.run_module('mirror', run_name='__main__', alter_sys=True)",
                    "run",
                    "-c",
                    str(cfg),
                ]
            # Metrics on, as an SRE runs it (its counters are on the hot path; MM2's are always on).
            argv += ["--metrics-port", str(env.free_port(self.workers))]  # one per worker
            if not daemon:
                argv.append("--until-caught-up")
            if self.workers > 1:
                argv += ["--workers", str(self.workers)]
            argv += self.options.get("extra_args", [])
            return Contender(argv, log, cwd=ROOT).start()
        if self.kind == "spark" and self.options.get("plain"):
            argv = [
                sys.executable,
                "-m",
                "bench.plain_spark",
                "--src",
                env.src,
                "--dst",
                env.dst,
                "--topic",
                topic,
                "--target-topic",
                target,
            ]
            return Contender(argv, log, cwd=ROOT).start()
        if self.kind == "spark":
            # `mirror spark run` on the same one-flow config: local mode, or the standalone
            # cluster the harness started (whose master and worker trees, executors included,
            # are sampled with the driver: memory and CPU of the whole engine).
            cfg = run_dir / "mirror.yaml"
            cfg.write_text(mirror_config(env, alias, topic, run_dir, self.options))
            argv = [
                sys.executable,
                "-m",
                "mirror",
                "spark",
                "run",
                "-c",
                str(cfg),
                "--flow",
                alias,
                "--metrics-port",
                str(env.free_port()),
            ]
            if not daemon:
                argv.append("--until-caught-up")
            roots: list[int] = []
            if self.options.get("base"):
                # Another tree's `mirror` (its src/ ahead of this checkout's) and its JVM writer;
                # run outside this checkout, whose top-level packages `python -m` would put first.
                assert env.base is not None
                jar = env.base / "build" / "jvm" / "mirror-spark-writer.jar"
                base_env = {"PYTHONPATH": str(env.base / "src"), "MIRROR_SPARK_WRITER_JAR": str(jar)}
                return Contender(argv, log, cwd=run_dir, env=base_env).start()
            if self.options.get("standalone"):
                if not env.spark_master:
                    raise RuntimeError(f"contender {self.key}: no standalone Spark cluster was started")
                # One executor core per worker: the cluster may have more workers than this row uses.
                argv += ["--master", env.spark_master, "--conf", f"spark.cores.max={self.options.get('cores', 1)}"]
                roots = list(env.spark_pids)
            return Contender(argv, log, cwd=ROOT, extra_roots=roots).start()
        if self.kind == "mm2":
            producer, consumer = mm2_client_settings(env.producer, env.consumer, env.batch)
            props = run_dir / "mm2.properties"
            rest = env.free_port() if self.transactional else None
            props.write_text(
                mm2.properties(
                    alias,
                    env.src,
                    f"{alias}t",
                    env.dst,
                    topic,
                    self.workers,
                    producer,
                    consumer,
                    exactly_once_rest_port=rest,
                    transaction_interval_ms=self.options.get("transaction_interval_ms"),
                )
            )
            return Contender(mm2.command(run_dir, props, f"{alias}t"), log, cwd=run_dir).start()
        if self.kind == "ceiling":
            argv = [
                sys.executable,
                "-m",
                "bench.ceiling",
                "--src",
                env.src,
                "--dst",
                env.dst,
                "--topic",
                topic,
                "--target-topic",
                target,
                "--partitions",
                ",".join(str(p) for p in range(env.partitions)),
                "--batch",
                str(env.batch),
                *(["--follow"] if daemon else []),
            ]
            for k in ("linger.ms", "batch.size", "compression.type", "queue.buffering.max.kbytes"):
                if k in env.producer:
                    argv += ["-X", f"{k}={env.producer[k]}"]
            for k, v in self.options.get("producer", {}).items():
                argv += ["-X", f"{k}={v}"]
            for k, v in self.options.get("consumer", {}).items():
                argv += ["-C", f"{k}={v}"]
            return Contender(argv, log, cwd=ROOT).start()
        raise RuntimeError(f"contender {self.key} cannot run: {self.reason}")


def mirror_config(env: Env, alias: str, topic: str, run_dir: Path, options: Mapping[str, Any]) -> str:
    """A one-flow topology: cluster `alias` (source) -> `alias`t (target), prefix naming."""
    store = options.get("offset_store", {"kind": "sqlite", "path": str(run_dir / "offsets.db")})
    if options.get("store") == "cassandra":
        store = cassandra_store(env)
    doc: dict[str, Any] = {
        "clusters": {alias: {"bootstrap": env.src}, f"{alias}t": {"bootstrap": env.dst}},
        "flows": [
            {
                "name": alias,
                "source": alias,
                "target": f"{alias}t",
                "topics": {"include": [topic]},
                "rename": "prefix",
                "groups": ["bench-app"],  # checkpoints for the group the harness commits on the source
                # The harness made the target topic LogAppendTime (the span's clock); a run longer
                # than sync_topic_configs_interval (a loaded machine) would copy the source's
                # CreateTime onto it. MirrorMaker 2 is configured not to sync configs either.
                "sync_topic_configs": False,
                **options.get("flow", {}),
            }
        ],
        "offset_store": store,
        "metrics": {"port": env.free_port(), "host": "127.0.0.1"},
    }
    return json.dumps(doc, indent=2) + "\n"  # JSON is YAML


# One keyspace for every run: rows are keyed by flow, and each run's flow is its own alias, so
# no run reads another's rows. A keyspace per run measured its schema instead: creating eight
# tables cost the node 1-2 CPU seconds beside the copy and halved its records/s.
CASSANDRA_KEYSPACE = "bench"


def cassandra_store(env: Env) -> dict[str, Any]:
    """The dev Cassandra as the offset store, with the store's default consistency
    (LOCAL_QUORUM: the one replica of the dev node)."""
    if not env.cassandra:
        raise RuntimeError("a Cassandra offset store row runs, but no dev Cassandra was started")
    return {"kind": "cassandra", "contact_points": [env.cassandra], "keyspace": CASSANDRA_KEYSPACE}


def prepare_cassandra(env: Env) -> None:
    """Create the store's keyspace and tables before any timed run, as a production mirror finds
    them made (the store creates what is missing when it connects)."""
    from mirror.config import CassandraStoreConfig
    from mirror.store.cassandra import CassandraStore

    store = CassandraStore(CassandraStoreConfig.model_validate(cassandra_store(env)))
    try:
        store.tip("bench-setup", "t", 0)  # connects: keyspace and tables made, statements prepared
    finally:
        store.close()


def wants_cassandra(specs: Sequence[Spec]) -> bool:
    """Whether any of these rows keeps its offset map in Cassandra (the harness then starts one)."""
    return any(s.options.get("store") == "cassandra" for s in specs)


EOS_FAST_INTERVAL = "300ms"


def catalogue(mm2_ok: bool, nostore: dict[str, Any] | None) -> list[Spec]:
    """Every row of the benchmark, in table order (unavailable ones included, labelled)."""
    specs = [
        Spec("mirror", "mirror run (1 worker)", "mirror"),
        # exactly_once: a target transaction per commit interval (engine/transactions.py).
        Spec("mirror-eos", "mirror run (1 worker), exactly_once", "mirror", options={"flow": {"exactly_once": True}}),
        # The documented low-latency setting: with exactly_once, commit_interval bounds how long
        # a copy waits to be readable (transactions start half of it apart).
        Spec(
            "mirror-eos-fast",
            f"mirror run (1 worker), exactly_once, commit_interval {EOS_FAST_INTERVAL}",
            "mirror",
            options={"flow": {"exactly_once": True, "commit_interval": EOS_FAST_INTERVAL}},
        ),
        Spec("mirror-w2", "mirror run --workers 2", "mirror", workers=2),
        Spec(
            "mm2",
            "MirrorMaker 2 (dedicated, tasks.max=1)",
            "mm2" if mm2_ok else "unavailable",
            workers=1,
            exits_when_done=False,
            reason="" if mm2_ok else "MM2 jars missing: run `make bench-setup`",
        ),
        # Exactly-once source support on the target (Kafka >= 3.5 in dedicated mode): the
        # counterpart of mirror-eos. Its transaction boundary is MM2's default, one per poll.
        Spec(
            "mm2-eos",
            "MirrorMaker 2 (dedicated, tasks.max=1), exactly-once source",
            "mm2" if mm2_ok else "unavailable",
            workers=1,
            exits_when_done=False,
            options={"exactly_once": True},
            reason="" if mm2_ok else "MM2 jars missing: run `make bench-setup`",
        ),
        Spec(
            "mm2-t2",
            "MirrorMaker 2 (dedicated, tasks.max=2)",
            "mm2" if mm2_ok else "unavailable",
            workers=2,
            exits_when_done=False,
            reason="" if mm2_ok else "MM2 jars missing: run `make bench-setup`",
        ),
        # librdkafka waits fetch.queue.backoff.ms (default 1 s) before fetching again once its
        # prefetch queue is full; a copy loop drains the queue at once, so the default halves
        # the loop's speed on this load. The ceiling is the best a Python loop can do: 20 ms.
        Spec(
            "ceiling",
            "raw ceiling (confluent-kafka copy loop)",
            "ceiling",
            options={"consumer": {"fetch.queue.backoff.ms": 20}},
        ),
    ]
    # MM2's exactly-once with mirror-eos's transaction cadence (one per commit_interval, 1 s)
    # instead of its default one per poll: which of the two costs MM2 its throughput.
    specs.append(
        Spec(
            "mm2-eos-i1s",
            "MirrorMaker 2 (dedicated, tasks.max=1), exactly-once source, a transaction per 1 s",
            "mm2" if mm2_ok else "unavailable",
            exits_when_done=False,
            options={"exactly_once": True, "transaction_interval_ms": 1000},
            reason="" if mm2_ok else "MM2 jars missing: run `make bench-setup`",
            opt_in=True,
        )
    )
    if nostore is not None:
        specs.append(Spec("mirror-nostore", "mirror run (1 worker), offset store off", "mirror", options=nostore))
    else:
        specs.append(
            Spec(
                "mirror-nostore",
                "mirror run (1 worker), offset store off",
                "unavailable",
                reason="pending: `mirror run` has no way to switch the offset store off yet",
            )
        )
    # The shared offset store (issue 37: its cost next to SQLite's): opt-in, it starts a
    # Cassandra node (a JVM of its own) beside the two Kafka clusters.
    specs.append(
        Spec(
            "mirror-cassandra",
            "mirror run (1 worker), Cassandra offset store",
            "mirror",
            options={"store": "cassandra"},
            opt_in=True,
        )
    )
    specs.append(
        Spec(
            "mirror-noprov",
            "mirror run (1 worker), provenance headers off",
            "mirror",
            options={"flow": {"provenance_headers": False}},
            opt_in=True,
        )
    )
    for key, label, prelude in (("mirror-nogc", "cyclic gc disabled", experiments.GC_OFF),):
        specs.append(Spec(key, f"mirror run (1 worker), {label}", "mirror", options={"prelude": prelude}, opt_in=True))
    specs.append(
        Spec(
            "mirror-lowmem",
            "mirror run (1 worker), prefetch 8 MB (not 16)",
            "mirror",
            opt_in=True,
            options={"flow": {"consumer": {"queued.max.messages.kbytes": 8192, "fetch.max.bytes": 8388608}}},
        )
    )
    specs.append(
        Spec("ceiling-rdk", "raw ceiling, librdkafka's default fetch.queue.backoff.ms (1 s)", "ceiling", opt_in=True)
    )
    specs.append(
        Spec(
            "ceiling-idem",
            "raw ceiling with acks=all + idempotence",
            "ceiling",
            opt_in=True,
            options={
                "producer": {"acks": "all", "enable.idempotence": "true"},
                "consumer": {"fetch.queue.backoff.ms": 20},
            },
        )
    )
    # Spark rows run by default (the JVM start-up is part of what they are measured on), but
    # not in the latency phase (micro-batches, not a stream). `plain-spark` is the anchor: the
    # job a PySpark user writes instead, which keeps neither timestamps nor the offset map.
    specs.append(
        Spec(
            "plain-spark",
            "plain PySpark Kafka->Kafka job (local mode; no timestamps, no offset map)",
            "spark",
            options={"plain": True},
        )
    )
    specs.append(Spec("spark", "mirror spark run (local mode)", "spark"))
    specs.append(
        Spec(
            "spark-base", "mirror spark run of --base's tree (local mode)", "spark", opt_in=True, options={"base": True}
        )
    )
    specs.append(
        Spec(
            "spark-eos",
            "mirror spark run, exactly_once (local mode)",
            "spark",
            opt_in=True,
            options={"flow": {"exactly_once": True}},
        )
    )
    specs.append(
        Spec(
            "spark-standalone",
            "mirror spark run (standalone, 1 worker core)",
            "spark",
            opt_in=True,
            options={"standalone": True},
        )
    )
    specs.append(
        Spec(
            "spark-standalone-w2",
            "mirror spark run (standalone, 2 workers x 1 core)",
            "spark",
            opt_in=True,
            options={"standalone": True, "cores": 2},
        )
    )
    return specs
