"""`mirror import-mm2`: write the topology of a MirrorMaker 2 file and take over its progress."""

from __future__ import annotations

import json
from pathlib import Path

import click

from mirror.cli import AppContext, json_option, pass_app
from mirror.config import parse_duration
from mirror.domain.mm2_config import Translation, parse_properties, translate
from mirror.errors import ConfigError, UsageError
from mirror.migrate.mm2 import render, take_over, write_file
from mirror.store import open_store


def _duration(flag: str, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


@click.command("import-mm2")
@click.option(
    "--mm2-config",
    "mm2_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="MirrorMaker 2's properties file (dedicated mode).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("mirror.yaml"),
    show_default=True,
    help="Topology file to write.",
)
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help=(
        "Take over into this topology (written by an earlier --config-only run, maybe edited) instead of writing --out."
    ),
)
@click.option("--config-only", is_flag=True, help="Write the file only; take nothing over (review it first).")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@click.option(
    "--copy-new-topics",
    is_flag=True,
    help="Mirror matched topics MirrorMaker 2 never started from their beginning instead of refusing.",
)
@click.option(
    "--yes",
    is_flag=True,
    help="Confirm the take-over: it sets each flow's group offsets on the source and writes its offset map.",
)
@click.option(
    "--wait-quiet",
    metavar="DURATION",
    help="Wait up to this long (e.g. 60s) for a MirrorMaker 2 that just stopped to go quiet (no heartbeat for "
    "15 s or 3 heartbeat intervals) before refusing (default: that quiet window plus 15 s).",
)
@json_option
@pass_app
def import_mm2(
    app: AppContext,
    mm2_path: Path,
    out: Path,
    config_path: Path | None,
    config_only: bool,
    force: bool,
    copy_new_topics: bool,
    yes: bool,
    wait_quiet: str | None,
    as_json: bool,
) -> None:
    """Translate a MirrorMaker 2 file into a topology and resume each flow where MM2 stopped.

    Stop MirrorMaker 2 first (runbooks/migrate-from-mm2.md). Nothing is copied again: the
    flows' groups start after the last record MM2 committed, into the same target topics,
    and MM2's offset syncs and checkpoints become the flows' offset map and checkpoints.
    """
    if not config_only and not yes:  # checked first: a refused run writes nothing, not even --out
        raise UsageError(
            "--yes is required: the take-over sets each flow's group offsets on the source and writes its offset map",
            hint="add --yes, or --config-only to write the topology file only",
        )
    wait_s = _duration("--wait-quiet", wait_quiet)
    try:
        text = mm2_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            "--mm2-config",
            f"cannot read {str(mm2_path)!r}: {exc.strerror}",
            hint="pass MirrorMaker 2's properties file",
        ) from None
    translation = translate(parse_properties(text))
    if config_path is None:
        write_file(render(translation, str(mm2_path)), out, force=force)
        config_path = out
    result: dict = {
        "config": str(config_path),
        "flows": [f.name for f in translation.flows],
        "env": translation.env,
        "untranslated": [u.__dict__ for u in translation.untranslated],
        "took_over": [],
    }
    if not config_only:
        config = app.config(config_path)  # validated; unset ${VAR}s are reported here
        for f in translation.flows:
            config.flow(f.name)
        store = open_store(config.offset_store)
        try:
            result["took_over"] = [
                r.as_dict()
                for r in take_over(
                    config,
                    translation.flows,
                    store,
                    copy_new_topics=copy_new_topics,
                    wait_quiet=wait_s,
                    progress=lambda line: click.echo(line, err=True),
                )
            ]
        finally:
            store.close()
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    _render(result, translation, config_path, mm2_path, config_only)


def _render(result: dict, translation: Translation, config_path: Path, mm2_path: Path, config_only: bool) -> None:
    click.echo(
        f"{config_path}: {len(translation.config['clusters'])} clusters, {len(translation.flows)} flows"
        + (
            f"; {len(translation.untranslated)} MM2 settings not carried over (listed at the top of the file)"
            if translation.untranslated
            else ""
        )
    )
    for var, what in sorted(translation.env.items()):
        click.echo(f"  export {var}: {what}")
    for r in result["took_over"]:
        click.echo(
            f"flow {r['flow']}: resumed {r['partitions']} partitions where MirrorMaker 2 stopped "
            f"({r['copied']} source offsets copied by MM2, {r['remaining']} records left); {r['rows']} offset-map rows "
            f"({r['read']} source records read to place them, {r['inexact']} stretches conservative), "
            f"{r['checkpoints']} checkpoints of {len(r['groups'])} groups"
        )
        if r["copied_twice"]:
            click.echo(f"  {r['copied_twice']} records MM2 wrote after its last commit will be on the target twice")
        for note in r["notes"]:
            click.echo(f"  note: {note}")
    if config_only:
        click.echo(
            f"nothing taken over (--config-only); review {config_path}, then: mirror import-mm2 --mm2-config "
            f"{mm2_path} -c {config_path} --yes"
        )
