"""bench/harness.py's throughput phase: each rep's order written down, runs at each size kept
apart. The runs themselves are made up (the harness's own logic only; no clusters)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from bench import harness
from bench.contenders import catalogue


def test_each_rep_runs_in_its_own_order_and_the_smaller_topics_runs_are_kept_apart(monkeypatch):
    ran: list[tuple[str, str, int]] = []

    def fake_run(env: Any, spec: Any, p: Any, rep: int, src: harness.SourceLoad) -> dict[str, Any]:
        ran.append((spec.key, src.topic, rep))
        return {"rep": rep, "ok": False, "error": "made up", "records": src.records}

    monkeypatch.setattr(harness, "throughput_run", fake_run)
    specs = [s for s in catalogue(True, None) if s.key in ("mirror", "plain-spark", "spark")]
    loads = [
        harness.SourceLoad(harness.SOURCE_TOPIC, 1000, [500, 500]),
        harness.SourceLoad(harness.SMALL_TOPIC, 300, [150, 150]),
    ]
    runs: dict[str, list[dict[str, Any]]] = {s.key: [] for s in specs}
    small: dict[str, list[dict[str, Any]]] = {}
    orders: dict[str, list[list[str]]] = {}

    harness._throughput_phase(None, specs, harness.Params(reps=2), loads, runs, small, orders)  # type: ignore[arg-type]

    assert orders["throughput"] == [
        ["mirror", "mirror@300", "plain-spark", "plain-spark@300", "spark", "spark@300"],
        ["spark@300", "spark", "plain-spark@300", "plain-spark", "mirror@300", "mirror"],
    ]
    assert [(k, rep) for k, t, rep in ran if t == harness.SOURCE_TOPIC][:3] == [
        ("mirror", 0),
        ("plain-spark", 0),
        ("spark", 0),
    ]
    assert {k: [(r["rep"], r["position"], r["records"]) for r in rs] for k, rs in runs.items()} == {
        "mirror": [(0, 0, 1000), (1, 5, 1000)],
        "plain-spark": [(0, 2, 1000), (1, 3, 1000)],
        "spark": [(0, 4, 1000), (1, 1, 1000)],
    }
    assert {k: [r["records"] for r in rs] for k, rs in small.items()} == {
        "mirror": [300, 300],
        "plain-spark": [300, 300],
        "spark": [300, 300],
    }


@pytest.mark.parametrize("marginal", ["0", "1000000", "2000000"])
def test_a_marginal_size_outside_the_load_is_a_usage_error(marginal, capsys):
    with pytest.raises(SystemExit) as exit_:
        harness.main(["--records", "1000000", "--marginal", marginal])
    assert exit_.value.code == 2
    assert "--marginal" in capsys.readouterr().err


def test_the_quick_mode_spends_nothing_on_the_warm_up():
    assert harness.Params().warmup and not harness.Params.quick_mode().warmup


def test_a_port_for_several_workers_has_all_of_its_ports_free():
    """`mirror run --workers N --metrics-port P` serves worker i on P + i: every one of them must
    be free, not only P (a bench row's second worker crash-looped on a port in use)."""
    from bench.harness import _free_port

    for workers in (2, 4):
        base = _free_port(workers)
        for i in range(workers):
            with socket.socket() as s:
                s.bind(("127.0.0.1", base + i))  # raises if taken
        assert not 32768 <= base + workers - 1 < 61000  # not in the range outgoing connections take


def test_the_cassandra_row_is_opt_in_and_each_run_keeps_its_offset_map_under_a_flow_of_its_own(tmp_path):
    import json

    from bench.contenders import Env, mirror_config, wants_cassandra

    specs = {s.key: s for s in catalogue(True, None)}
    row = specs["mirror-cassandra"]
    assert row.opt_in and row.kind == "mirror"
    assert wants_cassandra([row]) and not wants_cassandra([specs["mirror"]])
    env = Env("s:1", "d:2", tmp_path, 12, {}, {}, 1, lambda count=1: 1, cassandra="127.0.0.1:9142")
    docs = [json.loads(mirror_config(env, alias, "t", tmp_path, row.options)) for alias in ("tmcr0xa1", "tmcr1xb2")]
    stores = [d["offset_store"] for d in docs]
    assert all(s["kind"] == "cassandra" and s["contact_points"] == ["127.0.0.1:9142"] for s in stores)
    # One keyspace made ahead (no schema change in a timed run); rows are keyed by flow.
    assert stores[0]["keyspace"] == stores[1]["keyspace"]
    assert docs[0]["flows"][0]["name"] != docs[1]["flows"][0]["name"]
    from mirror.config import CassandraStoreConfig

    CassandraStoreConfig.model_validate(stores[0])  # a keyspace name the store accepts
