"""The drill's own application: a producer and a consumer group with sequence numbers.

In a drill the tool plays the application the runbook's manual steps talk about. It
produces one record per partition of the drill topic every `interval` on the primary,
each carrying `{"run", "p", "seq"}`, and consumes them as the drilled group, first on the
primary, after the failover on the DR cluster. Every acknowledged sequence number and every
one the group read is kept (and saved with the report, so `--from-step` can resume), which
is all `mirror.domain.runbook.cost` needs to count records lost and duplicated exactly.

Records of other runs (last night's drill) share the topic and are skipped, not counted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mirror.config import Config, FlowConfig
from mirror.domain.naming import target_topic
from mirror.domain.runbook import Cost, cost
from mirror.errors import ClusterUnavailable, MirrorError
from mirror.kafka import (
    Admin,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
    make_consumer,
    make_producer,
    raise_for,
    raise_if_refused,
)

log = logging.getLogger(__name__)

PRIMARY, DR = "primary", "dr"


def snapshot_cost(snap: dict[str, Any]) -> Cost:
    """Records lost and duplicated, per a `Workload.snapshot` (its partitions are JSON strings)."""

    def by_partition(d: dict[str, list[int]]) -> dict[int, list[int]]:
        return {int(p): s for p, s in d.items()}

    return cost(by_partition(snap["produced"]), by_partition(snap["reads"][PRIMARY]), by_partition(snap["reads"][DR]))


@dataclass
class WorkloadState:
    """What the workload did so far; JSON in the report folder between invocations."""

    run: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    topic: str = "mirror-drill"
    partitions: int = 3
    produced: dict[int, list[int]] = field(default_factory=dict)
    reads: dict[str, dict[int, list[int]]] = field(default_factory=lambda: {PRIMARY: {}, DR: {}})
    producing: bool = False
    consuming_on: str | None = None
    cutover_ms: int | None = None  # the group stopped on the primary (or the primary died)
    first_dr_read_ms: int | None = None
    primary_killed: bool = False
    # "first record", or "caught up": the group had nothing to re-read on the DR cluster
    # (checkpointed at its last read, everything mirrored) and was at its end.
    rto_basis: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "topic": self.topic,
            "partitions": self.partitions,
            "produced": {str(p): s for p, s in self.produced.items()},
            "reads": {side: {str(p): s for p, s in r.items()} for side, r in self.reads.items()},
            "producing": self.producing,
            "consuming_on": self.consuming_on,
            "cutover_ms": self.cutover_ms,
            "first_dr_read_ms": self.first_dr_read_ms,
            "primary_killed": self.primary_killed,
            "rto_basis": self.rto_basis,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> WorkloadState:
        return cls(
            doc["run"],
            doc["topic"],
            doc["partitions"],
            {int(p): list(s) for p, s in doc["produced"].items()},
            {side: {int(p): list(s) for p, s in r.items()} for side, r in doc["reads"].items()},
            doc["producing"],
            doc["consuming_on"],
            doc["cutover_ms"],
            doc["first_dr_read_ms"],
            doc["primary_killed"],
            doc.get("rto_basis"),
        )


def _caught_up(consumer: Consumer) -> bool:
    """Every assigned partition read to its end (position, else committed, at the high watermark)."""
    try:
        parts = consumer.assignment()
        if not parts:
            return False
        for tp in consumer.position(parts):
            low, high = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=5)
            at = tp.offset
            if at < 0:
                at = consumer.committed([TopicPartition(tp.topic, tp.partition)], timeout=5)[0].offset
            if (at if at >= 0 else low) < high:
                return False
        return True
    except KafkaException:
        return False


def _fatal_cause(producer: Any, exc: KafkaException) -> KafkaException:
    """What a producer's fatal error is (produce says only "Local: Fatal error"): flush
    raises it with its cause, a refused idempotence id say (no Write on the topic: KIP-679).
    confluent-kafka may raise it while serving a delivery report, hence SystemError."""
    try:
        producer.flush(0)
    except KafkaException as cause:
        return cause
    except SystemError:
        pass
    return exc


def _now_ms() -> int:
    return int(time.time() * 1000)


class Workload:
    """Producer and consumer threads; each stops on its own Event."""

    def __init__(
        self,
        config: Config,
        flow: FlowConfig,
        group: str,
        state: WorkloadState,
        *,
        interval: float = 0.1,
        consumer_pause: float = 0.3,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self.config, self.flow, self.group, self.state = config, flow, group, state
        self.interval, self.consumer_pause, self.clock = interval, consumer_pause, clock
        self.lock = threading.Lock()
        self._threads: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self.errors: list[str] = []

    @property
    def dr_topic(self) -> str:
        return target_topic(self.state.topic, self.flow.source, self.flow.rename)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return json.loads(json.dumps(self.state.to_json()))

    # -- topic
    def ensure_topic(self) -> None:
        admin = Admin(self.flow.source, self.config.cluster(self.flow.source))
        existing = admin.topics()
        if self.state.topic in existing:
            self.state.partitions = existing[self.state.topic]
        else:
            admin.create_topic(self.state.topic, self.state.partitions)
            log.info(
                "created the drill topic %s on %s (%d partitions)",
                self.state.topic,
                self.flow.source,
                self.state.partitions,
            )

    # -- producer
    def start_producer(self) -> None:
        self.state.producing = True
        self._start("producer", self._produce)

    def stop_producer(self) -> None:
        self._stop("producer")
        self.state.producing = False

    def _produce(self, stop: threading.Event) -> None:
        producer = make_producer(
            f"{self.flow.source}-drill",
            self.config.cluster(self.flow.source),
            {
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 30000,
            },
        )
        with self.lock:
            seqs = {p: (max(self.state.produced.get(p, [-1]) or [-1]) + 1) for p in range(self.state.partitions)}
        failed: list[KafkaError] = []
        topic, what = self.state.topic, f"produce to {self.state.topic!r}"

        def acked(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                failed.append(err)  # nothing asked of `msg`: a fatal error's report comes with one pending
                return
            value = msg.value()
            if value is not None:  # the workload's own records always have one
                doc = json.loads(value)
                with self.lock:
                    self.state.produced.setdefault(doc["p"], []).append(doc["seq"])

        try:
            while not stop.is_set():
                for p in range(self.state.partitions):
                    value = json.dumps({"run": self.state.run, "p": p, "seq": seqs[p]}).encode()
                    try:
                        producer.produce(topic, value=value, key=str(p).encode(), partition=p, on_delivery=acked)
                        seqs[p] += 1
                    except BufferError:
                        pass
                producer.poll(0)
                errs, failed[:] = list(failed), []
                for err in errs:
                    raise_if_refused(self.flow.source, what, err, group=self.group, topic=topic, op="Write")
                stop.wait(self.interval)
        except KafkaException as exc:  # fatal: produce says only "Local: Fatal error"
            raise_for(self.flow.source, what, _fatal_cause(producer, exc), acl=("Write", "topic", topic))
        finally:
            # Only acknowledged records count as produced; what the primary never confirmed
            # (it died) is dropped here rather than delivered when it comes back.
            with contextlib.suppress(KafkaException, SystemError):  # a fatal error: raised above
                producer.flush(15)
                producer.purge()
                producer.flush(0)

    # -- consumer
    def start_consumer(self, side: str) -> None:
        self.state.consuming_on = side
        self._start("consumer", lambda stop: self._consume(side, stop))

    def stop_consumer(self) -> None:
        self._stop("consumer")
        self.state.consuming_on = None

    def _consume(self, side: str, stop: threading.Event) -> None:
        cluster = self.flow.source if side == PRIMARY else self.flow.target
        topic = self.state.topic if side == PRIMARY else self.dr_topic
        consumer = make_consumer(
            f"{cluster}-drill",
            self.config.cluster(cluster),
            {
                "group.id": self.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            },
        )
        try:
            consumer.subscribe([topic])
            while not stop.is_set():
                batch = consumer.consume(500, timeout=0.2)
                got = []
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        raise_if_refused(cluster, f"consume {topic!r}", err, group=self.group, topic=topic)
                        continue
                    value = msg.value()
                    if value is None:
                        continue
                    try:
                        doc = json.loads(value)
                    except (TypeError, ValueError):
                        continue
                    if isinstance(doc, dict) and doc.get("run") == self.state.run:
                        got.append((int(doc["p"]), int(doc["seq"])))
                # Like an application with work to do per batch, the group trails the
                # producer a little: a primary that dies takes the group's unread records
                # with it unless the mirror copied them (what `lost` measures).
                stop.wait(self.consumer_pause)
                if not batch:
                    if side == DR and self.state.first_dr_read_ms is None and _caught_up(consumer):
                        with self.lock:
                            self.state.first_dr_read_ms, self.state.rto_basis = self.clock(), "caught up"
                    continue
                # Commit what was processed before counting it: the application's contract.
                try:
                    consumer.commit(asynchronous=False)
                except KafkaException as exc:
                    raise_if_refused(cluster, "commit", exc.args[0], group=self.group, topic=topic)
                    self.errors.append(f"commit on {cluster}: {exc}")
                    log.warning("drill consumer: commit on %s failed: %s", cluster, exc)
                now = self.clock()
                with self.lock:
                    for p, seq in got:
                        self.state.reads[side].setdefault(p, []).append(seq)
                    if got and side == DR and self.state.first_dr_read_ms is None:
                        self.state.first_dr_read_ms, self.state.rto_basis = now, "first record"
        finally:
            consumer.close()

    def wait_first_read(self, side: str, timeout: float) -> None:
        """Until the group has read a record of this run on `side` (on DR: or is at the end
        with nothing to re-read); ClusterUnavailable names the cluster otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if any(self.state.reads[side].values()) or (side == DR and self.state.first_dr_read_ms is not None):
                    return
            if self.errors:  # a producer or consumer stopped (a refused grant): waiting on would not help
                raise MirrorError("; ".join(self.errors))
            time.sleep(0.1)
        cluster = self.flow.source if side == PRIMARY else self.flow.target
        raise ClusterUnavailable(
            f"the drill group {self.group!r} read nothing on cluster {cluster!r} within {timeout:g}s",
            hint="check the cluster answers and the flow mirrors the drill topic",
        )

    def drain(self, quiet: float = 5.0, timeout: float = 120.0) -> None:
        """Let the DR consumer read everything it can: every acknowledged record, or nothing
        new for `quiet` seconds (the rest did not reach the DR cluster: lost)."""
        deadline = time.monotonic() + timeout
        last_count, last_change = -1, time.monotonic()
        while time.monotonic() < deadline:
            with self.lock:
                produced = {(p, s) for p, ss in self.state.produced.items() for s in ss}
                read = {(p, s) for side in self.state.reads.values() for p, ss in side.items() for s in ss}
                count = sum(len(ss) for ss in self.state.reads[DR].values())
            if produced <= read:
                return
            if count != last_count:
                last_count, last_change = count, time.monotonic()
            elif time.monotonic() - last_change > quiet:
                return
            time.sleep(0.2)

    def stop_all(self) -> None:
        for name in list(self._threads):
            self._stop(name)

    # -- threads
    def _start(self, name: str, target: Callable[[threading.Event], None]) -> None:
        if name in self._threads:
            return
        stop = threading.Event()

        def body() -> None:
            try:
                target(stop)
            except MirrorError as exc:
                self.errors.append(str(exc))
            except Exception as exc:  # a thread must not die silently: the step reports it
                log.exception("drill %s failed", name)
                self.errors.append(f"{name}: {exc}")

        t = threading.Thread(target=body, name=f"drill-{name}", daemon=True)
        self._threads[name] = (t, stop)
        t.start()

    def _stop(self, name: str) -> None:
        entry = self._threads.pop(name, None)
        if entry:
            entry[1].set()
            entry[0].join(60)
