"""`mirror import-mm2`: carry MirrorMaker 2's progress over, so the mirror neither copies
again what MM2 copied nor skips what it did not.

Per enabled pair (flow), once MM2 is stopped:

1. MM2's committed source offsets (Connect's offset topic on the target) give, per source
   partition, the first record MM2 did not commit. The flow's consumer group is set there on
   the source, tagged with the id of the target topic MM2 wrote (`Assignment._offset`), so
   `mirror run` resumes exactly there, into the same target topics.
2. MM2's offset syncs, checked and completed by reading the source where they do not settle
   it (`mirror.domain.mm2_offsets`), become the flow's offset-map rows and tips, written
   *before* the group's offsets (invariant 1): `failover plan --translate` works for groups
   anywhere in what MM2 copied.
3. MM2's checkpoints of the flow's groups become the flow's checkpoints, translated again
   with those rows (exact where MM2's own translation re-reads a little).

Refused (UnsafeOperation, exit 3) when it cannot be done safely: MM2's worker group still
has members or its committed offsets move while the import reads them, the flow's own group
is running or committed elsewhere already, a matched topic MM2 never started, a target
partition that holds less than MM2 committed (re-created or truncated since).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mirror.config import Config, FlowConfig
from mirror.domain.mm2_config import Mm2Flow, Translation
from mirror.domain.mm2_offsets import (
    Mm2FormatError,
    PartitionMap,
    anchors,
    checkpoint_target,
    decode_checkpoint,
    decode_offset_sync,
    latest_checkpoints,
    newest_heartbeat,
    partition_map,
    resume_positions,
)
from mirror.domain.offsetmap import Checkpoint
from mirror.domain.topics import TopicMapping, match_topics
from mirror.engine.partition import TID
from mirror.errors import MirrorError, NotFound, UnsafeOperation, UsageError
from mirror.kafka import Admin, Watermarks
from mirror.kafka.reader import TailRecord, read_offsets, read_range
from mirror.run.checkpointer import matching_groups
from mirror.store import FullOffsetStore

log = logging.getLogger(__name__)

READ_TIMEOUT = 120.0  # per partition range read; MM2's internal topics are small, source stretches short
HEARTBEATS = "heartbeats"  # MM2's heartbeat topic on the target, whatever the replication policy
HEARTBEAT_TAIL = 1000  # heartbeats read back per partition: every pair into the target writes there
# A Connect worker killed without a goodbye keeps its tasks for its session timeout (10 s by
# default); quiet for longer than that, it is gone.
HEARTBEAT_QUIET_S = 15.0
# How much longer than its quiet window the import waits, by default, for an MM2 that just
# stopped: its last heartbeat came at most one interval before it stopped.
WAIT_MARGIN_S = 15.0
Progress = Callable[[str], None]


@dataclass
class FlowReport:
    flow: str
    partitions: int = 0  # source partitions resumed where MM2 stopped
    copied: int = 0  # source offsets MM2 covered (from the log start) on those partitions
    remaining: int = 0  # records left for the mirror to copy
    rows: int = 0
    read: int = 0  # source records read to place MM2's copies exactly
    inexact: int = 0  # stretches placed conservatively (a group there re-reads a little)
    checkpoints: int = 0
    groups: list[str] = field(default_factory=list)
    copied_twice: int = 0  # target records MM2 wrote past its last commit: the mirror copies them again
    notes: list[str] = field(default_factory=list)
    # note -> the partitions it is about, said once per kind (10,000 partitions, one line each, is no report)
    _about: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def note(self, text: str, where: str) -> None:
        self._about.setdefault(text, []).append(where)

    def as_dict(self) -> dict[str, Any]:
        notes = list(self.notes)
        for text, where in self._about.items():
            shown = ", ".join(where[:5]) + (f" and {len(where) - 5} more" if len(where) > 5 else "")
            notes.append(f"{text}: {shown}")
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")} | {"notes": notes}


# ---------------------------------------------------------------------------- the file


def render(translation: Translation, source_name: str) -> str:
    """The topology as YAML, with what the operator must export and what was left behind."""
    head = [
        f"# Written by `mirror import-mm2` from {source_name}.",
        "# Check it with `mirror validate -c FILE` before `mirror run`.",
    ]
    if translation.env:
        head.append("# Secrets are not copied; export these before running:")
        head += [f"#   {var}: {what}" for var, what in sorted(translation.env.items())]
    if translation.untranslated:
        head.append("# MirrorMaker 2 settings not carried over:")
        head += [f"#   {u.key}: {u.reason}" for u in translation.untranslated]
    return "\n".join(head) + "\n" + yaml.safe_dump(translation.config, sort_keys=False, default_flow_style=False)


# ---------------------------------------------------------------------------- the take-over


@dataclass
class _Sides:
    source: Admin
    target: Admin
    config: Config
    flow: FlowConfig
    mm2: Mm2Flow

    def read(
        self, admin: Admin, topic: str, partition: int, start: int, end: int, isolation: str | None = None
    ) -> list[TailRecord]:
        name = admin.name
        return read_range(
            name, self.config.cluster(name), topic, partition, start, end, READ_TIMEOUT, isolation=isolation
        )

    def read_topic(
        self, admin: Admin, topic: str, partitions: int
    ) -> tuple[list[TailRecord], dict[tuple[str, int], int]]:
        """Every record of a small internal topic, and the ends it was read up to."""
        marks = admin.watermarks([(topic, p) for p in range(partitions)], committed_only=False)
        out: list[TailRecord] = []
        for (t, p), w in sorted(marks.items()):
            out += self.read(admin, t, p, w.low, w.high)
        return out, {k: w.high for k, w in marks.items()}


def take_over(
    config: Config,
    flows: Sequence[Mm2Flow],
    store: FullOffsetStore,
    *,
    copy_new_topics: bool = False,
    admin: Callable[[str], Admin] | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    wait_quiet: float | None = None,
    progress: Progress = lambda _line: None,
) -> list[FlowReport]:
    """Import MM2's progress for each flow (see the module docstring); returns what was done.

    `wait_quiet`: seconds to wait for MM2's heartbeats to go quiet (None: its quiet window
    plus `WAIT_MARGIN_S`); `progress` gets a line when the import waits."""
    make = admin or (lambda name: Admin(name, config.cluster(name)))
    reports = []
    for mm2 in flows:
        sides = _Sides(make(mm2.source), make(mm2.target), config, config.flow(mm2.name), mm2)
        quiet = _Quiet(clock, sleep, wait_quiet, progress)
        reports.append(_flow(sides, store, copy_new_topics, quiet))
    return reports


@dataclass(frozen=True)
class _Quiet:
    """How the import waits for an MM2 that just stopped (injected: tests sleep in no time)."""

    clock: Callable[[], float]
    sleep: Callable[[float], None]
    budget: float | None
    progress: Progress


def _flow(s: _Sides, store: FullOffsetStore, copy_new_topics: bool, quiet: _Quiet) -> FlowReport:
    report = FlowReport(s.flow.name)
    target_topics = s.target.topics()
    beat = _wait_stopped(s, target_topics, quiet, report)
    started = time.monotonic()
    now_ms = int(quiet.clock() * 1000)
    sleep = quiet.sleep
    if s.mm2.offsets_topic not in target_topics:
        raise NotFound(
            f"MirrorMaker 2's offsets topic {s.mm2.offsets_topic!r} is not on {s.mm2.target!r}",
            hint="import-mm2 reads dedicated-mode MM2 (connect-mirror-maker.sh) progress; check that this is "
            "the file it ran with",
        )
    records, ends_before = s.read_topic(s.target, s.mm2.offsets_topic, target_topics[s.mm2.offsets_topic])
    try:
        resume = resume_positions(((r.key, r.value) for r in records), s.mm2.source)
    except Mm2FormatError as exc:
        raise MirrorError(f"{s.mm2.offsets_topic}: {exc}") from None
    mappings = [m for m in match_topics(s.config, s.flow, s.source.topics()) if m.source != s.config.canary.topic]
    source_marks = s.source.watermarks([(m.source, p) for m in mappings for p in range(m.partitions)])
    _refuse_unstarted(s, mappings, resume, source_marks, target_topics, copy_new_topics, report)
    present = [m for m in mappings if m.target in target_topics]
    target_marks = s.target.watermarks(
        [(m.target, p) for m in present for p in range(m.partitions)], committed_only=False
    )
    maps = _partition_maps(s, present, resume, source_marks, target_marks, report)
    checkpoints = _checkpoints(s, maps, target_topics, target_marks, present)
    _refuse_moving(s, ends_before, beat, started, sleep)
    offsets = {tp: resume[tp] for tp in maps}
    _refuse_committed(s, offsets)
    # Rows first, group offsets second: the mirror never commits past rows the store lacks.
    store.write_syncs(
        s.flow.name,
        [r for pm in maps.values() for r in pm.rows],
        [pm.tip for pm in maps.values() if pm.tip is not None],
    )
    store.write_checkpoints(s.flow.name, checkpoints)
    # What the source held, as the checkpointer stores it: a plan from these checkpoints (the
    # source gone right after the switch) can say how much never reached the target.
    store.write_source_ends(s.flow.name, {tp: w.high for tp, w in source_marks.items()}, now_ms)
    report.checkpoints = len(checkpoints)
    report.groups = sorted({c.group for c in checkpoints})
    if offsets:
        names = {m.source: m.target for m in present}
        ids = s.target.topic_ids(sorted({names[t] for t, _ in offsets}))
        meta = {tp: f"{TID}{ids[names[tp[0]]]}" for tp in offsets if names[tp[0]] in ids}
        s.source.alter_group_offsets(s.flow.group_id, offsets, metadata=meta)
    if not s.mm2.read_committed:
        report.notes.append(
            "MM2 read the source read_uncommitted: records of aborted transactions it copied stay on the "
            "target; the mirror copies committed records only"
        )
    log.info(
        "flow %s: took over %d partitions from MirrorMaker 2 (%d rows, %d checkpoints)",
        s.flow.name,
        report.partitions,
        report.rows,
        report.checkpoints,
    )
    return report


def _partition_maps(
    s: _Sides,
    present: list[TopicMapping],
    resume: dict[tuple[str, int], int],
    source_marks: dict[tuple[str, int], Watermarks],
    target_marks: dict[tuple[str, int], Watermarks],
    report: FlowReport,
) -> dict[tuple[str, int], PartitionMap]:
    """The offset map of every partition MM2 committed, and the report's counts."""
    syncs = _syncs(s)
    maps: dict[tuple[str, int], PartitionMap] = {}
    isolation = "read_committed" if s.mm2.read_committed else "read_uncommitted"
    # The stretch after each partition's last sync is always read: all of them at once.
    last = {}
    for tp, points in syncs.items():
        below = [u for u, _d in points if u < resume.get(tp, -1)]
        if below:
            last[tp] = (below[-1], resume[tp])
    timeout = READ_TIMEOUT + 0.05 * len(last)
    short: list[str] = []  # target partitions without the copies MM2 committed
    prefetched = (
        read_offsets(s.source.name, s.config.cluster(s.source.name), last, timeout, isolation=isolation) if last else {}
    )
    for m in present:
        for p in range(m.partitions):
            tp, w = (m.source, p), target_marks[(m.target, p)]
            if tp not in resume:
                if w.high > w.low:
                    report.copied_twice += w.high - w.low
                    report.note(
                        "MM2 wrote records but committed none (copied again)", f"{m.source}[{p}] ({w.high - w.low})"
                    )
                continue

            def read(start: int, end: int, m: TopicMapping = m, p: int = p) -> list[int]:
                if last.get((m.source, p)) == (start, end):
                    return prefetched[(m.source, p)]
                return [r.offset for r in s.read(s.source, m.source, p, start, end, isolation)]

            pm = partition_map(m.source, p, syncs.get(tp, []), resume[tp], read)
            if pm.tip is not None and w.high <= pm.tip.target_offset:
                short.append(
                    f"{m.target}[{p}] ends at {w.high}, MM2's copy of {m.source}[{p}] offset "
                    f"{pm.tip.source_offset} was at {pm.tip.target_offset}"
                )
            maps[tp] = pm
            report.partitions += 1
            report.rows += len(pm.rows)
            report.read += pm.read
            report.inexact += pm.inexact
            report.copied += max(0, resume[tp] - source_marks[tp].low)
            report.remaining += max(0, source_marks[tp].high - resume[tp])
            if pm.tip is not None and w.high > pm.tip.target_offset + 1:
                report.copied_twice += w.high - pm.tip.target_offset - 1
            if resume[tp] < source_marks[tp].low:
                report.note(
                    "records expired on the source before MM2 copied them",
                    f"{m.source}[{p}] {resume[tp]}..{source_marks[tp].low - 1}",
                )
            if not pm.rows:
                report.note(
                    "no MM2 offset syncs (failover plans for positions before the switch start at the "
                    "target's beginning)",
                    f"{m.source}[{p}]",
                )
    if short:
        # Re-created or truncated since MM2 copied into it: resuming after MM2's commit would
        # leave what MM2 had copied out of the target.
        raise UnsafeOperation(
            f"a target partition of flow {s.flow.name!r} holds less than MirrorMaker 2 committed "
            f"({len(short)} in all; e.g. {short[0]})",
            hint="the target topic was re-created or truncated since; delete MM2's offsets for it (or the "
            "topic from the flow) and let the mirror copy it whole",
        )
    return maps


