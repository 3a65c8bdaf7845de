"""A canary round whose probes the source refused ends naming the missing Write on the canary
topic, whenever the producer reports the refusal: while the round's flush waits, while the
round waits for probes on the target, or only once its deadline has passed. In-memory fakes
of the producer, the admin clients and the target reader; no network."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

import canary.prober as prober_module
from canary.prober import FlowProber
from mirror import config
from mirror.errors import AuthorizationFailed

TEXT = """\
clusters: {nyc: {bootstrap: "a:1"}, sf: {bootstrap: "b:1"}}
flows:
  - {name: p, source: nyc, target: sf, topics: {include: [".*"]}, groups: ["app-.*"]}
canary: {topic: canary-t, interval: 0.1s, max_latency: 0.3s}
"""


class FakeProducer:
    """Holds each probe's delivery report (and an error event, if any) until the service call
    `serve_on` picks: 'flush' (the round's flush with a timeout), 'poll' (a poll while the round
    waits for the target), or 'last' (a zero-timeout flush, the one after the round's deadline);
    or 'produce': produce() raises the report's error (the producer knew the topic's metadata)."""

    def __init__(self, settings: dict[str, Any], report: KafkaError | None, event: KafkaError | None, serve_on: str):
        self.error_cb: Callable[[KafkaError], None] = settings.get("error_cb", lambda _err: None)
        self.report, self.event, self.serve_on = report, event, serve_on
        self.pending: list[Callable[[KafkaError | None, Any], None]] = []

    def produce(self, _topic: str, *, on_delivery: Callable[[KafkaError | None, Any], None], **_: Any) -> None:
        if self.serve_on == "produce" and self.report is not None:
            raise KafkaException(self.report)
        self.pending.append(on_delivery)

    def list_topics(self, *_: Any, **__: Any) -> None:
        return None

    def _serve(self, call: str) -> int:
        if call == self.serve_on and self.pending:
            if self.event is not None:
                self.error_cb(self.event)
                self.event = None  # librdkafka reports its fatal error once
            if self.report is not None:
                for cb in self.pending:
                    cb(self.report, None)
                self.pending.clear()
        return len(self.pending)

    def flush(self, timeout: float) -> int:
        return self._serve("last" if timeout == 0 else "flush")

    def poll(self, _timeout: float) -> int:
        return self._serve("poll")


class FakeAdmin:
    """The target topic not there yet (the round waits its whole deadline for it)."""

    def __init__(self, *_: Any) -> None:
        pass

    def topics(self) -> dict[str, int]:
        return {}

    def require_visible(self, *_: Any, **__: Any) -> None:
        return None


class FakeReader:
    assigned: set[tuple[str, int]] = set()

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def close(self) -> None:
        return None


def _prober(monkeypatch: pytest.MonkeyPatch, **producer: Any) -> FlowProber:
    monkeypatch.setattr(prober_module, "Admin", FakeAdmin)
    monkeypatch.setattr(prober_module, "PartitionReader", FakeReader)
    monkeypatch.setattr(prober_module, "ensure_canary_topic", lambda _admin, _topic: (2, False))
    monkeypatch.setattr(
        prober_module, "make_producer", lambda _name, _cluster, settings: FakeProducer(dict(settings), **producer)
    )
    cfg = config.parse(TEXT, env={})
    return FlowProber(cfg, cfg.flows[0])


TOPIC_REFUSED = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Broker: Topic authorization failed")
# The idempotent producer refused its id: a fatal error event, the probes timed out unanswered.
ID_REFUSED = KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed", fatal=True)
TIMED_OUT = KafkaError(KafkaError._MSG_TIMED_OUT, "Local: Message timed out")


WHEN = ["flush", "poll", "last"]
CASES = [
    *[pytest.param(TOPIC_REFUSED, None, w, id=f"topic-{w}") for w in ["produce", *WHEN]],
    *[pytest.param(TIMED_OUT, ID_REFUSED, w, id=f"id-{w}") for w in WHEN],
    *[pytest.param(None, ID_REFUSED, w, id=f"id-unreported-{w}") for w in WHEN],
]


@pytest.mark.parametrize(("report", "event", "serve_on"), CASES)
def test_a_refused_probe_is_a_missing_write_not_a_lost_probe(monkeypatch, report, event, serve_on):
    prober = _prober(monkeypatch, report=report, event=event, serve_on=serve_on)
    with pytest.raises(AuthorizationFailed) as refused:
        prober.once()
    assert "missing Write on topic 'canary-t'" in str(refused.value)
    assert "cluster 'nyc'" in str(refused.value)


def test_probes_unanswered_without_a_refusal_are_the_rounds_verdict(monkeypatch):
    prober = _prober(monkeypatch, report=TIMED_OUT, event=None, serve_on="last")
    result = prober.once()
    assert not result.ok and result.counts.send_errors == 2


def test_a_daemon_round_is_refused_again_only_while_the_topic_is(monkeypatch):
    """A refused topic may be granted again (the next round starts clean); a producer whose id
    was refused is dead (every round says so)."""
    prober = _prober(monkeypatch, report=TOPIC_REFUSED, event=None, serve_on="flush")
    with pytest.raises(AuthorizationFailed):
        prober.send_round()
    prober._producer.report = None  # granted: reports of success (held: never served here)
    assert prober.send_round() == 2
    prober.close(refused=False)

    dead = _prober(monkeypatch, report=TIMED_OUT, event=ID_REFUSED, serve_on="flush")
    for _ in range(2):
        with pytest.raises(AuthorizationFailed):
            dead.send_round()
