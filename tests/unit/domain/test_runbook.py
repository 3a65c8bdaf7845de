"""Executable runbooks: parsing, expectations, the cost of a failover, and `mirror drill --dry-run`
over every runbook in runbooks/ (so a runbook whose command stops parsing fails CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.cli import main
from mirror.domain.runbook import (
    Block,
    Manual,
    RunbookError,
    check,
    cost,
    parse_expectation,
    parse_runbook,
)

ROOT = Path(__file__).resolve().parents[3]
RUNBOOKS = sorted((ROOT / "runbooks").glob("*.md"))
DRILLS = [
    "drill.md",
    "throttle-a-flow.md",
    "planned-failover.md",
    "unplanned-failover.md",
    "failback.md",
    "datacenter-failover.md",
    "datacenter-failover-unplanned.md",
]

GOOD = """\
# Runbook: t

```sh
export CONFIG=/etc/mirror/mirror.yaml
mirror lag -c $CONFIG
```

## 1. Look

```sh
mirror lag -c $CONFIG --flow $FLOW \\
    --json    # continued
```
expect: exit 0; .flows[0].groups[group=$GROUP].unmirrored == 0; within 2m

```bash
kcat -L -b somewhere | head
```

## 2. Stop

manual: stop-group — the owner stops it.

```sh
mirror failover export -c $CONFIG --cluster $DR --group $GROUP -o x.json
mirror failover plan -c $CONFIG --flow $FLOW --group $GROUP --translate --json > plan.json
```
expect: exit 0|2

## Undo

