"""The canary prober: probes into the source's canary topic, read back from the target.

One `FlowProber` per flow. Every `canary.interval` it sends one probe to each partition
of the canary topic on the flow's source (creating the topic when missing), and a reader
thread reads the mirrored topic on the target (named by the flow's rename policy) and
feeds the `Ledger`. Latency is measured at read time on the target, so it covers the
whole path: source produce, mirror consume, target produce, target fetch.

Where the target reader starts: at the target's end offsets when it first sees the topic
(nothing there can belong to this run), or at offset 0 for a topic that appeared after
the prober started (created by the mirror because of this run's probes). Probes of other
runs are ignored by the ledger either way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from canary.ledger import Counts, Ledger, Outcome, Probe
from mirror.config import Config, FlowConfig
from mirror.domain.naming import target_topic
from mirror.errors import AuthorizationFailed, MirrorError
from mirror.kafka import Admin, KafkaError, KafkaException, Message, PartitionReader, make_producer, raise_for
from mirror.kafka.canary_topic import ensure_canary_topic
from mirror.kafka.errors import AUTHORIZATION, authorization_error, denied_in_fatal
from mirror.metrics import CanaryMetrics

log = logging.getLogger(__name__)


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))
    return ordered[idx]


@dataclass
class RoundResult:
    """What `mirror canary once` prints."""

    flow: str
    run: str
    source_topic: str
    target_topic: str
    partitions: int
    counts: Counts
    latencies: list[float]

    @property
    def ok(self) -> bool:
        c = self.counts
        return c.sent > 0 and c.received == c.sent and c.lost == 0 and c.duplicated == 0

    def to_json(self) -> dict[str, Any]:
        lat = self.latencies
        return {
            "flow": self.flow,
            "run": self.run,
            "source_topic": self.source_topic,
            "target_topic": self.target_topic,
            "partitions": self.partitions,
            **self.counts.as_dict(),
            "latency_seconds": {
                "min": min(lat) if lat else None,
                "p50": percentile(lat, 0.5),
                "p99": percentile(lat, 0.99),
                "max": max(lat) if lat else None,
            },
            "ok": self.ok,
        }


class FlowProber:
    def __init__(
        self,
        config: Config,
        flow: FlowConfig,
        *,
        metrics: CanaryMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config, self.flow = config, flow
        self.topic = config.canary.topic
        self.target_topic = target_topic(self.topic, flow.source, flow.rename)
        self.metrics = metrics
        self.clock = clock
        # A fresh or recreated canary topic reaches the target only after the mirror's next
        # topic refresh; probes sent before then are not graded (see canary.ledger).
        self.ledger = Ledger(
            flow.name, config.canary.max_latency, clock, route_grace=flow.refresh_interval + config.canary.max_latency
        )
        self._lock = threading.Lock()
        self._published = Counts()
        self._source = Admin(flow.source, config.clusters[flow.source])
        self._target = Admin(flow.target, config.clusters[flow.target])
        # The source refused this producer (a delivery report, or its fatal error): set from
        # the producer's callbacks, raised by the round instead of a verdict on lost probes.
        self._refusal: tuple[AuthorizationFailed, bool] | None = None  # (error, fatal: never clears)
        self._producer = make_producer(
            f"{flow.source}-canary-{flow.name}",
            config.clusters[flow.source],
            # Idempotent and unbatched: per-partition order is what makes a gap mean loss,
            # and a probe must not wait for company before leaving.
            # Never auto-created by a probe: a deleted topic must be seen missing (and recreated
            # by ensure_topic, with a new run) rather than silently reappear with old numbering.
            {
                "enable.idempotence": True,
                "linger.ms": 0,
                "acks": "all",
                "message.timeout.ms": int(config.canary.max_latency * 1000),
                "allow.auto.create.topics": False,
                "error_cb": self._producer_error,
            },
        )
        # A short fetch wait: the broker would otherwise hold an empty fetch up to 500 ms,
        # and that wait would be counted as mirror latency.
        self._reader = PartitionReader(
            f"{flow.target}-canary-{flow.name}", config.clusters[flow.target], {"fetch.wait.max.ms": 10}
        )
        self._started = clock()
        self._seen_target_topic: bool | None = None  # did the target topic exist when we first looked?
        self.partitions = 0
        self._next_attach = 0.0
        if metrics is not None:
            metrics.max_latency.labels(flow.name).set(config.canary.max_latency)
            # Every series exists from the start at 0, so increase()/rate() in the alert
            # rules see the first loss rather than a series appearing out of nowhere.
            for c in (
                metrics.sent,
                metrics.received,
                metrics.lost,
                metrics.late,
                metrics.missing,
                metrics.duplicated,
                metrics.send_errors,
                metrics.runs,
                metrics.latency,
            ):
                c.labels(flow.name)

    # -- source side
    def ensure_topic(self) -> None:
        """Create the canary topic when missing; a recreated topic starts a new run."""
        count, created = ensure_canary_topic(self._source, self.topic)
        if created:
            log.info(
                "flow %s: created canary topic %s on %s (%d partitions)",
                self.flow.name,
                self.topic,
                self.flow.source,
                count,
            )
            if self.partitions:  # it existed before: deleted and recreated under us
                with self._lock:
                    self.ledger.start_run()
                log.warning(
                    "flow %s: canary topic %s was recreated; sequence numbers restart (run %s)",
                    self.flow.name,
                    self.topic,
                    self.ledger.run,
                )
        self.partitions = count

    def send_round(self, flush_timeout: float | None = None) -> int:
        """One probe to each partition; returns how many were handed to the producer.

        Raises AuthorizationFailed when the source refused the probes."""
        with self._lock:
            if self._refusal is not None and not self._refusal[1]:
                self._refusal = None  # a refused topic may be granted again; a dead producer may not
        self.ensure_topic()
        sent = 0
        for partition in range(self.partitions):
            with self._lock:
                probe = self.ledger.next_probe(partition)
            try:
                self._producer.produce(
                    self.topic,
                    value=probe.encode(),
                    key=str(partition).encode(),
                    partition=partition,
                    on_delivery=self._delivered(probe),
                )
                sent += 1
            except (BufferError, Exception) as exc:  # noqa: BLE001 - librdkafka queue full or unknown partition
                # A producer that has the topic's metadata already refuses here, not in a report.
                err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
                if isinstance(err, KafkaError):
                    self._producer_error(err)
                log.warning(
                    "flow %s: cannot send canary probe to %s[%d]: %s", self.flow.name, self.topic, partition, exc
                )
                with self._lock:
                    self.ledger.send_failed(probe)
        try:
            self._flush(flush_timeout if flush_timeout is not None else self.config.canary.max_latency)
        finally:
            self.publish()
        return sent

    def _delivered(self, probe: Probe) -> Callable[[KafkaError | None, Message], None]:
        def cb(err: KafkaError | None, _msg: Message) -> None:
            if err is not None and err.code() in AUTHORIZATION:
                self._refuse(err, fatal=False)
            with self._lock:
                if err is None:
                    self.ledger.sent(probe)
                else:
                    log.warning(
                        "flow %s: canary probe %s[%d] seq %d not stored: %s",
                        self.flow.name,
                        self.topic,
                        probe.partition,
                        probe.seq,
                        err,
                    )
                    self.ledger.send_failed(probe)

        return cb

    def _producer_error(self, err: KafkaError) -> None:
        """error_cb: the idempotent producer refused its id (or a request) dies with a fatal
        error; librdkafka may have wrapped the broker's refusal, so its text is read too."""
        if err.code() in AUTHORIZATION or (err.fatal() and denied_in_fatal(err) is not None):
            self._refuse(err, fatal=bool(err.fatal()))

    def _refuse(self, err: KafkaError, *, fatal: bool) -> None:
        # Write on the canary topic is the only grant this producer needs: it also grants the
        # idempotence id since Kafka 3.0 (KIP-679; IdempotentWrite on the cluster before).
        refusal = authorization_error(
            self.flow.source, err, f"produce probes to {self.topic!r}", ("Write", "topic", self.topic)
        )
        with self._lock:
            if self._refusal is None or (fatal and not self._refusal[1]):
                self._refusal = (refusal, fatal)

    def _raise_if_refused(self) -> None:
        with self._lock:
            refusal = self._refusal
        if refusal is not None:
            raise refusal[0]

    # -- target side
    def attach(self) -> bool:
        """Start reading the target topic's partitions (new ones too); False while it does not exist."""
        existing = self._target.topics()
        count = existing.get(self.target_topic)
        if self._seen_target_topic is None:
            self._seen_target_topic = count is not None
        if count is None:
            # Not listed: missing (the mirror has not made it yet), or hidden from us, which
            # would otherwise pass for a mirror that never delivers a probe.
            self._target.require_visible([], existing, "Read", literal=[self.target_topic])
            return False
        new = [(self.target_topic, p) for p in range(count) if (self.target_topic, p) not in self._reader.assigned]
        if new:
            if self._seen_target_topic and not self._reader.assigned:
                marks = self._target.watermarks(new, committed_only=False)
                offsets = {k: marks[k].high for k in new}
            else:
                offsets = {k: 0 for k in new}
            self._reader.add(offsets)
        return True

    def poll(self, timeout: float = 0.5) -> int:
        """Read what arrived on the target, expire what is overdue; returns this run's probes read."""
        if not self._reader.assigned or time.monotonic() >= self._next_attach:
            # Also re-checked every interval: the target topic may gain partitions.
            self._next_attach = time.monotonic() + self.config.canary.interval
            try:
                self.attach()
            except MirrorError as exc:
                log.warning("flow %s: canary target not readable: %s", self.flow.name, exc)
        mine = 0
        if self._reader.assigned:
            for rec in self._reader.read(timeout=timeout):
                probe = Probe.decode(rec.value)
                if probe is None:
                    continue
                with self._lock:
                    outcome = self.ledger.receive(probe)
                if outcome is not Outcome.FOREIGN:
                    mine += 1
        else:
            time.sleep(min(timeout, 0.5))  # the mirror has not created the target topic yet
        # Expired whether or not the target is readable: a missing topic is loss too.
        with self._lock:
            self.ledger.expire()
        self.publish()
        return mine

    # -- metrics
    def publish(self) -> None:
        """Move what the ledger counted since last time into the Prometheus counters."""
        if self.metrics is None:
            return
        with self._lock:
            now = Counts(**self.ledger.counts.as_dict())
            latencies = self.ledger.drain_latencies()
            outstanding = self.ledger.outstanding
        name = self.flow.name
        m = self.metrics
        for attr, counter in (
            ("sent", m.sent),
            ("received", m.received),
            ("lost", m.lost),
            ("late", m.late),
            ("missing", m.missing),
            ("duplicated", m.duplicated),
            ("send_errors", m.send_errors),
            ("runs", m.runs),
        ):
            delta = getattr(now, attr) - getattr(self._published, attr)
            if delta > 0:
                counter.labels(name).inc(delta)
        for lat in latencies:
            m.latency.labels(name).observe(lat)
        m.outstanding.labels(name).set(outstanding)
        self._published = now

    # -- one round for scripts
    def once(self, stop: threading.Event | None = None) -> RoundResult:
        """Attach, send one probe per partition, wait up to max_latency for them, report."""
        try:
            self.attach()
        except AuthorizationFailed:
            raise  # not "not readable yet": the round could only report every probe lost
        except MirrorError as exc:
            log.warning("flow %s: canary target not readable yet: %s", self.flow.name, exc)
        self._warm_up()
        with self._lock:
            self.ledger.assume_route()
            self.ledger.drain_latencies()
        latencies: list[float] = []
        self.send_round()
        deadline = time.monotonic() + self.config.canary.max_latency
        while time.monotonic() < deadline and not (stop and stop.is_set()):
            self.poll(timeout=0.25)
            self._producer.poll(0)  # serve reports still due, so a refusal ends the round now
            self._raise_if_refused()
            with self._lock:
                latencies += self.ledger.drain_latencies()
                if self.ledger.outstanding == 0:
                    break
        # Every report the producer has (a refusal arriving at the deadline too) before the
        # verdict: a probe the source refused is a missing grant, never a lost probe.
        self._flush(0)
        with self._lock:
            self.ledger.expire(force=True)
            latencies += self.ledger.drain_latencies()
            counts = Counts(**self.ledger.counts.as_dict())
        return RoundResult(
            self.flow.name, self.ledger.run, self.topic, self.target_topic, self.partitions, counts, latencies
        )

    def _warm_up(self) -> None:
        """Connect both clients before the first probe, so a one-shot round measures the
        mirror, not a fresh producer's metadata and id handshake or the reader's first fetch."""
        self.ensure_topic()
        try:
            self._producer.list_topics(self.topic, timeout=self.config.clusters[self.flow.source].timeout)
        except Exception as exc:  # noqa: BLE001 - the round itself reports an unreachable source
            log.debug("flow %s: producer warm-up: %s", self.flow.name, exc)
        if self._reader.assigned:
            self.poll(timeout=0.5)  # nothing of this run exists yet; starts the fetchers

    def close(self, *, refused: bool = True) -> None:
        """Flush and close; `refused`: raise a refusal the producer reported (one coming in
        this last flush too), as `mirror canary once` does, not a daemon that logged it."""
        try:
            self._flush(5, refused=refused)
        finally:
            self._reader.close()

    def _flush(self, timeout: float, *, refused: bool = True) -> None:
        """The producer's flush; a refused grant (reported by a callback it served, or raised
        as a fatal producer error) as the project's exception."""
        try:
            self._producer.flush(timeout)
        except KafkaException as exc:
            # CLUSTER_AUTHORIZATION_FAILED is the idempotent producer refused its id: since
            # Kafka 3.0 (KIP-679) Write on the topic is what grants it (IdempotentWrite on the
            # cluster only on older brokers), and Write on the canary topic is what `mirror acls` lists.
            self._raise_if_refused()
            raise_for(self.flow.source, f"produce probes to {self.topic!r}", exc, acl=("Write", "topic", self.topic))
        if refused:
            self._raise_if_refused()


