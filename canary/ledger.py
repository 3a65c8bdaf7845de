"""Canary accounting: which probes were sent, which arrived, which are lost, late or doubled.

Pure: no Kafka, no clock of its own (one is injected), so every rule below is unit-tested
without sleeping.

Rules (Xinfra Monitor's sequence numbers, KMinion's round-trip deadline):

* Each probe carries (flow, run, partition, seq, send time). `run` changes when the
  prober starts or the canary topic is recreated; probes of another run or another flow
  (flows sharing a source share its canary topic) are ignored, so a restart is never
  counted as loss.
* **received**: the first copy of a probe read on the target; latency = read time - send time.
* **early**: a probe sent before its route was known to exist end to end. The mirror picks
  a new source topic up at its next topic refresh, so probes of a fresh (or recreated)
  canary topic may wait for that refresh; they are not the mirror's fault. The route is
  known once a probe of the run arrived, or at the latest `route_grace` seconds after the
  run started (the flow's refresh interval plus `max_latency`: by then a running mirror
  has subscribed). Early probes are never lost, late or missing; when they arrive they
  count as received, and their latency is observed only if within `max_latency` (beyond
  it, it measured the wait for the route, not the mirror).
* **lost**: a probe not seen within `max_latency`, or overtaken: a later sequence number
  of the same partition arrived first. Only probes the source acknowledged count.
* **late**: a probe that arrived after `max_latency` (it was, or is at that moment,
  counted lost): the mirror was slow or stopped, nothing was lost.
* **missing**: a probe that never arrived: overtaken by a later probe of its partition
  (Kafka and the mirror keep per-partition order, so it is not coming in order) and still
  absent `max_latency` after it was sent. This, and only this, is loss worth a page.
* **duplicated**: a probe read more than once (e.g. a mirror killed before its commit
  re-sent it).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

Clock = Callable[[], float]

# How long a received probe is remembered for duplicate detection. Older copies are
# ignored as stale: memory stays bounded on a prober that runs for months.
REMEMBER = 3600.0


@dataclass(frozen=True, slots=True)
class Probe:
    flow: str
    run: str
    partition: int
    seq: int
    sent_ms: int

    def encode(self) -> bytes:
        return json.dumps(
            {"canary": 1, "flow": self.flow, "run": self.run, "p": self.partition, "seq": self.seq, "ts": self.sent_ms},
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def decode(raw: bytes | None) -> Probe | None:
        """A probe, or None for anything else found on the topic."""
        if not raw:
            return None
        try:
            d = json.loads(raw)
            if not isinstance(d, dict) or d.get("canary") != 1:
                return None
            return Probe(str(d["flow"]), str(d["run"]), int(d["p"]), int(d["seq"]), int(d["ts"]))
        except (ValueError, KeyError, TypeError):
            return None


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


class Outcome(str, Enum):
    RECEIVED = "received"
    LATE = "late"
    DUPLICATE = "duplicate"
    EARLY = "early"  # sent before its route existed: received, latency not observed
    FOREIGN = "foreign"  # another flow's or another run's probe, or one too old to judge


@dataclass
class Counts:
    sent: int = 0
    received: int = 0
    lost: int = 0
    late: int = 0
    missing: int = 0
    duplicated: int = 0
    send_errors: int = 0
    runs: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class _Pending:
    probe: Probe
    acked: bool = False  # the source acknowledged it
    early: bool = False  # sent before the route was known to exist


@dataclass
class _Lost:
    sent_ms: int
    missing: bool = False  # counted in `missing`


@dataclass
class Ledger:
    flow: str
    max_latency: float
    clock: Clock
    route_grace: float = 0.0  # seconds after a run's start by which the route must exist
    run: str = ""
    counts: Counts = field(default_factory=Counts)
    _next_seq: dict[int, int] = field(default_factory=dict)
    _pending: dict[tuple[int, int], _Pending] = field(default_factory=dict)
    _lost: dict[tuple[int, int], _Lost] = field(default_factory=dict)  # declared lost, not arrived (yet)
    _early: set[tuple[int, int]] = field(default_factory=set)  # early probes not arrived (yet)
    _newest_arrived: dict[int, int] = field(default_factory=dict)  # partition -> highest seq read
    _run_started: float = 0.0
    _route_known: bool = False
    _seen: dict[tuple[int, int], float] = field(default_factory=dict)  # arrived -> when
    _latencies: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.run:
            self.start_run()

    def start_run(self, run: str | None = None) -> None:
        """Restart sequences (prober start, canary topic recreated): nothing pending counts as lost."""
        self.run = run or new_run_id()
        self._next_seq.clear()
        self._pending.clear()
        self._lost.clear()
        self._early.clear()
        self._seen.clear()
        self._newest_arrived.clear()
        self._run_started = self.clock()
        self._route_known = False
        self.counts.runs += 1

    @property
    def route_known(self) -> bool:
        """Has this run's route been shown to exist (a probe arrived, or the grace ran out)?"""
        if not self._route_known and self.clock() - self._run_started >= self.route_grace:
            self._route_known = True
        return self._route_known

    def assume_route(self) -> None:
        """Grade every probe from now on (a one-shot check asks "does it arrive now?")."""
        self._route_known = True

    # -- sending
    def next_probe(self, partition: int) -> Probe:
        seq = self._next_seq.get(partition, 0)
        self._next_seq[partition] = seq + 1
        probe = Probe(self.flow, self.run, partition, seq, int(self.clock() * 1000))
        self._pending[(partition, seq)] = _Pending(probe, early=not self.route_known)
        return probe

    def sent(self, probe: Probe) -> None:
        """The source acknowledged the probe."""
        if probe.run != self.run:
            return
        self.counts.sent += 1
        entry = self._pending.get((probe.partition, probe.seq))
        if entry is not None:
            entry.acked = True

    def send_failed(self, probe: Probe) -> None:
        """The source refused it: it is not expected on the target."""
        if probe.run != self.run:
            return
        self.counts.send_errors += 1
        self._pending.pop((probe.partition, probe.seq), None)

    # -- receiving
    def receive(self, probe: Probe) -> Outcome:
        if probe.flow != self.flow or probe.run != self.run:
            return Outcome.FOREIGN
        now = self.clock()
        key = (probe.partition, probe.seq)
        if key in self._seen:
            self.counts.duplicated += 1
            return Outcome.DUPLICATE
        entry = self._pending.pop(key, None)
        lost = self._lost.pop(key, None)
        early = (entry is not None and entry.early) or key in self._early
        if entry is None and lost is None and not early:
            return Outcome.FOREIGN  # forgotten long ago, or never sent by this prober
        self._early.discard(key)
        self._route_known = True  # a probe of this run made it: the route exists end to end
        self._seen[key] = now
        self.counts.received += 1
        # Overtaken: acknowledged probes of this partition with a lower sequence number.
        for other in [k for k, e in self._pending.items() if k[0] == probe.partition and k[1] < probe.seq and e.acked]:
            e = self._pending.pop(other)
            if e.early:
                self._early.add(other)  # could not have been mirrored: never loss
            else:
                self._lost[other] = _Lost(e.probe.sent_ms)
                self.counts.lost += 1
        if probe.seq > self._newest_arrived.get(probe.partition, -1):
            self._newest_arrived[probe.partition] = probe.seq
        latency = max(0.0, now - probe.sent_ms / 1000.0)
        if early:
            # Within max_latency it measured the mirror like any probe; beyond it, the wait
            # for the route (the mirror's topic refresh), which is not mirror latency.
            if latency <= self.max_latency:
                self._latencies.append(latency)
                return Outcome.RECEIVED
            return Outcome.EARLY
        self._latencies.append(latency)
        if lost is not None:
            self.counts.late += 1
            return Outcome.LATE
        if latency > self.max_latency:
            self.counts.lost += 1  # not seen within max_latency: lost by definition, and late
            self.counts.late += 1
            return Outcome.LATE
        return Outcome.RECEIVED

    def expire(self, force: bool = False) -> int:
        """Declare lost what was not seen within max_latency (everything pending if `force`),
        and missing what was overtaken and is still absent after max_latency.

        Probes the source has not acknowledged yet are left alone unless forced: they are
        the producer's problem (counted in send_errors when it gives up), not the mirror's.
        Early probes (sent before the route existed) are never declared lost.
        """
        now = self.clock()
        overdue = [
            k
            for k, e in self._pending.items()
            if (e.acked or force) and (force or now - e.probe.sent_ms / 1000.0 > self.max_latency)
        ]
        declared = 0
        for k in overdue:
            e = self._pending.pop(k)
            if e.early:
                self._early.add(k)
                continue
            self._lost[k] = _Lost(e.probe.sent_ms)
            self.counts.lost += 1
            declared += 1
        for (partition, seq), gone in self._lost.items():
            overtaken = seq < self._newest_arrived.get(partition, -1)
            if overtaken and not gone.missing and (force or now - gone.sent_ms / 1000.0 > self.max_latency):
                gone.missing = True
                self.counts.missing += 1
        for k in [k for k, t in self._seen.items() if now - t > REMEMBER]:
            del self._seen[k]
        if len(self._lost) > 100_000:  # never arriving; keep memory bounded
            self._lost.clear()
        if len(self._early) > 100_000:
            self._early.clear()
        return declared

    # -- reading results
    @property
    def outstanding(self) -> int:
        return len(self._pending)

    def drain_latencies(self) -> list[float]:
        out, self._latencies = self._latencies, []
        return out
