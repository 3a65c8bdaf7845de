"""Canary accounting with an injected clock: latency, lost, late, duplicated, restarts."""

from __future__ import annotations

from canary.ledger import REMEMBER, Ledger, Outcome, Probe


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def ledger(max_latency: float = 30.0) -> tuple[Ledger, Clock]:
    clock = Clock()
    return Ledger("nyc-to-sf", max_latency, clock), clock


def send(lg: Ledger, partition: int) -> Probe:
    p = lg.next_probe(partition)
    lg.sent(p)
    return p


def test_probe_round_trips_through_bytes_and_ignores_other_records():
    p = Probe("f", "run1", 2, 7, 123)
    assert Probe.decode(p.encode()) == p
    assert Probe.decode(b"hello") is None and Probe.decode(None) is None and Probe.decode(b'{"a":1}') is None


def test_sequence_per_partition_and_latency():
    lg, clock = ledger()
    a, b, c = send(lg, 0), send(lg, 1), send(lg, 0)
    assert (a.seq, b.seq, c.seq) == (0, 0, 1)
    clock.now += 0.25
    assert [lg.receive(x) for x in (a, b, c)] == [Outcome.RECEIVED] * 3
    assert lg.drain_latencies() == [0.25, 0.25, 0.25]
    assert lg.counts.sent == 3 and lg.counts.received == 3 and lg.counts.lost == 0
    assert lg.outstanding == 0


def test_not_seen_within_max_latency_is_lost_and_late_when_it_turns_up():
    lg, clock = ledger(max_latency=30)
    p = send(lg, 0)
    clock.now += 29
    assert lg.expire() == 0
    clock.now += 2
    assert lg.expire() == 1
    assert lg.counts.lost == 1 and lg.counts.late == 0
    clock.now += 100
    assert lg.receive(p) is Outcome.LATE
    assert lg.counts.lost == 1 and lg.counts.late == 1 and lg.counts.received == 1  # lost - late = 0 truly missing


def test_arrival_after_max_latency_before_expiry_counts_lost_and_late():
    lg, clock = ledger(max_latency=5)
    p = send(lg, 0)
    clock.now += 6
    assert lg.receive(p) is Outcome.LATE
    assert (lg.counts.lost, lg.counts.late) == (1, 1)


def test_gap_is_loss():
    lg, clock = ledger()
    p0, p1, p2 = send(lg, 0), send(lg, 0), send(lg, 0)
    clock.now += 1
    assert lg.receive(p0) is Outcome.RECEIVED
    assert lg.receive(p2) is Outcome.RECEIVED  # p1 overtaken
    assert lg.counts.lost == 1
    assert lg.receive(p1) is Outcome.LATE
    assert lg.counts.late == 1


def test_unacknowledged_probe_is_not_lost_by_a_gap_nor_by_time():
    lg, clock = ledger(max_latency=5)
    p0 = lg.next_probe(0)  # delivery report not processed yet
    p1 = send(lg, 0)
    clock.now += 1
    assert lg.receive(p1) is Outcome.RECEIVED
    assert lg.counts.lost == 0
    clock.now += 10
    lg.expire()
    assert lg.counts.lost == 0
    lg.send_failed(p0)
    assert lg.counts.send_errors == 1 and lg.outstanding == 0


def test_probe_read_before_its_delivery_report_counts():
    lg, clock = ledger()
    p = lg.next_probe(0)
    clock.now += 0.1
    assert lg.receive(p) is Outcome.RECEIVED
    lg.sent(p)
    assert lg.counts.sent == 1 and lg.counts.received == 1 and lg.outstanding == 0


def test_duplicates_are_counted_once_each():
    lg, clock = ledger()
    p = send(lg, 0)
    clock.now += 1
    assert lg.receive(p) is Outcome.RECEIVED
    assert lg.receive(p) is Outcome.DUPLICATE
    assert lg.receive(p) is Outcome.DUPLICATE
    assert lg.counts.duplicated == 2 and lg.counts.received == 1