class Prober:
    """All flows' probers: apscheduler sends rounds, one reader thread per flow reads."""

    def __init__(self, config: Config, flows: Sequence[FlowConfig], *, metrics: CanaryMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics
        self.probers = [FlowProber(config, f, metrics=metrics) for f in flows]

    def _unexpected(self, where: str) -> None:
        if self.metrics is not None:
            self.metrics.unexpected.labels(where).inc()

    def _round(self, prober: FlowProber) -> None:
        try:
            prober.send_round(flush_timeout=min(self.config.canary.interval, self.config.canary.max_latency))
        except MirrorError as exc:
            log.warning("flow %s: canary round failed: %s", prober.flow.name, exc)
        except Exception:  # unknown: logged with context and counted; the next round tries again
            log.exception("flow %s: canary round failed", prober.flow.name)
            self._unexpected("canary_round")

    def _read_loop(self, prober: FlowProber, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                prober.poll(timeout=0.5)
            except MirrorError as exc:
                log.warning("flow %s: canary read failed: %s", prober.flow.name, exc)
                stop.wait(1.0)
            except Exception:
                log.exception("flow %s: canary read failed", prober.flow.name)
                self._unexpected("canary_read")
                stop.wait(1.0)

    def run(self, stop: threading.Event) -> None:
        readers = [
            threading.Thread(target=self._read_loop, args=(p, stop), name=f"canary-read-{p.flow.name}", daemon=True)
            for p in self.probers
        ]
        for t in readers:
            t.start()
        scheduler = BackgroundScheduler(timezone="UTC")
        for p in self.probers:
            # coalesce + one instance: a slow round (source down) is not followed by a burst.
            scheduler.add_job(
                self._round,
                "interval",
                args=[p],
                seconds=self.config.canary.interval,
                next_run_time=datetime.now().astimezone(),
                max_instances=1,
                coalesce=True,
                id=f"canary-{p.flow.name}",
            )
        scheduler.start()
        log.info("canary: probing %d flows every %gs", len(self.probers), self.config.canary.interval)
        try:
            stop.wait()
        finally:
            scheduler.shutdown(wait=True)
            for t in readers:
                t.join(timeout=5)
            for p in self.probers:
                p.close(refused=False)