def _wait_stopped(s: _Sides, target_topics: dict[str, int], quiet: _Quiet, report: FlowReport) -> int | None:
    """Wait until MM2 is stopped for this pair: its heartbeats on the target quiet for its
    quiet window. Returns the newest one's time, to see at the end whether another came
    (`_refuse_moving`); refused (exit 3) when they do not go quiet within the budget.

    Its Connect worker group would say so better, but librdkafka neither lists nor
    describes groups of another protocol than `consumer`. A heartbeat comes every
    `emit.heartbeats.interval.seconds`; none for a few intervals (and at least a Connect
    session timeout, after which a killed worker's tasks could move) means stopped.
    """
    if s.source.group_members(s.flow.group_id):
        raise UnsafeOperation(
            f"flow {s.flow.name!r} is already running: its group {s.flow.group_id!r} has members on {s.mm2.source!r}",
            hint="stop `mirror run` first",
        )
    if s.mm2.heartbeat_interval is None:
        report.notes.append(
            "MM2 emits no heartbeats here: that it is stopped was judged only by its offsets not moving "
            "during the import"
        )
        return None
    window = max(HEARTBEAT_QUIET_S, 3 * s.mm2.heartbeat_interval)
    budget = quiet.budget if quiet.budget is not None else window + WAIT_MARGIN_S
    deadline = quiet.clock() + budget
    pair = f"{s.mm2.source}->{s.mm2.target}"
    waiting_since: int | None = None
    while True:
        newest = _newest_heartbeat(s, target_topics)
        now = quiet.clock()
        if newest is None:
            return None
        age = max(0.0, now - newest / 1000)
        if age >= window:
            return newest
        if now + window - age > deadline:
            raise UnsafeOperation(
                f"MirrorMaker 2 still runs for {pair}: its last heartbeat on {s.mm2.target!r} is {age:.1f}s old, "
                f"and {window:.0f}s of quiet cannot come within --wait-quiet {budget:.0f}s",
                hint="stop every MirrorMaker 2 process of this pair first (its worker group is "
                f"{s.mm2.connect_group!r}), then run import-mm2 again (or give it a longer --wait-quiet)",
            )
        if newest != waiting_since:
            quiet.progress(
                f"MirrorMaker 2's last heartbeat for {pair} is {age:.1f}s old: waiting until it has been quiet for "
                f"{window:.0f}s (at most {max(0.0, deadline - now):.0f}s more, --wait-quiet)"
            )
            waiting_since = newest
        quiet.sleep(window - age)


