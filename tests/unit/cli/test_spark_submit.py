"""`mirror spark submit`'s checks before spark-submit starts (no Spark started here)."""

from __future__ import annotations

from mirror.cli import main
from mirror.spark import session, submit
from tests.unit.spark.lockholder import held_by_another_process


def test_a_flow_whose_driver_runs_here_is_refused_before_spark_submit_starts(tmp_path, capsys, monkeypatch):
    """In client mode the driver would run here on this checkpoint: while another driver holds
    it, refusing now (exit 3) spares spark-submit's JVM (the driver itself would refuse too)."""
    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        "clusters:\n  a: {bootstrap: '127.0.0.1:1'}\n  b: {bootstrap: '127.0.0.1:2'}\n"
        "flows:\n  - {name: f1, source: a, target: b, topics: {include: ['x']}}\n"
    )
    prepared: list[bool] = []
    monkeypatch.setattr(session, "check_java", lambda: None)
    monkeypatch.setattr(submit, "prepare", lambda *args: prepared.append(True) or ["true"])
    checkpoint = tmp_path / "cp"
    argv = ["spark", "submit", "-c", str(cfg), "--flow", "f1", "--master", "local[1]", "--checkpoint", str(checkpoint)]
    with held_by_another_process(checkpoint, "f1") as holder:
        assert main(argv) == 3
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("Error: flow f1: ") and f"pid {holder.pid} " in line
    assert not prepared


def test_cluster_mode_on_the_default_checkpoint_warns_that_a_second_driver_is_not_refused(
    tmp_path, capsys, monkeypatch
):
    """In cluster mode each driver container has its own default checkpoint directory: the
    lock there keeps nothing apart, and the user is told so (review-lock D1)."""
    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        "clusters:\n  a: {bootstrap: '127.0.0.1:1'}\n  b: {bootstrap: '127.0.0.1:2'}\n"
        "flows:\n  - {name: f1, source: a, target: b, topics: {include: ['x']}}\n"
    )
    monkeypatch.setattr(session, "check_java", lambda: None)
    monkeypatch.setattr(submit, "prepare", lambda *args: ["true"])
    monkeypatch.setattr(submit, "run", lambda cmd, **kw: 0)
    base = ["spark", "submit", "-c", str(cfg), "--flow", "f1", "--master", "yarn", "--deploy-mode", "cluster"]
    assert main(base) == 0
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("Warning: flow f1: in cluster mode") and "--checkpoint" in line
    assert main([*base, "--checkpoint", str(tmp_path / "shared")]) == 0
    assert capsys.readouterr().err.strip() == ""
    assert main([*base, "--checkpoint", "relative/cp"]) == 0  # resolved in each driver's container
    assert capsys.readouterr().err.startswith("Warning: flow f1: in cluster mode")
    cfg.write_text(cfg.read_text() + "spark: {checkpoint_dir: /mnt/shared/spark}\n")
    assert main(base) == 0  # an absolute checkpoint_dir: a volume the drivers may share
    assert capsys.readouterr().err.strip() == ""
