"""The flow's group commits from the Spark driver.

Invariant: the group only moves forward from where the running query started each partition
(or from what it committed since), and every commit is tagged with the id of the partition's
target topic, the tag `mirror run` writes too (`new_target` reads it back at the next start).
A partition the query starts from the beginning forgets its old position, so an earlier
incarnation's offsets never hold this query's commits back.

A commit the source cannot take right now (its group coordinator moving in a rolling restart:
`ClusterUnavailable`) is owed, not lost: the next commit (the next batch's, or the query's
progress a second later) sends it again with whatever moved since, and `settle` insists on it
before a run ends caught up. Skipping a commit loses nothing: Spark's checkpoint and the
target-tail skip rule make the records after the group's position exact on a restart.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mirror.domain.topics import TopicMapping
from mirror.errors import AuthenticationFailed, ClusterUnavailable, MirrorError

log = logging.getLogger(__name__)

TARGET_TOPIC_ID = "target-topic-id="  # group commit metadata, the same tag `mirror run` writes (engine.assignment.TID)

Partition = tuple[str, int]

RETRY_WAIT = 0.5  # between attempts of a commit the source refused, while `settle` insists


class GroupCommits:
    """Commits a flow's consumer group on the source, tagged, never backwards within a query."""

    def __init__(self, flow: str, group: str, source: Any, target: Any, stop: threading.Event | None = None) -> None:
        self.flow = flow
        self.stop = stop or threading.Event()  # the run's: set, a refused commit is no longer insisted on
        self.group = group
        self.source = source
        self.target = target
        self.target_ids: dict[str, str] = {}  # target topic -> id, as the query started (and learnt since)
        self._targets: dict[str, str] = {}  # source topic -> target topic
        self._committed: dict[Partition, int] = {}
        self._owed: dict[Partition, int] = {}  # positions a refused commit left to the next one
        self._refused: ClusterUnavailable | None = None  # why, while the source refuses commits
        self._lock = threading.Lock()

    @property
    def positions(self) -> dict[Partition, int]:
        """Where the group stands per partition, as this run knows it."""
        return dict(self._committed)

    def use(self, mappings: list[TopicMapping], target_ids: Mapping[str, str]) -> None:
        """A new query over `mappings`, with its target topics' ids read as it starts."""
        self._targets = {m.source: m.target for m in mappings}
        self.target_ids = dict(target_ids)

    def start(self, at: Mapping[Partition, int], earliest: Iterable[Partition]) -> None:
        """The query starts `at` these offsets, and `earliest` partitions from the beginning.

        A position still owed stays owed where it is not behind the start (exactly_once
        starts at the target's progress, and the group's catch-up to it may have been
        refused); the query mirrors again from its start anything before it."""
        self._committed.update(at)
        earliest = set(earliest)
        for tp in earliest:
            self._committed.pop(tp, None)
        # Only a partition resuming `at` a position keeps what it owes: any other (from the
        # beginning, or reset for a new target or re-created source topic) starts a new
        # incarnation, where an old position would skip records the target never received.
        self._owed = {tp: o for tp, o in self._owed.items() if tp in at and tp not in earliest and o >= at[tp]}

    def rewind(self, partitions: list[Partition]) -> None:
        """The group back to offset 0 of `partitions` (their target topic is new), before the
        query starts: retried while the source refuses it for now (`_insist`)."""
        offsets = dict.fromkeys(partitions, 0)
        self._insist(lambda: self.source.alter_group_offsets(self.group, offsets, metadata=self.tags(partitions)))
        for tp in partitions:
            self._committed[tp] = 0
            self._owed.pop(tp, None)  # the old incarnation's: never into the new one

    def tags(self, partitions: Iterable[Partition]) -> dict[Partition, str]:
        """Commit metadata naming the id of each partition's target topic (see `new_target`)."""
        missing = sorted({t for t in self._targets.values() if t not in self.target_ids})
        if missing:  # a topic created a moment ago may not be describable yet
            try:
                self.target_ids.update(self.target.topic_ids(missing))
            except MirrorError as exc:
                log.debug("flow %s: target topic ids: %s", self.flow, exc)
        return {
            tp: f"{TARGET_TOPIC_ID}{self.target_ids[self._targets[tp[0]]]}"
            for tp in partitions
            if self.target_ids.get(self._targets.get(tp[0], ""))
        }

    def commit(self, positions: Mapping[Partition, int]) -> None:
        """Commit the partitions whose position is ahead of the group's, with any still owed.

        The source refusing it for now (`ClusterUnavailable`: a moving coordinator, no
        answer) leaves them owed to the next call, with one WARNING per outage; any other
        refusal (a missing grant, a group with members) is raised."""
        with self._lock:
            for tp, o in positions.items():
                if o > self._committed.get(tp, -1) and o > self._owed.get(tp, -1):
                    self._owed[tp] = o
            if not self._owed:
                return
            ahead = dict(self._owed)
            try:
                self.source.alter_group_offsets(self.group, ahead, metadata=self.tags(ahead))
            except AuthenticationFailed:
                raise
            except ClusterUnavailable as exc:
                if self._refused is None:
                    log.warning(
                        "flow %s: the source refused the commit of group %s for now (%s); it is sent again with "
                        "the next one",
                        self.flow,
                        self.group,
                        exc,
                    )
                self._refused = exc
                return
            self._committed.update(ahead)
            self._owed.clear()
            if self._refused is not None:
                log.info("flow %s: the source takes the commits of group %s again", self.flow, self.group)
                self._refused = None

    def settle(self) -> bool:
        """Commit what is still owed, retrying for up to the source's timeout: the run ends
        right after (`--until-caught-up`), and must not end with the group silently behind.
        Raises the source's last refusal if it never took the commit; False when the run was
        stopped meanwhile (not caught up: the next run resumes from the group)."""

        def owed_sent() -> None:
            self.commit({})
            if self._owed and self._refused is not None:
                raise self._refused

        try:
            self._insist(owed_sent)
            return True
        except AuthenticationFailed:
            raise
        except ClusterUnavailable as exc:
            if self.stop.is_set():
                return False
            raise ClusterUnavailable(
                f"flow {self.flow}: group {self.group!r} is behind what was mirrored: {exc.message}",
                hint="nothing is lost: the next run resumes from the group; check the source cluster",
            ) from None

    def _insist(self, call: Callable[[], None]) -> None:
        """`call()` again while the source refuses it for now, for up to the source's timeout
        (not once the run is stopped: its last refusal is raised then)."""
        deadline = time.monotonic() + self.source.timeout
        while True:
            try:
                return call()
            except AuthenticationFailed:
                raise
            except ClusterUnavailable:
                if time.monotonic() >= deadline or self.stop.wait(RETRY_WAIT):
                    raise

    def commit_progress(self, progress: Mapping[str, Any] | None) -> None:
        """Commit the end offsets of the last completed batch (a query's `lastProgress`).

        Each batch commits its range end itself (`Batches.finish`, from Spark's offset log);
        this is the same end as the query reports it, for a batch whose offset log could not
        be read: a range may end past its last record (transaction markers, aborted records).
        """
        if not progress:
            return
        ends: dict[Partition, int] = {}
        for src in progress.get("sources", []):
            raw = src.get("endOffset")
            end = json.loads(raw) if isinstance(raw, str) else raw
            for topic, parts in (end or {}).items():
                for p, offset in parts.items():
                    ends[(topic, int(p))] = int(offset)
        self.commit(ends)