def _newest_heartbeat(s: _Sides, target_topics: dict[str, int]) -> int | None:
    if HEARTBEATS not in target_topics:
        return None
    marks = s.target.watermarks([(HEARTBEATS, p) for p in range(target_topics[HEARTBEATS])], committed_only=False)
    records = [
        r
        for (t, p), w in sorted(marks.items())
        for r in s.read(s.target, t, p, max(w.low, w.high - HEARTBEAT_TAIL), w.high)
    ]
    return newest_heartbeat(((r.key, r.value) for r in records), s.mm2.source, s.mm2.target)


def _refuse_moving(
    s: _Sides, before: dict[tuple[str, int], int], beat: int | None, started: float, sleep: Callable[[float], None]
) -> None:
    """MM2's committed offsets moved, or a heartbeat came, since the import began reading.
    The heartbeat check does not trust clocks (MM2's host may be behind): at least three
    heartbeat intervals are let pass between the two reads."""
    after = s.target.end_offsets(list(before), committed_only=False)
    if after != before:
        raise UnsafeOperation(
            f"MirrorMaker 2's committed offsets for {s.mm2.source}->{s.mm2.target} moved while they were "
            f"read ({s.mm2.offsets_topic} grew)",
            hint="some MM2 process still runs for this pair (maybe one with other --clusters): stop it, then "
            "import again",
        )
    if s.mm2.heartbeat_interval is None:
        return
    sleep(max(0.0, 3 * s.mm2.heartbeat_interval - (time.monotonic() - started)))
    again = _newest_heartbeat(s, s.target.topics())
    if again is not None and again != beat:
        raise UnsafeOperation(
            f"MirrorMaker 2 still runs for {s.mm2.source}->{s.mm2.target}: it emitted a heartbeat on "
            f"{s.mm2.target!r} during the import",
            hint="stop every MirrorMaker 2 process of this pair first (its worker group is "
            f"{s.mm2.connect_group!r}), then run import-mm2 again",
        )