def test_restart_and_other_flows_are_not_loss():
    lg, clock = ledger(max_latency=5)
    old = send(lg, 0)
    send(lg, 0)
    lg.start_run()  # canary topic recreated
    new = send(lg, 0)
    assert new.seq == 0 and new.run != old.run
    clock.now += 10
    assert lg.receive(old) is Outcome.FOREIGN
    assert lg.receive(Probe("other-flow", lg.run, 0, 0, 0)) is Outcome.FOREIGN
    lg.expire()
    assert lg.counts.lost == 1  # only the new run's probe, not the two from before
    assert lg.counts.runs == 2


def test_force_expire_and_bounded_memory():
    lg, clock = ledger()
    p = send(lg, 0)
    lg.next_probe(1)
    assert lg.expire(force=True) == 2
    lg2, clock2 = ledger()
    q = send(lg2, 0)
    lg2.receive(q)
    clock2.now += REMEMBER + 1
    lg2.expire()
    assert lg2.receive(q) is Outcome.FOREIGN  # too old to judge
    assert p.seq == 0


# -- a probe the mirror could not yet have mirrored is never loss; loss != lateness


def test_probes_sent_before_the_route_exists_are_never_lost_nor_timed():
    clock = Clock()
    lg = Ledger("nyc-to-sf", 4.0, clock, route_grace=34.0)  # refresh 30 s + max_latency 4 s
    early = []
    for _ in range(27):  # the mirror picks the fresh canary topic up 27 s late
        early.append(send(lg, 0))
        clock.now += 1
        lg.expire()
    assert lg.counts.lost == 0 and lg.counts.missing == 0
    # The mirror subscribes and copies the whole backlog, in order: all received, none late.
    outcomes = [lg.receive(p) for p in early]
    assert outcomes == [Outcome.EARLY] * 23 + [Outcome.RECEIVED] * 4  # the last 4 were sent within max_latency
    assert lg.counts.received == 27 and lg.counts.late == 0 and lg.counts.lost == 0
    assert max(lg.drain_latencies()) <= 4.0  # the wait for the route is not mirror latency
    # From now on the route is known: a probe is graded as usual.
    send(lg, 0)
    clock.now += 5
    assert lg.expire() == 1 and lg.counts.lost == 1


def test_route_grace_runs_out_without_any_arrival():
    clock = Clock()
    lg = Ledger("f", 4.0, clock, route_grace=10.0)
    e = send(lg, 0)
    clock.now += 10
    graded = send(lg, 0)  # the mirror had a whole refresh interval: this one counts
    clock.now += 5
    assert lg.expire() == 1  # only the graded one is declared lost
    assert lg.counts.lost == 1
    assert lg.receive(graded) is Outcome.LATE  # overtakes the early one, which is not loss
    clock.now += 10
    lg.expire()
    assert lg.counts.missing == 0
    assert lg.receive(e) is Outcome.EARLY


def test_missing_is_a_gap_overtaken_and_still_absent_after_max_latency():
    lg, clock = ledger(max_latency=4)
    _, _, c = send(lg, 0), send(lg, 0), send(lg, 0)
    clock.now += 1
    assert lg.receive(c) is Outcome.RECEIVED  # a and b overtaken: lost at once, not yet missing
    assert lg.counts.lost == 2 and lg.counts.missing == 0
    lg.expire()
    assert lg.counts.missing == 0  # only 1 s old
    clock.now += 4
    lg.expire()
    assert lg.counts.missing == 2 and lg.counts.late == 0
    lg.expire()
    assert lg.counts.missing == 2  # counted once


def test_a_stopped_mirror_makes_probes_late_never_missing():
    lg, clock = ledger(max_latency=4)
    probes = []
    for _ in range(10):
        probes.append(send(lg, 0))
        clock.now += 1
        lg.expire()
    assert lg.counts.lost == 6  # not seen within 4 s
    for p in probes:  # the mirror is back and copies the backlog in order
        lg.receive(p)
        lg.expire()
    clock.now += 60
    lg.expire()
    assert lg.counts.received == 10 and lg.counts.late == 6 and lg.counts.missing == 0
