"""`mirror drill`: run an executable runbook against real clusters and measure the failover.

The runner walks the steps `mirror.domain.runbook` parsed: each command runs (through an
injected `invoke`, the real `mirror` command tree in-process) and is checked against its
`expect:` line, retried while a `within` allows; each `manual:` action is played by the
drill's own workload. It stops at the first step that fails and says how to resume. After
every step the report (Markdown and JSON) and the workload's state are written, so what was
measured survives a failure and `--from-step N` carries on from it.

RTO: from the cutover (the group stopped on the primary, or the primary died) to the
group's first record read on the DR cluster. RPO: the flow's lag in records and seconds at
the cutover. Records lost and duplicated: from the workload's sequence numbers.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mirror.config import Config, FlowConfig
from mirror.domain.runbook import Block, Command, Manual, Runbook, RunbookError, Step, check
from mirror.drill.report import render_markdown
from mirror.drill.site import SiteWorkload, load_snapshot
from mirror.drill.workload import DR, PRIMARY, Workload, WorkloadState, snapshot_cost
from mirror.errors import AuthorizationFailed, ExitCode, MirrorError, UsageError

log = logging.getLogger(__name__)

Invoke = Callable[[list[str]], tuple[int, str, str]]  # argv after `mirror` -> (exit, stdout, stderr)
ParseArgv = Callable[[list[str]], dict[str, Any]]  # click's parse of argv; ValueError(message) if it does not parse
REPORT_JSON, REPORT_MD, STATE_JSON = "report.json", "report.md", "state.json"
_OUTPUT_KEEP = 4000  # characters of a command's output kept in the report


class Brokers(Protocol):
    """Kills and restarts a cluster's broker, only if it can prove the drill's side started it."""

    def kill(self, cluster: str, bootstrap: str) -> str: ...

    def start(self, cluster: str, bootstrap: str) -> str: ...


class DrillFailed(MirrorError):
    """A step did not do what the runbook expects (exit 1); the report says what was measured."""


@dataclass
class Request:
    runbook: Path
    config_path: Path
    config: Config
    flow: FlowConfig
    group: str
    report_dir: Path
    from_step: int = 1
    topic: str = "mirror-drill"
    partitions: int = 3
    retry_interval: float = 1.0
    dev_home: Path | None = None
    # A site drill (`--from`): every flow from the site, `groups` groups each, named
    # GROUP-FLOW-K; `flow` is then the first of them.
    site: str | None = None
    dr_site: str | None = None
    site_flows: list[FlowConfig] = field(default_factory=list)
    site_groups: dict[str, str] = field(default_factory=dict)  # group -> its flow's name
    groups_per_flow: int = 2

    @property
    def variables(self) -> dict[str, str]:
        if self.site is not None:
            return {
                "CONFIG": str(self.config_path),
                "FLOW": self.flow.name,
                "GROUP": self.group,
                "PRIMARY": self.site,
                "DR": self.dr_site or self.flow.target,
            }
        return {
            "CONFIG": str(self.config_path),
            "FLOW": self.flow.name,
            "GROUP": self.group,
            "PRIMARY": self.flow.source,
            "DR": self.flow.target,
        }

    @property
    def primaries(self) -> list[str]:
        """The clusters `kill-primary` takes down: the flow's source, or every source of the site."""
        return sorted({f.source for f in self.site_flows}) if self.site is not None else [self.flow.source]

    def resume_command(self, step: int) -> str:
        args = [
            "mirror",
            "drill",
            str(self.runbook),
            "-c",
            str(self.config_path),
            "--flow",
            self.flow.name,
            "--group",
            self.group,
        ]
        if self.site is not None:
            args = [
                "mirror",
                "drill",
                str(self.runbook),
                "-c",
                str(self.config_path),
                "--from",
                self.site,
                "--group",
                self.group,
                "--groups",
                str(self.groups_per_flow),
                *(["--to", self.dr_site] if self.dr_site else []),
            ]
        if self.topic != "mirror-drill":
            args += ["--topic", self.topic]
        if self.dev_home is not None:
            args += ["--dev-home", str(self.dev_home)]
        return " ".join(
            shlex.quote(a) for a in [*args, "--yes", "--out", str(self.report_dir), "--from-step", str(step)]
        )


# ---------------------------------------------------------------------------- checks (dry run)


