"""Where a flow's Structured Streaming checkpoint lives, and whether a query may resume from it.

Each flow has a durable checkpoint by default, `<spark.checkpoint_dir>/<flow name>` (the
config's `spark.checkpoint_dir`, `.mirror/spark` beside the config file unless set), so a
restarted driver resumes the query Spark's way: the batch that was planned and not finished
is planned again with the same offset range, and batch ids, the UI's history and the
query id carry on.

The flow's consumer group is still the source of truth (see `mirror.spark.job`): a
checkpoint is resumed only where it resumes exactly where the group says. Spark would
otherwise start from the checkpoint and ignore `startingOffsets`, so a group rewound by an
operator (a failback, a replay) would be skipped forward, and a group moved on by `mirror
run` meanwhile would be mirrored again. When they disagree the checkpoint is dropped and the
query starts from the group's offsets, which is always exact: a replayed record already on
the target is skipped (`mirror.spark.task`). With `exactly_once` the positions compared are
the target's progress (`mirror.spark.exactly_once`), where such a query starts.

The layout read here is Spark's offset log (`offsets/<batch id>`: a version line, a metadata
line, then one line per source; the Kafka source's is `{"topic": {"partition": offset}}`)
and its commit log (`commits/<batch id>` once the batch completed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from mirror.config import Config, FlowConfig

Positions = dict[tuple[str, int], int]


def default_checkpoint(config: Config, flow: FlowConfig) -> Path:
    """The flow's own checkpoint directory under the config's `spark.checkpoint_dir`."""
    return Path(config.spark.checkpoint_dir) / flow.name


def resume_problem(location: Path, starting: Mapping[str, Mapping[str, int]]) -> str | None:
    """Why the query checkpointed at `location` must not resume, given the group's positions
    (`starting`, as passed to Spark's `startingOffsets`); None when it may (or there is
    nothing to resume).

    The group's offset of a partition lies, after a driver stopped or died:
    * at the end of the newest batch, once Spark recorded that batch as complete; the
      query then resumes there;
    * between the ends of the two newest batches while the newest one is incomplete (its
      tasks may have produced and the group committed part of it); Spark then replans
      that batch from the older end, and its replayed records are skipped on the target.
    """
    batches = _batch_ids(location / "offsets")
    if not batches:
        return None
    newest = batches[-1]
    end = _read_offsets(location / "offsets" / str(newest))
    if end is None:
        return f"its offset log of batch {newest} is unreadable"
    group = {(t, int(p)): o for t, parts in starting.items() for p, o in parts.items()}
    if set(group) != set(end):
        return "it covers other partitions than the flow's"
    if (location / "commits" / str(newest)).exists():
        low = end
    elif (
        newest - 1 in batches
        and (older := _read_offsets(location / "offsets" / str(newest - 1))) is not None
        and set(older) == set(end)
    ):
        low = older
    else:
        return f"its first batch ({newest}) never completed"
    behind = sorted(tp for tp, o in group.items() if not low[tp] <= o <= end[tp])
    if behind:
        t, p = behind[0]
        return (
            f"the group's offset of {t}[{p}] ({group[(t, p)]}) is outside the checkpoint's {low[(t, p)]}..{end[(t, p)]}"
        )
    return None


def _batch_ids(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(f.name) for f in folder.iterdir() if f.name.isdigit())


def _read_offsets(path: Path) -> Positions | None:
    """The Kafka source's end offsets in one offset-log file; None when it is not one."""
    try:
        lines = path.read_text().splitlines()
        if len(lines) < 3 or not lines[0].startswith("v"):
            return None
        doc = json.loads(lines[2])
        return {(t, int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return None
