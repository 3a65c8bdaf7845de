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


def test_a_client_setting_librdkafka_refuses_is_one_line_and_exit_2(tmp_path, capsys):
    """librdkafka judges `client:` settings when a client is made, before any request: `mirror
    run` stops there with the key, not a traceback from the first admin client."""
    cfg = tmp_path / "m.yaml"
    cfg.write_text(
        "clusters:\n  a: {bootstrap: '127.0.0.1:1', client: {no.such.property: x}}\n  b: {bootstrap: '127.0.0.1:2'}\n"
        "flows:\n  - {name: f1, source: a, target: b, topics: {include: ['x']}}\n"
    )
    assert main(["run", "-c", str(cfg), "--no-offset-store"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and "Traceback" not in "\n".join(err)  # the error, and its hint if any
    assert "clusters.a.client.no.such.property" in err[0] and "No such configuration property" in err[0]
