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
line, then one line per source; the Kafka source's is `{"topic": {"partition": offset}}`),
its commit log (`commits/<batch id>` once the batch completed) and the Kafka source's first
offsets (`sources/0/0`). Spark writes each file whole (a rename), so a file is there or not.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mirror.config import Config, FlowConfig
from mirror.errors import MirrorError, UsageError
from mirror.spark.checkpoint_lock import hold_checkpoint

Positions = dict[tuple[str, int], int]


def default_checkpoint(config: Config, flow: FlowConfig) -> Path:
    """The flow's own checkpoint directory under the config's `spark.checkpoint_dir`."""
    return Path(config.spark.checkpoint_dir) / flow.name


def resume_problem(location: Path, starting: Mapping[str, Mapping[str, int]]) -> str | None:
    """Why the query checkpointed at `location` must not resume, given the group's positions
    (`starting`, as passed to Spark's `startingOffsets`); None when it may (or there is
    nothing to resume).

    Resumed, Spark replays the newest batch if it is incomplete (from the end of the batch
    before it, or from the query's first offsets for batch 0) and otherwise goes on from its
    end. The group's offset of each partition lies within that replayed range (or at the end
    of a complete batch): `mirror.spark.batches` commits a batch's whole range, transaction
    markers included, before Spark records the batch complete, and the tasks commit only
    within the batch being run. A partition the group never committed resumes only where the
    checkpoint never moved it past its first offset.
    """
    batches = _batch_ids(location / "offsets")
    if not batches:
        return None
    newest = batches[-1]
    end = batch_ends(location, newest)
    if end is None:
        return f"its offset log of batch {newest} is unreadable"
    group = {(t, int(p)): o for t, parts in starting.items() for p, o in parts.items()}
    if set(group) != set(end):
        return "it covers other partitions than the flow's"
    low = _replayed_from(location, batches, end)
    if isinstance(low, str):
        return low
    first: Positions | None = None
    for (t, p), offset in sorted(group.items()):
        if low[(t, p)] <= offset <= end[(t, p)]:
            continue
        if offset < 0:  # never committed: Spark's first offset of it was the log start
            first = first if first is not None else _first_offsets(location) or {}
            if first.get((t, p)) == low[(t, p)]:
                continue
        return f"the group's offset of {t}[{p}] ({offset}) is outside the checkpoint's {low[(t, p)]}..{end[(t, p)]}"
    return None


def batch_ends(location: Path, batch: int) -> Positions | None:
    """Batch `batch`'s end offsets as Spark's offset log records them (written before the
    batch runs); None when unreadable."""
    return _read_offsets(location / "offsets" / str(batch))


def has_batches(location: Path) -> bool:
    """Whether the query at `location` planned any batch (there is something to resume)."""
    return bool(_batch_ids(location / "offsets"))


def _replayed_from(location: Path, batches: list[int], end: Positions) -> Positions | str:
    """Where a resumed query starts each partition: the newest batch's end once complete,
    else where that batch starts (Spark plans it again with the same range)."""
    newest = batches[-1]
    if (location / "commits" / str(newest)).exists():
        return end
    if newest == 0:
        first = _first_offsets(location)
        if first is None or set(first) != set(end):
            return "its first batch (0) never completed and its first offsets are unreadable"
        return first
    older = _read_offsets(location / "offsets" / str(newest - 1)) if newest - 1 in batches else None
    if older is None or set(older) != set(end):
        return f"its batch {newest} never completed and the batch before it is unreadable"
    return older


def _first_offsets(location: Path) -> Positions | None:
    """The Kafka source's first offsets of the query (`sources/0/0`: a NUL byte, a version
    line, then `{"topic": {"partition": offset}}`); None when unreadable."""
    try:
        lines = (location / "sources" / "0" / "0").read_text().lstrip("\0").splitlines()
        if len(lines) < 2 or not lines[0].startswith("v"):
            return None
        return _positions(json.loads(lines[1]))
    except (OSError, ValueError, AttributeError, TypeError):
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
        return _positions(json.loads(lines[2]))
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def _positions(doc: Any) -> Positions:
    return {(t, int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}


MARKER = "mirror-flow.json"  # in a --checkpoint directory: which flow it belongs to


def claim_checkpoint(directory: Path, flow: FlowConfig) -> Path:
    """A --checkpoint directory belongs to one flow; another flow's is refused (exit 2)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MirrorError(f"flow {flow.name}: cannot create its checkpoint {directory}: {exc.strerror}") from exc
    marker = directory / MARKER
    mine = {"flow": flow.name, "source": flow.source, "group": flow.group_id}
    text = _marker_text(marker, flow)
    if text.strip():
        try:
            theirs = json.loads(text)
        except ValueError:
            theirs = None
        if theirs != mine:
            raise UsageError(
                f"--checkpoint {directory} belongs to {theirs!r}, not flow {flow.name!r}",
                hint="give each flow its own checkpoint directory (--checkpoint, or spark.checkpoint_dir in "
                "the config)",
            )
    else:  # none yet, or an empty one (a power loss before its data reached the disk)
        _write_marker(marker, mine, flow)
    return directory / "query"


def _marker_text(marker: Path, flow: FlowConfig) -> str:
    try:
        return marker.read_text()
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise MirrorError(f"flow {flow.name}: cannot read its checkpoint's {marker}: {exc.strerror}") from exc


def _write_marker(marker: Path, mine: Mapping[str, str], flow: FlowConfig) -> None:
    """Whole or not at all: a temporary of its own (two drivers on one fresh directory may share
    a pid, in two containers), synced, then renamed over; a half-written marker would refuse
    every later run as another flow's."""
    part: Path | None = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{MARKER}.", suffix=".tmp", dir=marker.parent)
        part = Path(name)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(mine))
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, marker)
    except OSError as exc:
        if part is not None:
            with contextlib.suppress(OSError):  # a read-only volume refuses the clean-up too
                part.unlink(missing_ok=True)
        raise MirrorError(f"flow {flow.name}: cannot write its checkpoint's {marker}: {exc.strerror}") from exc


@contextmanager
def own_checkpoint(directory: Path, flow: FlowConfig) -> Iterator[Path]:
    """The flow's checkpoint `directory`, claimed for the flow (`claim_checkpoint`) and held by
    this driver until the block ends (`hold_checkpoint`: another driver of it is refused, exit 3);
    yields the query's checkpoint location."""
    location = claim_checkpoint(directory, flow)
    with hold_checkpoint(directory, flow.name):
        yield location