def _refuse_unstarted(
    s: _Sides,
    mappings: list[TopicMapping],
    resume: dict[tuple[str, int], int],
    marks: dict[tuple[str, int], Watermarks],
    target_topics: dict[str, int],
    copy_new_topics: bool,
    report: FlowReport,
) -> None:
    """A matched topic with records MM2 never started is not MM2's to hand over: the mirror
    would copy all of it, which is what the operator meant to avoid."""
    started = {t for t, _ in resume}
    unstarted = [
        m
        for m in mappings
        if m.source not in started
        and any(marks[(m.source, p)].high > marks[(m.source, p)].low for p in range(m.partitions))
    ]
    unstarted = [m for m in unstarted if m.target not in target_topics]
    gone = sorted({m.target for m in mappings if m.source in started and m.target not in target_topics})
    if gone:
        raise UnsafeOperation(
            f"MirrorMaker 2 committed offsets of topics whose copies are gone from {s.mm2.target!r}: "
            f"{', '.join(gone[:10])}",
            hint="resuming would leave out everything MM2 had copied; delete MM2's offsets for them (or the "
            "topics from the flow) and let the mirror copy them whole",
        )
    if unstarted and not copy_new_topics:
        names = ", ".join(m.source for m in unstarted[:10])
        raise UnsafeOperation(
            f"flow {s.flow.name!r} matches {len(unstarted)} topic(s) MirrorMaker 2 never started: {names}",
            hint="exclude them in the MM2 file and import again, let MM2 copy them first, or pass "
            "--copy-new-topics to mirror them from the beginning",
        )
    for m in unstarted:
        report.note("never started by MM2, mirrored from the beginning", m.source)