def _group_matches(flow: FlowConfig, group: str) -> bool:
    return any(re.fullmatch(p, group) for p in flow.groups)


def check_references(book: Runbook, req: Request, parse_argv: ParseArgv) -> int:
    """Every command parses with the real command tree; every flow, cluster and group it names
    exists in the config (groups: in their flow's `groups`). Returns the commands checked."""
    config, variables = req.config, req.variables
    flows = {f.name: f for f in config.flows}
    idx = config.flows.index(req.flow)
    first_group_line = next((c.line for c in book.commands() if "$GROUP" in c.text or "${GROUP}" in c.text), 1)
    if req.site is not None:
        _check_site(book, req)
    elif book.executable and not _group_matches(req.flow, req.group):
        raise RunbookError(
            book.source,
            first_group_line,
            f"group {req.group!r} (--group) does not match flows[{idx}].groups of flow {req.flow.name!r} "
            f"({', '.join(req.flow.groups) or 'none'})",
            hint=f"drill a group the flow checkpoints, or add a pattern to flows[{idx}].groups",
        )
    if req.site is None and book.executable and not req.flow.topic_filter(config.canary.topic).matches(req.topic):
        raise RunbookError(
            book.source,
            1,
            f"flow {req.flow.name!r} does not mirror the drill topic {req.topic!r}",
            hint=f"add {req.topic!r} to flows[{idx}].topics.include (or pass --topic)",
        )
    count = 0
    for cmd in book.commands():
        argv, _ = cmd.resolved(variables)
        try:
            params = parse_argv(argv)
        except ValueError as exc:
            raise RunbookError(book.source, cmd.line, f"`{cmd.text}` does not parse: {exc}") from None
        count += 1
        names = params.get("flows") or ([params["flow"]] if params.get("flow") else [])
        for name in names:
            if name not in flows:
                raise RunbookError(
                    book.source, cmd.line, f"no flow {name!r} in {req.config_path} (flows: {', '.join(flows)})"
                )
        for flag, name in (("--from", params.get("site")), ("--to", params.get("to"))):
            if name and name not in ("earliest", "latest"):
                try:
                    config.site(name, flag)
                except UsageError as exc:
                    raise RunbookError(book.source, cmd.line, f"`{cmd.text}`: {exc}") from None
        cluster = params.get("cluster")
        if cluster and cluster not in config.clusters:
            raise RunbookError(
                book.source,
                cmd.line,
                f"no cluster {cluster!r} in {req.config_path} (clusters: {', '.join(config.clusters)})",
            )
        group = params.get("group")
        if group and names and not _group_matches(flows[names[0]], group):
            fi = config.flows.index(flows[names[0]])
            raise RunbookError(
                book.source, cmd.line, f"group {group!r} does not match flows[{fi}].groups of flow {names[0]!r}"
            )
    return count


def _check_site(book: Runbook, req: Request) -> None:
    """Every flow of the site mirrors the drill topic and checkpoints its drill groups."""
    if not book.executable:
        return
    flows = {f.name: f for f in req.site_flows}
    for flow in req.site_flows:
        if not flow.topic_filter(req.config.canary.topic).matches(req.topic):
            raise RunbookError(
                book.source,
                1,
                f"flow {flow.name!r} does not mirror the drill topic {req.topic!r}",
                hint=f"add {req.topic!r} to flows[{req.config.flows.index(flow)}].topics.include (or pass --topic)",
            )
    for group, name in req.site_groups.items():
        if not _group_matches(flows[name], group):
            raise RunbookError(
                book.source,
                1,
                f"drill group {group!r} does not match "
                f"flows[{req.config.flows.index(flows[name])}].groups of flow {name!r}",
                hint="pass a --group prefix the flows' `groups` patterns match",
            )


# ---------------------------------------------------------------------------- running


@dataclass
class StepResult:
    number: int
    title: str
    line: int
    outcome: str = "running"  # passed | failed | skipped
    duration_seconds: float = 0.0
    commands: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)
    failure: str | None = None
    exit_code: int = 0  # of the error that failed the step: 3 when it was refused as unsafe


