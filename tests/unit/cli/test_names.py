"""One name per meaning across commands; old spellings parse but are not shown."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from mirror import config as cfg
from mirror.cli import cli
from mirror.cli.reference import shown_opts, walk

ROOT = Path(__file__).resolve().parents[3]

# Old spellings: a visible option may not be spelled so; the meaning has one name.
_RETIRED = {
    "--port": "--metrics-port",  # a port /metrics is served on
    "--output": "--out",  # a file or folder a command writes
    "-o": "--out",
    "--report": "--out",
}


def _options() -> list[tuple[tuple[str, ...], click.Option]]:
    return [
        (path, p) for path, command in walk(cli) for p in command.params if isinstance(p, click.Option) and not p.hidden
    ]


def _parse(argv: list[str]) -> click.Context:
    """The context the command `argv` names would run with (nothing runs)."""
    cmd: click.Command = cli
    name, args = "mirror", list(argv)
    while isinstance(cmd, click.Group):
        sub = cmd.get_command(click.Context(cmd), args[0])
        assert sub is not None, args[0]
        cmd, name, args = sub, args[0], args[1:]
    return cmd.make_context(name, args)


def test_one_spelling_per_meaning():
    wrong = [
        f"mirror {' '.join(path)} {o}: spell it {_RETIRED[o]}"
        for path, p in _options()
        for o in shown_opts(p)
        if o in _RETIRED and not (o == "--port" and "metrics" not in (p.help or "").lower())
    ]
    assert not wrong, "\n".join(wrong)


def test_every_option_has_help():
    missing = [f"mirror {' '.join(path)} {'/'.join(shown_opts(p))}" for path, p in _options() if not p.help]
    assert not missing, "options without a help text:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("argv", "param", "value"),
    [
        (["monitor", "-c", "x.yaml", "--metrics-port", "9400"], "metrics_port", 9400),
        (["monitor", "-c", "x.yaml", "--port", "9400"], "metrics_port", 9400),  # the old spelling
        (["drill", "r.md", "-c", "x.yaml", "--group", "g", "--out", "d"], "report_dir", Path("d")),
        (["drill", "r.md", "-c", "x.yaml", "--group", "g", "--report", "d"], "report_dir", Path("d")),
    ],
)
def test_old_spellings_still_parse(argv, param, value):
    assert _parse(argv).params[param] == value


def test_old_spellings_are_not_shown():
    monitor = cli.get_command(click.Context(cli), "monitor")
    assert monitor is not None
    text = monitor.get_help(click.Context(monitor, info_name="monitor"))
    assert "--metrics-port" in text and "--port" not in text
    with pytest.raises(click.BadParameter) as bad:
        _parse(["monitor", "-c", "x.yaml", "--port", "x"])
    assert "'--metrics-port'" in bad.value.format_message() and "--port'" not in bad.value.format_message()


def test_monitor_and_canary_do_not_default_to_one_port():
    """Both run beside each other on one host (docs/monitoring.md); neither may take the other's port."""
    from mirror.cli.canary import serving_port as canary_port
    from mirror.cli.monitor import serving_port as monitor_port

    config = cfg.load(ROOT / "configs" / "dev.yaml")
    assert monitor_port(config, None) == config.metrics.port == 9308
    assert canary_port(config, None) == 9309
    for port in (1, 9308, 65535):
        c = config.model_copy(update={"metrics": config.metrics.model_copy(update={"port": port})})
        assert canary_port(c, None) != monitor_port(c, None)
        assert 1 <= canary_port(c, None) <= 65535
    zero = config.model_copy(update={"metrics": config.metrics.model_copy(update={"port": 0})})
    assert canary_port(zero, None) == monitor_port(zero, None) == 0  # any free port: no collision
    assert canary_port(config, 9500) == 9500 and monitor_port(config, 9501) == 9501


def test_dev_grant_reads_MIRROR_CONFIG_like_the_other_commands(monkeypatch):
    monkeypatch.setenv("MIRROR_CONFIG", "from-env.yaml")
    assert _parse(["dev", "grant"]).params["config_path"] == Path("from-env.yaml")
    assert _parse(["lag"]).params["config_path"] == Path("from-env.yaml")


def test_the_drills_resume_command_parses_with_the_main_spellings():
    """The command a failed drill prints to resume it is one a user can paste."""
    import shlex

    from mirror.drill.runner import Request

    from .test_docs_commands import check

    config = cfg.load(ROOT / "configs" / "dev.yaml")
    req = Request(Path("runbooks/drill.md"), ROOT / "configs" / "dev.yaml", config, config.flows[0], "g", Path("d1"), 1)
    argv = shlex.split(req.resume_command(4))
    assert argv[0] == "mirror" and check(argv[1:]) == []
    assert _parse(argv[1:]).params["report_dir"] == Path("d1") and "--out" in argv


def test_the_dev_clusters_folder_is_read_from_one_variable(monkeypatch):
    """`mirror dev --home` and `mirror drill --dev-home` name one folder: both read MIRROR_DEV_HOME."""
    monkeypatch.setenv("MIRROR_DEV_HOME", "/tmp/elsewhere")
    for argv in (["dev", "up"], ["dev", "status"], ["dev", "down"], ["dev", "grant", "-c", "x.yaml"]):
        assert _parse(argv).params["home"] == Path("/tmp/elsewhere"), argv
    assert _parse(["drill", "r.md", "-c", "x.yaml", "--group", "g"]).params["dev_home"] == Path("/tmp/elsewhere")