def _refuse_committed(s: _Sides, offsets: dict[tuple[str, int], int]) -> None:
    """The flow's group already committed elsewhere: it ran, or took over before. Importing
    again would move its positions under what it mirrored since."""
    if not offsets:
        return
    committed = s.source.group_offsets(s.flow.group_id, list(offsets))
    moved = {tp: o for tp, o in committed.items() if o != offsets[tp]}
    if moved:
        (t, p), o = next(iter(sorted(moved.items())))
        raise UnsafeOperation(
            f"group {s.flow.group_id!r} already committed {len(moved)} partition(s) of flow "
            f"{s.flow.name!r} elsewhere (e.g. {t}[{p}] at {o}, MM2 stopped at {offsets[(t, p)]})",
            hint="the flow has run or taken over already; to import again, delete the group and the flow's "
            "offset-map rows first",
        )


def _syncs(s: _Sides) -> dict[tuple[str, int], list[tuple[int, int]]]:
    admin = s.target if s.mm2.offset_syncs_on_target else s.source
    topics = admin.topics()
    if s.mm2.offset_syncs_topic not in topics:
        return {}
    records, _ = s.read_topic(admin, s.mm2.offset_syncs_topic, topics[s.mm2.offset_syncs_topic])
    try:
        return anchors(decode_offset_sync(r.key, r.value) for r in records)
    except Mm2FormatError as exc:
        raise MirrorError(f"{s.mm2.offset_syncs_topic}: {exc}") from None


def _checkpoints(
    s: _Sides,
    maps: dict[tuple[str, int], PartitionMap],
    target_topics: dict[str, int],
    marks: dict[tuple[str, int], Watermarks],
    present: list[TopicMapping],
) -> list[Checkpoint]:
    if s.mm2.checkpoints_topic not in target_topics or not s.flow.groups:
        return []
    records, _ = s.read_topic(s.target, s.mm2.checkpoints_topic, target_topics[s.mm2.checkpoints_topic])
    try:
        cps = latest_checkpoints(decode_checkpoint(r.key, r.value, r.timestamp_ms) for r in records)
    except Mm2FormatError as exc:
        raise MirrorError(f"{s.mm2.checkpoints_topic}: {exc}") from None
    # MM2 names the partition by its remote (target) topic; the mirror by the source topic.
    sources = {m.target: m.source for m in present}
    wanted = set(matching_groups(list(s.flow.groups), sorted({c.group for c in cps})))
    out = []
    for c in cps:
        source = sources.get(c.topic)
        if c.group not in wanted or source is None:
            continue
        end = marks[(c.topic, c.partition)].high
        out.append(
            Checkpoint(
                c.group,
                source,
                c.partition,
                c.upstream,
                checkpoint_target(c, maps.get((source, c.partition)), end),
                c.time_ms,
            )
        )
    return out


def write_file(text: str, out: Path, *, force: bool) -> None:
    if out.exists() and not force:
        raise UsageError(f"--out: {out} exists", hint="pass --force to overwrite it, or --out another path")
    out.write_text(text, encoding="utf-8")