@contextmanager
def _cwd(path: Path) -> Iterator[None]:
    """Commands' relative files (`-o`, `--backup`, `> FILE`) land in the report folder."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


class Drill:
    def __init__(
        self,
        book: Runbook,
        req: Request,
        invoke: Invoke,
        brokers: Brokers | None,
        measure_lag: Callable[[], tuple[int, float | None]],
        *,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.book, self.req, self.invoke, self.brokers, self.measure_lag, self.now = (
            book,
            req,
            invoke,
            brokers,
            measure_lag,
            now,
        )
        self.report: dict[str, Any] = {}
        self.workload: Workload | SiteWorkload | None = None

    # -- state
    def _load(self) -> WorkloadState | dict[str, Any] | None:
        rd = self.req.report_dir
        if self.req.from_step > 1:
            try:
                self.report = json.loads((rd / REPORT_JSON).read_text())
            except (OSError, ValueError):
                raise UsageError(
                    f"--from-step: no earlier drill report in {rd}",
                    hint="pass the --out folder of the drill to resume",
                ) from None
            if Path(self.report["runbook"]).name != self.req.runbook.name:
                raise UsageError(f"--from-step: {rd} holds a drill of {self.report['runbook']}, not {self.req.runbook}")
            state_file = rd / STATE_JSON
            if not state_file.exists():
                return None
            text = state_file.read_text()
            return load_snapshot(text) or WorkloadState.from_json(json.loads(text))
        req = self.req
        self.report = {
            "runbook": str(req.runbook),
            "title": self.book.title,
            "config": str(req.config_path),
            "flow": req.flow.name,
            "group": req.group,
            "primary": req.flow.source,
            "dr": req.flow.target,
            "started": _iso(self.now()),
            "steps": [],
            "rto_seconds": None,
            "rpo": None,
            "workload": None,
        }
        if req.site is not None:
            self.report.update(
                {
                    "site": req.site,
                    "flow": ", ".join(f.name for f in req.site_flows),
                    "group": ", ".join(req.site_groups),
                    "primary": req.site,
                    "dr": req.variables["DR"],
                }
            )
        return None

    def _save(self) -> None:
        rd = self.req.report_dir
        if self.workload is not None:
            (rd / STATE_JSON).write_text(json.dumps(self.workload.snapshot()))
            self._numbers()
        (rd / REPORT_JSON).write_text(json.dumps(self.report, indent=2) + "\n")
        (rd / REPORT_MD).write_text(render_markdown(self.report))

    def _numbers(self) -> None:
        assert self.workload is not None
        if isinstance(self.workload, SiteWorkload):
            site = self.workload.numbers()
            self.report["rto_seconds"], self.report["rto_basis"] = (
                site.pop("rto_seconds"),
                "the last group's first record on its DR cluster",
            )
            self.report["workload"] = {"topic": self.req.topic, "dr_topic": self.workload.dr_topic, **site}
            return
        snap = self.workload.snapshot()
        if snap["cutover_ms"] is not None and snap["first_dr_read_ms"] is not None:
            self.report["rto_seconds"] = round((snap["first_dr_read_ms"] - snap["cutover_ms"]) / 1000, 3)
            self.report["rto_basis"] = snap["rto_basis"]
        c = snapshot_cost(snap)
        self.report["workload"] = {
            "topic": snap["topic"],
            "dr_topic": self.workload.dr_topic,
            "run": snap["run"],
            "partitions": snap["partitions"],
            "produced": c.produced,
            "read_before": c.read_before,
            "read_after": c.read_after,
            "lost": c.lost,
            "duplicated": c.duplicated,
            "per_partition": {str(p): v for p, v in c.per_partition.items()},
            "final": snap["consuming_on"] is None and not snap["producing"],
        }

    # -- the run
    def run(self) -> dict[str, Any]:
        req = self.req
        req.report_dir.mkdir(parents=True, exist_ok=True)
        state = self._load()
        numbers = [s.number for s in self.book.steps]
        if req.from_step not in numbers:
            raise UsageError(
                f"--from-step {req.from_step}: {self.book.source} has steps {', '.join(map(str, numbers))}"
            )
        plays = {i.action for s in self.book.steps for i in s.items if isinstance(i, Manual)}
        fresh = state is None and bool(plays & {"stop-group", "kill-primary", "start-group"})
        if req.site is not None:
            if fresh or state is not None:
                saved = state if isinstance(state, dict) else None
                self.workload = SiteWorkload.build(
                    req.config, req.site_flows, req.site_groups, req.topic, req.partitions, saved
                )
        else:
            if fresh:
                state = WorkloadState(topic=req.topic, partitions=req.partitions)
            if isinstance(state, WorkloadState):
                self.workload = Workload(req.config, req.flow, req.group, state)
        self.report["steps"] = [s for s in self.report.get("steps", []) if s["number"] < req.from_step]
        self.report.pop("failed_step", None)
        self.report["outcome"] = "running"
        try:
            if self.workload is not None:
                self._start_workload(fresh=fresh)
            for step in self.book.steps:
                if step.number < req.from_step:
                    continue
                result = self._step(step)
                self.report["steps"].append(result.__dict__)
                self._save()
                if result.outcome == "failed":
                    self.report["outcome"] = "failed"
                    self.report["failed_step"] = step.number
                    self.report["resume"] = req.resume_command(step.number)
                    failed = DrillFailed(
                        f"{self.book.source}:{step.line}: step {step.number} ({step.title}) failed: {result.failure}",
                        hint=f"the report so far is in {req.report_dir}; fix the cause, then resume with: "
                        f"{self.report['resume']}",
                    )
                    if result.exit_code == ExitCode.UNSAFE:
                        failed.exit_code = (
                            ExitCode.UNSAFE
                        )  # refused (a broker it did not start): say so in the status too
                    raise failed
            if self.workload is not None:
                self._finish_workload()
            self.report["outcome"] = "passed"
            return self.report
        finally:
            if self.workload is not None:
                self.workload.stop_all()  # flags stay as they were: a resume restarts what ran
            self.report["finished"] = _iso(self.now())
            self._save()

    def _start_workload(self, *, fresh: bool) -> None:
        w = self.workload
        assert w is not None
        if fresh:
            with _cwd(self.req.report_dir):
                w.ensure_topic()
            w.start_producer()
            w.start_consumer(PRIMARY)
            w.wait_first_read(PRIMARY, 120)
            return
        if w.state.producing and not w.state.primary_killed:
            w.start_producer()
        if w.state.consuming_on:
            w.start_consumer(w.state.consuming_on)

    def _finish_workload(self) -> None:
        w = self.workload
        assert w is not None
        if w.state.consuming_on == DR:
            self._stop_dr_group({})
        else:
            w.stop_producer()
            w.stop_consumer()

    def _step(self, step: Step) -> StepResult:
        result = StepResult(step.number, step.title, step.line)
        t0 = time.monotonic()
        log.info("drill step %d: %s", step.number, step.title)
        try:
            for item in step.items:
                if isinstance(item, Block):
                    for cmd in item.commands:
                        failure = self._command(item, cmd, result)
                        if failure:
                            raise DrillFailed(failure)
                else:
                    self._play(item, result)
                if self.workload is not None and self.workload.errors:
                    raise DrillFailed("; ".join(self.workload.errors))
            result.outcome = "passed"
        except MirrorError as exc:
            result.outcome, result.failure, result.exit_code = "failed", str(exc), int(exc.exit_code)
        result.duration_seconds = round(time.monotonic() - t0, 3)
        return result

    def _command(self, block: Block, cmd: Command, result: StepResult) -> str | None:
        argv, redirect = cmd.resolved(self.req.variables)
        deadline = time.monotonic() + (block.expect.within or 0)
        attempts = 0
        while True:
            attempts += 1
            started = time.monotonic()
            with _cwd(self.req.report_dir):
                code, out, err = self.invoke(argv)
                if redirect:
                    Path(redirect).write_text(out)
            failures = check(block.expect, code, out, self.req.variables)
            if not failures or time.monotonic() >= deadline:
                break
            time.sleep(self.req.retry_interval)
        entry = {
            "line": cmd.line,
            "command": "mirror " + " ".join(shlex.quote(a) for a in argv) + (f" > {redirect}" if redirect else ""),
            "exit": code,
            "expect": block.expect.text,
            "attempts": attempts,
            "seconds": round(time.monotonic() - started, 3),
            "stdout": out[-_OUTPUT_KEEP:],
            "stderr": err[-_OUTPUT_KEEP:],
            "failures": failures,
        }
        result.commands.append(entry)
        if failures:
            detail = (err.strip() or out.strip()).splitlines()
            tail = f"; output: {detail[-1]}" if detail else ""
            return f"line {cmd.line}: `{entry['command']}`: " + "; ".join(failures) + tail
        return None

    # -- manual steps, played
    def _play(self, item: Manual, result: StepResult) -> None:
        t0 = time.monotonic()
        entry: dict[str, Any] = {"line": item.line, "action": item.action}
        result.actions.append(entry)
        w = self.workload
        if item.action == "note":
            entry["played"] = "skipped (nothing the drill can do)"
        elif item.action == "stop-group":
            w = self._need(w, item)
            w.stop_consumer()
            self._cutover(w)
            # The drill's producer pauses until start-group: with records arriving every
            # moment the group's `unmirrored` is never 0 for long, and a runbook that waits
            # for 0 would wait forever. What it wrote after the group stopped is read on DR.
            w.stop_producer()
            self._rpo(entry)
            entry["played"] = (
                f"the drill group stopped consuming on {self.req.flow.source} (its producer pauses until start-group)"
            )
        elif item.action == "kill-primary":
            w = self._need(w, item)
            if self.brokers is None:
                raise MirrorError(
                    "kill-primary: no broker control", hint="a drill kills only dev brokers it can prove it started"
                )
            # The lag first, while the application still runs: then it stops (its last
            # commit done, every write acknowledged) and the broker dies right after.
            self._rpo(entry)
            w.stop_consumer()
            w.stop_producer()  # what it wrote after the group's last read is the group's to lose
            self._cutover(w)
            entry["played"] = "; ".join(
                self.brokers.kill(c, self.req.config.cluster(c).bootstrap) for c in self.req.primaries
            )
            w.state.primary_killed = True
        elif item.action == "start-primary":
            if self.brokers is None:
                raise MirrorError("start-primary: no broker control")
            entry["played"] = "; ".join(
                self.brokers.start(c, self.req.config.cluster(c).bootstrap) for c in self.req.primaries
            )
            if w is not None:
                w.state.primary_killed = False
        elif item.action == "start-group":
            w = self._need(w, item)
            w.start_consumer(DR)
            if not w.state.primary_killed:
                w.start_producer()  # producers stay on the primary; the mirror carries on
            w.wait_first_read(DR, 120)
            entry["played"] = f"the drill group consumes {w.dr_topic} on {self.req.flow.target}"
        elif item.action == "stop-dr-group":
            w = self._need(w, item)
            self._stop_dr_group(entry)
        entry["seconds"] = round(time.monotonic() - t0, 3)
        self._save()

    def _stop_dr_group(self, entry: dict[str, Any]) -> None:
        """End of the measured failover: no more records, the DR consumer reads what reached it."""
        w = self.workload
        assert w is not None
        w.stop_producer()
        w.drain()
        w.stop_consumer()
        entry["played"] = (
            f"the drill stopped producing; the group read what reached {self.req.flow.target}, then stopped"
        )

    def _cutover(self, w: Workload | SiteWorkload) -> None:
        ms = int(self.now() * 1000)
        if isinstance(w, SiteWorkload):
            w.set_cutover(ms)
        else:
            w.state.cutover_ms = ms

    def _need(self, w: Workload | SiteWorkload | None, item: Manual) -> Workload | SiteWorkload:
        if w is None:
            raise MirrorError(f"line {item.line}: {item.action} needs the drill workload")
        return w

    def _rpo(self, entry: dict[str, Any]) -> None:
        try:
            records, seconds = self.measure_lag()
        except AuthorizationFailed:
            raise  # a grant missing: no later step measures it either
        except MirrorError as exc:
            entry["rpo_error"] = str(exc)
            return
        self.report["rpo"] = {"records": records, "seconds": seconds, "at": _iso(self.now())}


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def dry_run(book: Runbook, req: Request, parse_argv: ParseArgv) -> str:
    n = check_references(book, req, parse_argv)
    kind = f"{len(book.steps)} steps" if book.executable else "not a drill (no `expect:`/`manual:` lines)"
    return (
        f"{book.source}: {kind}; {n} mirror commands parse; flow {req.flow.name!r}, group {req.group!r} and "
        "every referenced cluster exist"
    )


__all__ = ["Brokers", "Drill", "DrillFailed", "Request", "check_references", "dry_run"]
