"""The application spark-submit runs: its flags and its errors (no Spark started here)."""

from __future__ import annotations

import pytest

from mirror.cli.spark_app import main, parser
from tests.unit.spark.lockholder import held_by_another_process


def test_flags_are_spark_runs():
    args = parser().parse_args(
        ["-c", "m.yaml", "--flow", "f1", "--until-caught-up", "--max-records-per-batch", "500", "-vv"]
    )
    assert (str(args.config), args.flow, args.until_caught_up, args.max_records_per_batch, args.verbose) == (
        "m.yaml",
        "f1",
        True,
        500,
        2,
    )


def test_a_bad_flag_is_a_usage_error():
    with pytest.raises(SystemExit) as exit_:
        main(["-c", "m.yaml", "--flow", "f1", "--max-records-per-batch", "0"])
    assert exit_.value.code == 2


def test_a_config_error_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "m.yaml"
    bad.write_text("clusters: {}\nflows: []\nnope: 1\n")
    assert main(["-c", str(bad), "--flow", "f1"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("Error: ") and "nope" in "\n".join(lines)


def test_an_unknown_flow_is_one_line_and_exit_2(tmp_path, capsys):
    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        "clusters:\n  a: {bootstrap: '127.0.0.1:1'}\n  b: {bootstrap: '127.0.0.1:2'}\n"
        "flows:\n  - {name: f1, source: a, target: b, topics: {include: ['x']}}\n"
    )
    assert main(["-c", str(cfg), "--flow", "nope"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("Error: ") and "nope" in line


def test_a_second_driver_under_spark_submit_is_refused_in_one_line_before_it_joins_the_gateway(
    tmp_path, capsys, monkeypatch
):
    """The driver spark-submit runs holds the flow's checkpoint like `mirror spark run`; a
    second one is refused (exit 3) before it joins spark-submit's JVM (and starts a SparkContext)."""
    from mirror.spark import session

    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        "clusters:\n  a: {bootstrap: '127.0.0.1:1'}\n  b: {bootstrap: '127.0.0.1:2'}\n"
        "flows:\n  - {name: f1, source: a, target: b, topics: {include: ['x']}}\n"
    )
    joined: list[bool] = []
    monkeypatch.setattr(session, "submitted_master", lambda: joined.append(True) or "local[1]")
    checkpoint = tmp_path / "cp"
    with held_by_another_process(checkpoint, "f1") as holder:
        assert main(["-c", str(cfg), "--flow", "f1", "--checkpoint", str(checkpoint)]) == 3
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("Error: flow f1: ") and f"pid {holder.pid} " in line and str(checkpoint) in line
    assert not joined
