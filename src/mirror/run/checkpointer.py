"""Group checkpoints: where the flow's consumer groups are on the source, translated.

Every `checkpoint_interval` the checkpointer reads the committed source offsets of the
groups matching the flow's `groups` patterns, translates each with the offset map and the
target's end offsets, and stores a `Checkpoint` with the time it was taken. When the source
is gone, the newest checkpoints are what an unplanned failover starts from: a group then
re-reads at most what it consumed since the last checkpoint.

It also stores the source end offsets it saw, so a plan made without the source can still
say how many records at most never reached the target.

With `sync_group_offsets`, translated offsets are also committed on the target, but only
for groups with no active members there (an active consumer owns its offsets), only
forwards (a consumer that already moved on the target is never rewound), and only where the
target's offset is one the sync wrote itself (tagged `mirror.sync` in the commit metadata)
or there is none: an offset set by `failover apply`/`import` or by the group's own
consumers on the target is never moved.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mirror.config import Config, FlowConfig
from mirror.domain.acls import Resource, resource_for
from mirror.domain.naming import target_topic
from mirror.domain.offsetmap import Checkpoint, OffsetSync, translate
from mirror.domain.topics import match_topics
from mirror.errors import MirrorError
from mirror.kafka import Admin
from mirror.kafka.admin import FlowAdmins
from mirror.metrics import MirrorMetrics
from mirror.store import FullOffsetStore, sync_tips, sync_window, sync_windows  # noqa: F401  (sync_window: re-exported for tests)

log = logging.getLogger(__name__)

# Commit metadata of the offsets the sync writes on the target: the sync only ever moves
# offsets that carry it (or partitions with none), never one a person or consumer set.
SYNC_METADATA = "mirror.sync"


@dataclass
class TickResult:
    checkpoints: list[Checkpoint] = field(default_factory=list)
    synced_groups: list[str] = field(default_factory=list)
    skipped_active: list[str] = field(default_factory=list)
    # Partitions the sync would have moved forwards but left alone because someone else set
    # the target's offset (group -> target partitions): made visible, never silent.
    held: dict[str, list[tuple[str, int]]] = field(default_factory=dict)


def matching_groups(patterns: list[str], groups: list[str], exclude: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    compiled = [re.compile(p) for p in patterns]
    return [g for g in groups if g not in exclude and any(p.fullmatch(g) for p in compiled)]


class GroupCheckpointer:
    """One flow's checkpoint loop: `tick()` once, or `run(stop)` until the event is set."""

    def __init__(
        self,
        config: Config,
        flow: FlowConfig,
        store: FullOffsetStore,
        *,
        clock: Callable[[], float] = time.time,
        source: Admin | None = None,
        target: Admin | None = None,
        metrics: MirrorMetrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.flow = flow
        self.store = store
        self._clock = clock
        self.admins = FlowAdmins(config, flow, source=source, target=target)
        self.last_tick_ms: int | None = None
        self.last_error: str | None = None
        self._held: dict[str, list[tuple[str, int]]] = {}  # logged once per change, not every tick

    def run(self, stop: threading.Event, *, first_after: float | None = None) -> None:
        """Tick every `checkpoint_interval` until `stop` is set; errors are logged, not fatal.

        The first tick comes `first_after` seconds in (default: one interval), not at once: a
        flow's start is its busiest moment (joining, reading a backlog) and a tick takes the
        interpreter from it (listings, offsets, admin clients: about a second at 10,000
        partitions), while the store still holds the previous run's checkpoints."""
        if not self.flow.groups:
            return
        if stop.wait(self.flow.checkpoint_interval if first_after is None else first_after):
            return
        while not stop.is_set():
            try:
                self.tick()
                if self.last_error is not None:
                    log.warning("flow %s: checkpoints are being stored again", self.flow.name)
                self.last_error = None
            except MirrorError as exc:
                if str(exc) != self.last_error:
                    log.warning(
                        "flow %s: checkpoint skipped (retrying every %gs): %s",
                        self.flow.name,
                        self.flow.checkpoint_interval,
                        exc,
                    )
                self.last_error = str(exc)
            except Exception:
                log.exception("flow %s: checkpoint failed unexpectedly", self.flow.name)
                self.last_error = "unexpected error"
                if self.metrics is not None:
                    self.metrics.unexpected.labels("checkpointer").inc()
            stop.wait(self.flow.checkpoint_interval)

    def tick(self) -> TickResult:
        flow = self.flow
        result = TickResult()
        now_ms = int(self._clock() * 1000)
        mappings = match_topics(self.config, flow, self.admins.source.topics())
        if not mappings:
            return result
        names = {m.source: m.target for m in mappings}
        source_parts = [(m.source, p) for m in mappings for p in range(m.partitions)]
        listed = self.admins.source.list_groups()
        groups = matching_groups(flow.groups, listed, exclude={flow.group_id})
        # Listing shows only the groups the principal may Describe: a group named literally is
        # asked for by name, so a missing grant fails the tick instead of skipping the group.
        groups += [
            p
            for p in flow.groups
            if resource_for("group", p) == (Resource("group", p), True) and p not in listed and p != flow.group_id
        ]
        target_topics = self.admins.target.topics()
        # The target's ends first, the source's after: every copy on the target is then of a
        # record below the source end, which translating a partition with no offset-map row
        # relies on (a group at the source end has read everything the target holds of it).
        # An earlier target end only ever clamps a translation lower (re-read, not skip).
        tparts = [(names[t], p) for t, p in source_parts if names[t] in target_topics]
        ends = self.admins.target.watermarks(tparts) if tparts and groups else {}
        source_marks = self.admins.source.watermarks(source_parts)
        self.store.write_source_ends(flow.name, {k: w.high for k, w in source_marks.items()}, now_ms)

        tips: dict[tuple[str, int], OffsetSync | None] = {}
        mirrored = [k for k in source_parts if names[k[0]] in target_topics]
        for group in groups:
            # Only the partitions a checkpoint can be written for, asked for by name (in
            # chunks: mirror.kafka.offsets).
            offsets = self.admins.source.group_offsets(group, mirrored)
            if not offsets:
                continue
            # The tips before the rows (a store write landing between the reads then only adds
            # rows), the rows of all partitions in one bulk read.
            tips.update(sync_tips(self.store, flow.name, [k for k in offsets if k not in tips]))
            windows = sync_windows(self.store, flow.name, offsets)
            rows = []
            for (topic, part), position in sorted(offsets.items()):
                tkey = (names[topic], part)
                if tkey not in ends:
                    continue
                # Partitions nothing was mirrored from get a checkpoint too (`translate`
                # handles them): without one a failed-over group falls back to
                # auto.offset.reset there.
                src = source_marks.get((topic, part))
                tr = translate(
                    windows[(topic, part)].rows,
                    position,
                    ends[tkey].high,
                    tip=tips[(topic, part)],
                    target_start=ends[tkey].low,
                    source_log=(src.low, src.high) if src else None,
                )
                rows.append(Checkpoint(group, topic, part, position, tr.target_offset, now_ms))
            self.store.write_checkpoints(flow.name, rows)
            result.checkpoints += rows
            if flow.sync_group_offsets and rows:
                self._sync_group(group, rows, result)
        self.last_tick_ms = now_ms
        return result

    def _sync_group(self, group: str, rows: list[Checkpoint], result: TickResult) -> None:
        if self.admins.target.group_members(group) > 0:
            result.skipped_active.append(group)
            return
        keys = [(target_topic(c.topic, self.flow.source, self.flow.rename), c.partition) for c in rows]
        current = self.admins.target.group_offsets_with_metadata(group, keys)
        todo = {}
        held = []
        for c, key in zip(rows, keys):
            offset, metadata = current.get(key, (-1, None))
            if offset >= 0 and metadata != SYNC_METADATA:
                # Someone else set this offset: `failover apply`/`import` or the group's own
                # consumers. It is theirs; moving it (even forwards) could skip what a failover
                # just rewound to replay.
                if offset < c.target_offset:
                    held.append(key)
                continue
            if offset < c.target_offset:
                todo[key] = c.target_offset
        self._report_held(group, sorted(held), result)
        if not todo:
            return
        try:
            self.admins.target.alter_group_offsets(group, todo, metadata=SYNC_METADATA)
        except MirrorError as exc:
            # Most likely a consumer joined between the check and the write: its offsets win.
            log.info("flow %s: not syncing offsets of group %s on %s: %s", self.flow.name, group, self.flow.target, exc)
            return
        result.synced_groups.append(group)

    def _report_held(self, group: str, held: list[tuple[str, int]], result: TickResult) -> None:
        if held:
            result.held[group] = held
        if held == self._held.get(group, []):
            return
        self._held[group] = held
        if held:
            log.warning(
                "flow %s: not syncing group %s on %s for %d partition(s) (first %s[%d]): their offsets there were set "
                "by "
                "someone else (failover apply/import or the group's own consumers), and the sync never moves those; "
                "delete the group's offsets on %s to hand them back to the sync",
                self.flow.name,
                group,
                self.flow.target,
                len(held),
                held[0][0],
                held[0][1],
                self.flow.target,
            )
        else:
            log.info(
                "flow %s: group %s on %s is synced on every partition again", self.flow.name, group, self.flow.target
            )