```sh
mirror failover import -c $CONFIG --cluster $DR x.json --yes
```
"""


def test_parse_steps_blocks_expectations_manual_and_other_commands() -> None:
    book = parse_runbook(GOOD, "t.md")
    assert book.executable and book.title == "Runbook: t"
    assert [(s.number, s.title, s.line) for s in book.steps] == [(1, "Look", 8), (2, "Stop", 20)]
    look = book.steps[0].items[0]
    assert isinstance(look, Block) and look.line == 10 and look.expect_line == 14
    assert look.commands[0].argv == ("lag", "-c", "$CONFIG", "--flow", "$FLOW", "--json")
    assert look.expect.within == 120 and look.expect.exits == (0,)
    stop = book.steps[1].items
    assert isinstance(stop[0], Manual) and stop[0].action == "stop-group" and stop[0].line == 22
    assert isinstance(stop[1], Block) and stop[1].expect.exits == (0, 2)
    assert stop[1].commands[1].redirect == "plan.json"
    argv, redirect = stop[1].commands[1].resolved({"CONFIG": "/c.yaml", "FLOW": "f", "GROUP": "g"})
    assert argv[:3] == ["failover", "plan", "-c"] and "/c.yaml" in argv and redirect == "plan.json"
    # Outside numbered steps: checked by --dry-run, never run; non-mirror lines ignored there.
    assert [c.argv[0] for c in book.other_commands] == ["lag", "failover"]


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("# t\n\n## 1. A\n\nmanual: note\n\n## 2. B\n\nprose only\n", 7, "no ```sh command block"),
        ("# t\n\n## 1. A\n\n```sh\nmirror lag -c x --json\n```\nexpect: exit zero\n", 8, "expectation does not parse"),
        ("# t\n\n## 1. A\n\n```sh\nmirror lag -c x --json\n```\nexpect: .a = 1\n", 8, "expectation does not parse"),
        ("# t\n\n## 1. A\n\n```sh\nmirror lag -c x --json\n```\nexpect: .a == nope\n", 8, "not a JSON value"),
        ("# t\n\n## 1. A\n\n```sh\nmirror lag -c x\n```\nexpect: .a == 1\n", 8, "without --json"),
        ("# t\n\n## 1. A\n\n```sh\nkubectl get pods\n```\nexpect: exit 0\n", 6, "only `mirror` commands"),
        ("# t\n\n## 1. A\n\n```sh\nmirror lag -c x || true\n```\nexpect: exit 0\n", 6, "no shell operators"),
        ("# t\n\n## 1. A\n\nmanual: dance\n", 5, "unknown manual action"),
        ("# t\n\nexpect: exit 0\n", 3, "must follow"),
        ("# t\n\n## 2. A\n\nmanual: note\n\n## 1. B\n\nmanual: note\n", 7, "must increase"),
        ("# t\n\n## 1. A\n\nmanual: note\n```sh\nmirror lag\n", 6, "never closed"),
    ],
)
def test_bad_runbooks_name_file_line_and_what(text: str, line: int, what: str) -> None:
    with pytest.raises(RunbookError) as exc:
        parse_runbook(text, "bad.md")
    assert exc.value.exit_code == 2 and exc.value.line == line
    assert str(exc.value).startswith(f"bad.md:{line}: ") and what in str(exc.value)


def test_a_document_without_expect_or_manual_is_checked_leniently() -> None:
    book = parse_runbook("# r\n\n## 1. See\n\n```sh\nkubectl logs x\nmirror lag -c $C --watch | head\n```\n", "r.md")
    assert not book.executable
    assert [c.argv for c in book.commands()] == [("lag", "-c", "$C", "--watch")]


def test_expectations_on_json_output() -> None:
    doc = (
        '{"flows": [{"groups": [{"group": "a", "unmirrored": 3}, {"group": "b", "unmirrored": 0}], "status": "OK", '
        '"lag_seconds": null}], "parts": [{"n": 1}, {"n": 5}]}'
    )
    ok = parse_expectation(
        'exit 0; .flows[0].groups[group=$GROUP].unmirrored == 0; .flows[0].status == "OK"; .parts[*].n >= 1'
    )
    assert check(ok, 0, doc, {"GROUP": "b"}) == []
    assert check(ok, 0, doc, {"GROUP": "a"}) == [".flows[0].groups[group=$GROUP].unmirrored == 0: got 3"]
    assert check(ok, 1, doc, {"GROUP": "b"}) == ["exit 1, expected 0"]
    assert check(ok, 0, doc, {"GROUP": "zz"}) == [
        ".flows[0].groups[group=$GROUP].unmirrored == 0: no element with group=zz"
    ]
    assert check(parse_expectation(".parts[*].n > 1"), 0, doc) == [".parts[*].n > 1: got 1 (1 of 2 elements)"]
    assert check(parse_expectation(".flows[0].lag_seconds < 5"), 0, doc) == [".flows[0].lag_seconds < 5: got null"]
    assert check(parse_expectation(".missing == 1"), 0, doc) == [".missing == 1: no field 'missing'"]
    assert check(parse_expectation(".a == 1"), 0, "Error: cluster 'nyc' did not answer") == [
        "the output is not JSON (add --json to the command)"
    ]
    assert check(parse_expectation(".old == $PRIMARY"), 0, '{"old": "nyc"}', {"PRIMARY": "nyc"}) == []
    assert check(parse_expectation("exit 0|2"), 2, "") == []
    assert parse_expectation("within 500ms").within == 0.5


def test_cost_counts_lost_and_duplicated_by_sequence_number() -> None:
    produced = {0: list(range(10)), 1: list(range(5))}
    before = {0: [0, 1, 2, 3], 1: [0, 1, 2, 3, 4]}
    after = {0: [2, 3, 4, 5, 6, 7], 1: []}  # re-read 2 and 3 (since the checkpoint); 8, 9 never arrived
    c = cost(produced, before, after)
    assert (c.produced, c.read_before, c.read_after, c.lost, c.duplicated) == (15, 9, 6, 2, 2)
    assert c.per_partition[0] == {"produced": 10, "read_before": 4, "read_after": 6, "lost": 2, "duplicated": 2}
    assert cost(produced, {0: list(range(10))}, {1: list(range(5))}).lost == 0


@pytest.mark.parametrize("runbook", RUNBOOKS, ids=lambda p: p.name)
def test_dry_run_passes_over_every_runbook(runbook: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "drill",
            str(runbook),
            "-c",
            str(ROOT / "configs/dev.yaml"),
            "--flow",
            "nyc-to-sf",
            "--group",
            "billing-drill",
            "--dry-run",
        ]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    if runbook.name in DRILLS:
        assert "steps;" in out.out and "not a drill" not in out.out
    assert " 0 mirror commands" not in out.out or runbook.name == "README.md"


def test_dry_run_bad_input_exit_2_naming_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(ROOT / "configs/dev.yaml")
    base = ["-c", cfg, "--flow", "nyc-to-sf", "--group", "billing-drill", "--dry-run"]
    assert main(["drill", str(tmp_path / "missing.md"), *base]) == 2
    assert "missing.md" in capsys.readouterr().err
    bad = tmp_path / "bad.md"
    bad.write_text(
        "# t\n\n## 1. A\n\n```sh\nmirror failover plan -c $CONFIG --flow $FLOW --group $GROUP --tranlsate\n```\n"
    )
    assert main(["drill", str(bad), *base]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:6:" in err and "--tranlsate" in err
    bad.write_text("# t\n\n## 1. A\n\n```sh\nmirror failover export -c $CONFIG --cluster tokyo --group $GROUP\n```\n")
    assert main(["drill", str(bad), *base]) == 2
    assert f"{bad}:6: no cluster 'tokyo'" in capsys.readouterr().err
    bad.write_text("# t\n\n## 1. A\n\n```sh\nmirror lag -c $CONFIG --flow nyc-to-tokyo\n```\n")
    assert main(["drill", str(bad), *base]) == 2
    assert "no flow 'nyc-to-tokyo'" in capsys.readouterr().err
    runbook = str(ROOT / "runbooks/planned-failover.md")
    assert main(["drill", runbook, "-c", cfg, "--flow", "nyc-to-sf", "--group", "payroll", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "planned-failover.md:" in err and "'payroll'" in err and "flows[0].groups" in err
    assert (
        main(
            [
                "drill",
                runbook,
                "-c",
                cfg,
                "--flow",
                "nyc-to-sf",
                "--group",
                "billing-drill",
                "--topic",
                "elsewhere",
                "--dry-run",
            ]
        )
        == 2
    )
    assert "does not mirror the drill topic 'elsewhere'" in capsys.readouterr().err
    assert main(["drill", runbook, "-c", cfg, "--flow", "nyc-to-sf", "--group", "billing-drill"]) == 2  # no --yes
    assert "--yes" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["datacenter-failover.md", "datacenter-failover-unplanned.md"])
def test_site_drill_dry_run(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(ROOT / "configs/dev.yaml")
    runbook = str(ROOT / "runbooks" / name)
    assert (
        main(
            [
                "drill",
                runbook,
                "-c",
                cfg,
                "--from",
                "nyc",
                "--to",
                "sf",
                "--group",
                "billing-drill",
                "--groups",
                "3",
                "--dry-run",
            ]
        )
        == 0
    ), capsys.readouterr().err
    assert "steps;" in capsys.readouterr().out
    # The drill's groups (billing-drill-FLOW-K) must be ones the flows checkpoint.
    assert main(["drill", runbook, "-c", cfg, "--from", "nyc", "--group", "payroll", "--dry-run"]) == 2
    assert "drill group 'payroll-nyc-to-sf-0' does not match flows[0].groups" in capsys.readouterr().err
    assert main(["drill", runbook, "-c", cfg, "--from", "tokyo", "--group", "billing-drill", "--dry-run"]) == 2
    assert "--from: no cluster or datacenter named 'tokyo'" in capsys.readouterr().err
    assert (
        main(
            [
                "drill",
                runbook,
                "-c",
                cfg,
                "--from",
                "nyc",
                "--flow",
                "nyc-to-sf",
                "--group",
                "billing-drill",
                "--dry-run",
            ]
        )
        == 2
    )
