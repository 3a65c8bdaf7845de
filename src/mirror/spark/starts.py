"""Where a Spark query starts each source partition (its `startingOffsets`).

The group's committed offset, as `mirror run` would resume, except from the beginning where
there is none, where it lies outside the source log (`starting_offset`), where the source
topic was deleted and created again since an earlier query of this run, and where the target
topic is new: created by this run, or created again since the commit (its id differs from the
one the commit is tagged with, `new_target`).

`plan_starts` decides from what was read (pure, for unit tests); `StartingOffsets` reads the
clusters and carries the decision out: the recreated target partitions emptied, the offset-map
rows of reset partitions dropped and the group rewound, all before Spark starts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mirror.domain.gaps import GapPolicy, GapReason, SourceGap
from mirror.domain.topics import TopicMapping
from mirror.engine.recreated import RecreatedTopics
from mirror.engine.start_points import StartPoints
from mirror.errors import MirrorError
from mirror.kafka import OFFSET_END
from mirror.spark.commits import TARGET_TOPIC_ID, GroupCommits, Partition
from mirror.spark.exactly_once import ProgressStarts
from mirror.spark.gaps import report_gaps

log = logging.getLogger(__name__)

EARLIEST = -2  # Spark's startingOffsets for "from the beginning"


@dataclass
class Starts:
    """One query's start: Spark's `startingOffsets` and what must happen before it runs."""

    offsets: dict[str, dict[str, int]] = field(default_factory=dict)  # topic -> partition -> offset or EARLIEST
    at: dict[Partition, int] = field(default_factory=dict)  # partitions starting at the group's offset
    earliest: list[Partition] = field(default_factory=list)  # from the beginning, the group's offset not trusted
    reset: list[Partition] = field(default_factory=list)  # from the beginning: rows dropped, group rewound to 0
    stale: dict[Partition, int] = field(default_factory=dict)  # target partitions to empty first
    warnings: list[str] = field(default_factory=list)
    # Records retention deleted before the group's committed offset was copied on: reported
    # in `mirror run`'s words (`SourceGap.describe`), counted and recorded before the query runs.
    gaps: list[SourceGap] = field(default_factory=list)
    restarted: bool = False  # some partition the group has an offset for starts from the beginning

    def start(self, tp: Partition, offset: int) -> None:
        self.offsets.setdefault(tp[0], {})[str(tp[1])] = offset


def plan_starts(
    mappings: list[TopicMapping],
    committed: Mapping[Partition, tuple[int | None, str | None]],
    marks: Mapping[Partition, Any],
    target_ids: Mapping[str, str],
    created: set[str],
    recreated: set[str],
    chosen: Mapping[Partition, int] | None = None,
    reported: frozenset[str] = frozenset(),
) -> Starts:
    """Each partition's start from the group's offsets and metadata (`committed`), the source
    watermarks (`marks`: `.low`, `.high`), the target topics' ids, the target topics this run
    `created`, the source topics `recreated` since the run's previous query, and the starts
    `start_from` `chosen` for partitions the group never committed. Of the `recreated`
    topics, those `reported` already (re-created while the flow was stopped) get no warning here."""
    chosen = chosen or {}
    out = Starts()
    for m in mappings:
        out.offsets[m.source] = {}
        tid = target_ids.get(m.target)
        # One warning per topic and cause, not one per partition (a topic may have thousands).
        new: list[str] = []  # how each partition's target topic is new
        outside: list[str] = []  # partitions whose committed offset lies outside the log, and why
        for p in range(m.partitions):
            tp = (m.source, p)
            offset, meta = committed.get(tp, (None, None))
            if m.source in recreated:
                out.start(tp, EARLIEST)
                out.reset.append(tp)
                continue
            if offset is None and tp in chosen:
                out.start(tp, chosen[tp])  # never mirrored: where start_from says
                out.at[tp] = chosen[tp]
                continue
            if new_target(m.target in created, meta, tid):
                new.append(
                    "created by this run"
                    if m.target in created
                    else f"the group's offset was committed into an earlier {m.target}"
                )
                out.start(tp, EARLIEST)
                out.reset.append(tp)
                if m.target not in created:
                    # Nobody committed into the new topic: what it holds are copies that
                    # would come ahead of (or twice with) the ones mirrored now.
                    out.stale[(m.target, p)] = OFFSET_END
                continue
            w = marks.get(tp)
            start, why = starting_offset(offset, w.low if w else None, w.high if w else None)
            if why and w is not None and offset is not None and offset < w.low:
                out.gaps.append(SourceGap(m.source, p, offset, w.low - 1, GapReason.RETENTION))
            elif why:
                outside.append(f"{m.source}[{p}]: {why}")
            out.start(tp, start)
            if start >= 0:
                out.at[tp] = start
            else:
                out.earliest.append(tp)
                out.restarted |= offset is not None
        out.warnings.extend(_topic_warnings(m, m.source in recreated - reported, new, outside))
    out.restarted |= bool(out.reset)
    return out


def _topic_warnings(m: TopicMapping, recreated: bool, new: list[str], outside: list[str]) -> list[str]:
    """`plan_starts`' warnings for one topic: a line per cause, naming how many partitions."""
    out = []
    if recreated:
        out.append(
            f"{m.source} ({_count(m.partitions)}): source topic {m.source} was deleted and created again; "
            "mirroring it from the earliest offset"
        )
    if new:
        out.append(
            f"{m.source} ({_count(len(new))}): target topic {m.target} is new ({new[0]}); mirroring from the "
            "earliest offset"
        )
    if len(outside) == 1:
        out.append(f"{outside[0]}; mirroring from the earliest offset")
    elif outside:
        out.append(
            f"{_count(len(outside))} of {m.source} start from the earliest offset, their committed offset "
            f"outside the log; the first: {outside[0]}"
        )
    return out


