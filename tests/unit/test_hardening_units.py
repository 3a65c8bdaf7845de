"""Issue 10's pure parts: restart backoff, broker settings of `mirror dev`, reports that carry
no offset, the recorder's bounded buffer. No network."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from mirror.cli.dev import parse_broker_config
from mirror.devenv.kafka import ClusterSpec, _server_properties
from mirror.domain.offsetmap import OffsetSync
from mirror.run.recorder import OffsetMapRecorder
from mirror.run.supervisor import HEALTHY_AFTER, RESTART_BACKOFF_MAX, crash_streak, restart_delay


def test_restart_delay_doubles_and_is_capped():
    delays = [restart_delay(n) for n in range(1, 10)]
    assert delays[:4] == [2.0, 4.0, 8.0, 16.0]
    assert all(b >= a for a, b in zip(delays, delays[1:]))
    assert max(delays) == RESTART_BACKOFF_MAX


def test_a_fault_moving_between_workers_keeps_backing_off():
    """A poison partition kills worker 0 after 30 s, moves to worker 1 (running for an hour),
    kills it 30 s later, and so on: the pool's streak grows, whichever worker dies."""
    streak, calm, now, delays = 0, None, 3600.0, []
    for _ in range(6):
        streak = crash_streak(streak, calm, now)
        calm = now
        delay = restart_delay(streak)
        delays.append(delay)
        now += delay
        calm = now  # the restart
        now += 30  # the next crash, on whichever worker holds the partition now
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0]
    # An hour with no crash since the last restart: the next crash starts over.
    assert crash_streak(streak, calm, calm + HEALTHY_AFTER) == 1


def test_broker_config_pairs_and_mistakes():
    assert parse_broker_config(("auto.create.topics.enable=false", "num.partitions=3", "num.partitions=4")) == {
        "auto.create.topics.enable": "false", "num.partitions": "4",
    }
    for bad in ("novalue", "=x", "two words=1"):
        with pytest.raises(click.BadParameter, match="KEY=VALUE"):
            parse_broker_config((bad,))


def test_server_properties_use_kafka_defaults_and_extra_lines_win():
    spec = ClusterSpec("nyc", 19092, Path("/tmp/x"))
    plain = _server_properties(spec)
    assert "auto.create.topics.enable" not in plain  # Kafka's default: on
    extra = _server_properties(spec, {"auto.create.topics.enable": "false", "num.partitions": "3"})
    props = {}
    for line in extra.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            props[k] = v  # java.util.Properties: the last line of a key wins
    assert props["auto.create.topics.enable"] == "false" and props["num.partitions"] == "3"


def test_recorder_backlog_is_bounded():
    class Down:
        def write_syncs(self, flow, rows):
            from mirror.errors import OffsetStoreError

            raise OffsetStoreError("down")

    from mirror.domain.acks import AckBatch, backlog_full

    rec = OffsetMapRecorder(Down(), "f", registry=None)  # type: ignore[arg-type]
    rec.max_pending = 3
    for i in range(5):
        b = AckBatch("f", "t", 0, "x.t", i, i + 1, syncs=[(i, i * 2)])
        rec.on_acked([b])
    assert rec.pending == 5 and rec.backlog_full and backlog_full([rec])
    assert not backlog_full([object()])  # listeners without a buffer never hold reading back
    assert OffsetSync("t", 0, 1, 2).delta == 1
