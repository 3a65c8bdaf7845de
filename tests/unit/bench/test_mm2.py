"""bench/mm2.py: the exactly-once settings of the `mm2-eos` row, and how its committed
progress is read from MirrorMaker 2's offsets topic."""

from __future__ import annotations

import json

from bench import mm2
from bench.contenders import catalogue


def _props(**kw: object) -> list[str]:
    text = mm2.properties("k1", "127.0.0.1:1", "k1t", "127.0.0.1:2", "t", 1, {}, {}, **kw)  # type: ignore[arg-type]
    return text.splitlines()


def test_exactly_once_is_enabled_on_the_target_worker_with_the_internal_rest_server():
    lines = _props(exactly_once_rest_port=31234)
    assert "k1t.exactly.once.source.support = enabled" in lines
    assert "dedicated.mode.enable.internal.rest = true" in lines
    assert "listeners = http://127.0.0.1:31234" in lines


def test_a_transaction_interval_sets_the_connectors_boundary():
    lines = _props(exactly_once_rest_port=31234, transaction_interval_ms=1000)
    assert "k1->k1t.transaction.boundary = interval" in lines
    assert "k1->k1t.transaction.boundary.interval.ms = 1000" in lines
    assert not [ln for ln in _props(exactly_once_rest_port=31234) if "transaction.boundary" in ln]


def test_at_least_once_properties_carry_no_exactly_once_setting():
    assert not [ln for ln in _props() if "exactly.once" in ln or "listeners" in ln or "internal.rest" in ln]


def _record(cluster: str, topic: str, partition: object, offset: object) -> tuple[bytes, bytes]:
    key = json.dumps(["MirrorSourceConnector", {"cluster": cluster, "partition": partition, "topic": topic}])
    return key.encode(), json.dumps({"offset": offset}).encode()


def test_source_offset_reads_the_mirror_source_connectors_records_of_this_topic():
    assert mm2.source_offset(*_record("k1", "t", 3, 41), "k1", "t") == (3, 41)


def test_source_offset_ignores_other_topics_clusters_connectors_and_tombstones():
    assert mm2.source_offset(*_record("k1", "other", 3, 41), "k1", "t") is None
    assert mm2.source_offset(*_record("k9", "t", 3, 41), "k1", "t") is None
    heartbeat = json.dumps(["MirrorHeartbeatConnector", {"sourceClusterAlias": "k1", "targetClusterAlias": "k1t"}])
    assert mm2.source_offset(heartbeat.encode(), b'{"offset":0}', "k1", "t") is None
    key, _ = _record("k1", "t", 3, 41)
    assert mm2.source_offset(key, None, "k1", "t") is None
    assert mm2.source_offset(b"not json", b"{}", "k1", "t") is None
    assert mm2.source_offset(*_record("k1", "t", "3", 41), "k1", "t") is None


def test_covers_needs_the_last_record_of_every_non_empty_partition():
    ends = [10, 0, 5]  # partition 1 is empty: nothing to wait for
    assert mm2.covers({0: 9, 2: 4}, ends)
    assert not mm2.covers({0: 8, 2: 4}, ends)
    assert not mm2.covers({0: 9}, ends)


def test_the_exactly_once_rows_write_in_transactions_and_the_others_do_not():
    specs = {s.key: s for s in catalogue(True, None)}
    assert specs["mm2-eos"].kind == "mm2" and not specs["mm2-eos"].opt_in
    assert {k for k, s in specs.items() if s.transactional} == {
        "mirror-eos",
        "mirror-eos-fast",
        "mm2-eos",
        "mm2-eos-i1s",
        "spark-eos",
    }


def test_without_the_jars_the_exactly_once_row_says_why():
    spec = {s.key: s for s in catalogue(False, None)}["mm2-eos"]
    assert spec.kind == "unavailable" and "make bench-setup" in spec.reason