def _count(n: int) -> str:
    return "1 partition" if n == 1 else f"{n} partitions"


class StartingOffsets:
    """Reads what a query's start depends on and carries out `plan_starts`' decision.

    Owns the run's memory of the source topics' ids (a topic deleted and created again
    between two queries of one run restarts from the beginning: Spark's source would not
    notice and skip the new records below the old position) and of the target topics the
    run created (their partitions start from the beginning once).
    """

    def __init__(
        self,
        flow: str,
        group: str,
        source: Any,
        target: Any,
        recorder: Any,
        commits: GroupCommits,
        progress: ProgressStarts | None = None,
        start_points: StartPoints | None = None,
    ) -> None:
        self.flow = flow
        self.start_points = start_points  # start_from: where never-committed partitions start
        self.progress = progress  # exactly_once: the target's progress, not the group, says where to start
        self.group = group
        self.source = source
        self.target = target
        self.recorder = recorder
        self.commits = commits
        self.created: set[str] = set()  # target topics this run created, not yet started from the beginning
        self.source_ids: dict[str, str] = {}  # source topic -> id, as the last query started
        self.on_source_gap = GapPolicy.SKIP
        self.metrics: Any = None  # the driver's MetricsListener (`--metrics-port`): counts the gaps
        self._stopped: RecreatedTopics | None | bool = None  # topics re-created while no run was; False: no store

    def _report_gaps(self, gaps: list[SourceGap]) -> None:
        """Each gap once, in `mirror run`'s words; counted and recorded in the offset map
        before the query runs past it, or, with `on_source_gap: stop`, the run stops here."""
        report_gaps(self.flow, gaps, self.on_source_gap, (self.recorder, self.metrics))
        if gaps:
            self.recorder.flush()

    def _recreated_while_stopped(
        self, mappings: list[TopicMapping], ids: Mapping[str, str], group: Mapping[Partition, Any], known: set[str]
    ) -> set[str]:
        """Source topics deleted and created again while no run of the flow was (the group lost
        its offsets with them; the offset store tells, `mirror.engine.recreated`), reported."""
        if self._stopped is None:
            self._stopped = RecreatedTopics.of(self.flow, [self.recorder, self.metrics]) or False
        if not isinstance(self._stopped, RecreatedTopics):
            return set()
        parts = [(m.source, p) for m in mappings for p in range(m.partitions)]
        return self._stopped.check(ids, parts, {tp: group.get(tp, (None, None))[0] for tp in parts}, known)

    def decide(self, mappings: list[TopicMapping]) -> Starts:
        """The start of a query over `mappings`; the group and `commits` are set to it."""
        group = committed = self.source.group_offsets_with_metadata(self.group)
        source_ids = self.source.topic_ids(sorted({m.source for m in mappings}))
        recreated = {t for t, i in source_ids.items() if self.source_ids.get(t, i) != i}
        self.source_ids.update(source_ids)  # a topic deleted meanwhile keeps its old id: recreated later, it is noticed
        stopped = self._recreated_while_stopped(mappings, source_ids, group, recreated)
        recreated |= stopped
        if self.progress is not None:
            # Progress naming another source id: recreated while no query ran (this one's id
            # unknown to the run yet), told by the id the progress was committed with.
            committed, others = self.progress.committed(group, mappings, source_ids)
            recreated |= others
        target_ids = self.target.topic_ids(sorted({m.target for m in mappings}))
        self.commits.use(mappings, target_ids)
        parts = [(m.source, p) for m in mappings for p in range(m.partitions)]
        marks = self.source.watermarks([tp for tp in parts if tp in committed], committed_only=False)
        never = {tp: None for tp in parts if committed.get(tp, (None, None))[0] is None and tp[0] not in recreated}
        chosen = self.start_points.choose(list(never), {}, never) if self.start_points is not None else {}
        starts = plan_starts(
            mappings, committed, marks, target_ids, self.created, recreated, chosen, frozenset(stopped)
        )
        for warning in starts.warnings:
            log.warning("flow %s: %s", self.flow, warning)
        self._report_gaps(starts.gaps)
        if self.progress is not None:
            # The target committed past the group (a driver killed between a batch's
            # transactions and its group commit): the group catches up now, or a partition
            # with nothing left to copy would keep it behind for good.
            self.commits.start({tp: group[tp][0] for tp in starts.at if tp in group}, ())
            self.commits.commit(starts.at)
        if chosen:
            # Once chosen, for good: a restart resumes there (before `start`, which counts the
            # query's starts as committed already).
            self.commits.commit(chosen)
        self.commits.start(starts.at, starts.earliest)
        if starts.stale:
            try:
                self.target.delete_records(starts.stale)
            except MirrorError as exc:
                log.warning("flow %s: could not empty the recreated target partitions: %s", self.flow, exc)
        if starts.reset:
            # Rows of an earlier incarnation of the target would mistranslate; and the group is
            # rewound first, so a crash before the first commit cannot resume past records the
            # new topic never received.
            self.recorder.on_reset(self.flow, starts.reset)
            self.recorder.flush()
            if self.progress is not None:
                self.progress.reset(mappings, starts.reset)
            self.commits.rewind(starts.reset)
        self.created -= {m.target for m in mappings}
        return starts


