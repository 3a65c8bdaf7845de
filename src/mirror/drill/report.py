"""The drill report as Markdown, from the same dict `report.json` holds (pure)."""

from __future__ import annotations

from typing import Any


def _num(value: Any, unit: str = "") -> str:
    if value is None:
        return "not measured"
    return f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def render_markdown(r: dict[str, Any]) -> str:
    out = [f"# Drill report: {r.get('title', r['runbook'])}", ""]
    out += [
        f"- runbook: `{r['runbook']}`, config: `{r['config']}`",
        f"- flow: `{r['flow']}` ({r['primary']} -> {r['dr']}), group: `{r['group']}`",
        f"- started {r.get('started')}, finished {r.get('finished', '-')}, outcome: **{r.get('outcome', 'running')}**",
    ]
    if r.get("failed_step") is not None:
        out.append(f"- stopped at step {r['failed_step']}; resume with `{r.get('resume')}`")
    rpo = r.get("rpo") or {}
    out += [
        "",
        "## Numbers",
        "",
        "| measure | value |",
        "|---|---|",
        f"| RTO ({'every group' if r.get('site') else 'group'} stopped on {r['primary']} -> "
        f"{'the last group' + chr(39) + 's' if r.get('site') else ''} first record read on {r['dr']}) | "
        f"{_num(r.get('rto_seconds'), ' s')} |",
        f"| RPO records (flow lag at the cutover) | {_num(rpo.get('records'))} |",
        f"| RPO seconds (age of the oldest unmirrored record at the cutover) | {_num(rpo.get('seconds'), ' s')} |",
    ]
    w = r.get("workload")
    if w:
        out += [
            f"| records produced by the drill workload | {w['produced']} |",
            f"| read by the group on {r['primary']} before / on {r['dr']} after | {w['read_before']} / "
            f"{w['read_after']} |",
            f"| records lost | {w['lost']} |",
            f"| records duplicated | {w['duplicated']} |",
        ]
        if not w.get("final"):
            out.append("| (the drill did not finish: counts so far) | |")
        if w.get("groups"):
            out += [
                "",
                "## Per group",
                "",
                "| group | flow | produced | read before / after | lost | duplicated |",
                "|---|---|---|---|---|---|",
            ]
            for g, v in sorted(w["groups"].items()):
                out.append(
                    f"| `{g}` | {v['flow']} | {v['produced']} | {v['read_before']} / {v['read_after']} | "
                    f"{v['lost']} | {v['duplicated']} |"
                )
    out += ["", "## Steps", "", "| step | outcome | seconds |", "|---|---|---|"]
    for s in r.get("steps", []):
        out.append(f"| {s['number']}. {s['title']} | {s['outcome']} | {s['duration_seconds']:g} |")
    for s in r.get("steps", []):
        out += ["", f"### {s['number']}. {s['title']} ({s['outcome']})", ""]
        if s.get("failure"):
            out += [f"**Failed:** {s['failure']}", ""]
        # In the runbook's order: actions and commands by their line.
        for e in sorted([*s.get("actions", []), *s.get("commands", [])], key=lambda e: e["line"]):
            if "action" in e:
                out.append(f"- manual `{e['action']}` (line {e['line']}): {e.get('played', '-')}")
                continue
            out.append(f"- `{e['command']}` -> exit {e['exit']} (expect: {e['expect']}; {e['attempts']} attempt(s))")
            text = (e.get("stdout") or "") + (e.get("stderr") or "")
            if e.get("failures"):
                out += ["", "  ```", *("  " + ln for ln in text.strip().splitlines()[-30:]), "  ```"]
    return "\n".join(out) + "\n"
