"""`mirror run`'s flag checks before any worker starts (no clusters)."""

from __future__ import annotations

from mirror.cli import main


def test_a_workers_metrics_ports_past_65535_are_refused_in_one_line(tmp_path, capsys):
    """Worker i serves on --metrics-port + i: the last one must be a port (review-last E3)."""
    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        "clusters:\n  a: {bootstrap: '127.0.0.1:1'}\n  b: {bootstrap: '127.0.0.1:2'}\n"
        "flows:\n  - {name: f1, source: a, target: b, topics: {include: ['x']}}\n"
    )
    assert main(["run", "-c", str(cfg), "--workers", "2", "--metrics-port", "65535"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--metrics-port" in line and "65536" in line