def new_target(created: bool, metadata: str | None, topic_id: str | None) -> bool:
    """Whether a source partition must be mirrored from the beginning into its target topic:
    the run created that topic, or the group's commit is tagged with another topic id (the
    target was deleted and created again since; an untagged commit is trusted)."""
    if created:
        return True
    if not metadata or not metadata.startswith(TARGET_TOPIC_ID) or topic_id is None:
        return False
    return metadata[len(TARGET_TOPIC_ID) :] != topic_id


def starting_offset(committed: int | None, low: int | None, high: int | None) -> tuple[int, str | None]:
    """Where a query starts a source partition: the group's committed offset, or -2 (Spark's
    "earliest") with the reason when there is none or it is outside the log [low, high].

    Like `mirror run` (librdkafka's auto.offset.reset=earliest). Spark's own source would
    not: with failOnDataLoss=false it starts an offset past the end (the topic was deleted
    and created again) at *latest*, silently skipping every record written meanwhile.
    """
    if committed is None or committed < 0:
        return EARLIEST, None  # never committed: from the beginning, nothing to report
    if low is None or high is None:
        return committed, None
    if committed > high:
        why = f"the group's committed offset {committed} is past the log end {high} (was the topic recreated?)"
        return EARLIEST, why
    if committed < low:
        return (
            EARLIEST,
            f"the group's committed offset {committed} is before the log start {low} (deleted by retention)",
        )
    return committed, None


def empty_targets(target: Any, mappings: list[TopicMapping]) -> set[Partition]:
    """The source partitions whose target partition holds nothing now (its log start is its
    end, open transactions counted): their first batch has nothing on the target to skip,
    so its tasks need not read the target's tail. Read by the driver before the run's first
    query, while the session starts; unreadable: none (the tasks read the tails, as before)."""
    parts = {(m.target, p): (m.source, p) for m in mappings for p in range(m.partitions)}
    try:
        marks = target.watermarks(list(parts), committed_only=False)
    except MirrorError as exc:
        log.debug("the target partitions' watermarks are unreadable (%s); the first batch reads their tails", exc)
        return set()
    return {parts[tp] for tp, mark in marks.items() if tp in parts and mark.high <= mark.low}
