"""Target topics that follow their source topics into deletion (`sync_topic_deletes`, opt-in).

A source topic gone for `topic_delete_grace` takes its target topic with it, but only a
target topic the mirror itself created (the offset store keeps each one with its topic id
and the source's cluster id: `mirror.run.recorder`), that still has that id when asked
again right before the deletion, and whose records read are all this flow's copies of that
source topic (`mirror.domain.topic_deletes.foreign_record`). What is read: every record of
a partition of up to `READ_WHOLE` records; of a larger one, only its first and last
`SAMPLE` records, so a foreign record between those goes unseen. A topic whose id was not
known at its creation is never deleted (someone else's topic made again under its name
could not be told from it). Anything else is kept, with one WARNING saying why.

Nothing at all is deleted while the source looks like another cluster: its cluster id
differs from the one recorded with the topics, or it lost every topic of the flow and the
canary topic at once (`SourceWipe`). The guard matters because a deletion cannot be
undone: MirrorMaker 2 never deletes for that reason, WarpStream Orbit mirrors deletions
outright; here the DR copy of a topic deleted by mistake survives its grace, and a topic
that holds somebody else's records survives for good.

Why the offset store rather than the records alone: a topic created by hand before the
mirror wrote to it holds only mirrored records too, yet it is its owner's (configs, ACLs,
consumers); and the id tells the mirror's topic from one created later under its name.
Topics created before this was recorded, or by the Spark engine, are never deleted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from mirror.config import Config, FlowConfig
from mirror.domain.topic_deletes import GoneTopics, Headers, SourceWipe, foreign_record
from mirror.domain.topics import match_topics
from mirror.errors import MirrorError
from mirror.kafka.admin import FlowAdmins
from mirror.kafka.reader import read_headers
from mirror.store.base import CreatedTopic, CreatedTopicStore

log = logging.getLogger(__name__)

READ_WHOLE = 5000  # a target partition of at most this many offsets is read whole before its topic is deleted
SAMPLE = 100  # records read at each end of a larger one (the records between are not read)
LOCK_WAIT = 1.0  # how often a round waiting for the deleter it replaces looks at its own stop


class _Stopped(Exception):
    """The flow stopped during a round: the round ends, deleting nothing more."""


class TopicDeleter:
    """One flow's deletion loop: `tick()` once, or `run(stop)` until the event is set.

    Invariants: nothing is deleted once the flow's stop is set (checked before every read and
    every deletion); two deleters of one flow in this process never run a round at once (a
    flow restarted by a reload shares its `lock` with the deleter it replaces, which may still
    be finishing a request); and a topic is deleted only right after its id was asked again
    and found to be the one recorded when the mirror created it.
    """

    def __init__(
        self,
        config: Config,
        flow: FlowConfig,
        store: CreatedTopicStore,
        *,
        admins: FlowAdmins | None = None,
        clock: Callable[[], float] = time.monotonic,
        reader: Callable[..., Sequence[tuple[int, Headers]]] = read_headers,
        lock: threading.Lock | None = None,
    ) -> None:
        self.config = config
        self.flow = flow
        self.store = store
        self.admins = admins or FlowAdmins(config, flow)
        self.clock = clock
        self._read = reader  # (cluster name, cluster, topic, partition, start, end, timeout) -> [(offset, headers)]
        self._lock = lock or threading.Lock()
        self._stop = threading.Event()  # never set, unless `run` is given the flow's
        self.gone = GoneTopics(flow.topic_delete_grace)
        self.wipe = SourceWipe()
        self.kept: dict[str, str] = {}  # target topic -> why it is kept (warned once)
        self.doubt: str | None = None  # why the whole source is in doubt (warned once)
        self.deleted: list[str] = []

    def tick(self) -> list[str]:
        """One round; returns the target topics deleted in it."""
        while not self._lock.acquire(timeout=LOCK_WAIT):
            if self._stop.is_set():
                return []
        try:
            return self._round()
        except _Stopped:
            return []
        finally:
            self._lock.release()

    def _round(self) -> list[str]:
        created = {c.source: c for c in self.store.created_topics(self.flow.name)}
        if not created:
            return []
        listing = self.admins.source.topics()
        wiped = self._looks_wiped(listing, created)
        due, back, new = self.gone.observe(set(listing), created, self.clock())
        self._log_changes(created, back, new)
        if due:
            # Left out of a listing is not yet gone (a topic whose partitions wait for
            # leaders is listed with an error): gone is what the source, asked by name, does not know.
            for source in self.admins.source.topic_ids(due):
                self.gone.forget(source)
                log.info(
                    "flow %s: source topic %s is still there (not listed for a while); kept", self.flow.name, source
                )
            due = [s for s in due if s in self.gone.since]
        if not due:
            return []
        doubt = (
            "every topic of the flow and the canary topic "
            f"{self.config.canary.topic} vanished from it at once (a source rebuilt empty looks like this); "
            "nothing is deleted until mirror run restarts"
            if wiped
            else self._other_cluster([created[s] for s in due])
        )
        if doubt is not None:
            if doubt != self.doubt:
                log.warning(
                    "flow %s: %d target topic(s) whose source topics are gone are kept: the source %s: %s",
                    self.flow.name,
                    len(due),
                    self.flow.source,
                    doubt,
                )
            self.doubt = doubt
            return []
        self.doubt = None
        existing = self.admins.target.topics()
        out = []
        for source in due:
            c = created[source]
            if c.target not in existing:
                self._forget(c)  # deleted already (by another worker, or by hand)
                continue
            why = self._why_keep(c, existing[c.target])
            if why is not None:
                self._keep(c, why)
                continue
            self._check_stop()
            self.admins.target.delete_topics([c.target])
            self._forget(c)
            out.append(c.target)
            log.warning(
                "flow %s: deleted target topic %s: its source topic %s has been gone for over %gs (sync_topic_deletes)",
                self.flow.name,
                c.target,
                source,
                self.flow.topic_delete_grace,
            )
        self.deleted += out
        return out

    def _log_changes(self, created: dict[str, CreatedTopic], back: Sequence[str], new: Sequence[str]) -> None:
        for source in new:
            log.info(
                "flow %s: source topic %s is gone; target topic %s is deleted after topic_delete_grace (%gs) "
                "unless it comes back",
                self.flow.name,
                source,
                created[source].target,
                self.flow.topic_delete_grace,
            )
        for source in back:
            log.info(
                "flow %s: source topic %s is back within topic_delete_grace; target topic %s is kept",
                self.flow.name,
                source,
                created[source].target,
            )

    def _looks_wiped(self, listing: dict[str, int], created: dict[str, CreatedTopic]) -> bool:
        """Has the source lost every topic of the flow and the canary topic at once (`SourceWipe`)?"""
        canary = self.config.canary.topic
        canary_listed = canary in listing
        listed = any(m.source != canary for m in match_topics(self.config, self.flow, listing))
        if self.wipe.canary_seen and not (canary_listed or listed or self.wipe.wiped):
            # As for single topics: left out of a listing is not gone; asked by name first.
            known = set(self.admins.source.topic_ids(sorted({*created, canary})))
            canary_listed, listed = canary in known, bool(known - {canary})
        return self.wipe.observe(canary_listed, listed)

    def _other_cluster(self, due: Sequence[CreatedTopic]) -> str | None:
        """Why the source is not the cluster these topics came from, if it is not. Topics
        recorded without the source's cluster id are not judged by it."""
        recorded = {c.source_cluster_id for c in due if c.source_cluster_id}
        if not recorded:
            return None
        now = self.admins.source.cluster_id()
        if recorded == {now}:
            return None
        return (
            f"its cluster id is {now!r} now, and the topics were mirrored from {', '.join(sorted(recorded))} "
            "(a cluster rebuilt or replaced at the same address); delete the target topics by hand if they should go"
        )

    def _keep(self, c: CreatedTopic, why: str) -> None:
        if self.kept.get(c.target) != why:
            log.warning(
                "flow %s: source topic %s is gone, but target topic %s is kept: %s",
                self.flow.name,
                c.source,
                c.target,
                why,
            )
        self.kept[c.target] = why

    def _forget(self, c: CreatedTopic) -> None:
        """Forget the record of `c`, unless it was recorded again since (another worker made
        the topic again for a re-created source): that record is of another topic."""
        if any(r.target == c.target and r != c for r in self.store.created_topics(self.flow.name)):
            self.gone.forget(c.source)
            return
        self.store.forget_created_topic(self.flow.name, c.target)
        self.gone.forget(c.source)
        self.kept.pop(c.target, None)

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise _Stopped

    def _not_the_mirrors(self, c: CreatedTopic) -> str | None:
        """Why the topic now under `c.target` is not the one the mirror created, if it is not."""
        if not c.topic_id:
            return (
                "its topic id was not known when the mirror created it, so a topic created again under its name by "
                "someone else cannot be told from the mirror's; delete it by hand if it should go"
            )
        now_id = self.admins.target.topic_ids([c.target]).get(c.target)
        if now_id is not None and now_id != c.topic_id:
            self._forget(c)
            return "it was deleted and created again by someone else since the mirror created it"
        return None

    def _why_keep(self, c: CreatedTopic, partitions: int) -> str | None:
        """Why `c.target` must not be deleted, or None when it is the mirror's alone.

        The id is asked again after the records were read, right before the deletion: reading
        takes seconds per partition, and a topic deleted and created again by someone else
        meanwhile must not be deleted. What remains is the time between that answer and the
        DeleteTopics request (milliseconds): Kafka deletes by name only through librdkafka,
        which has no deletion by topic id (KIP-516), so a topic made again within it would go."""
        why = self._not_the_mirrors(c)
        if why is not None:
            return why
        if not self.flow.provenance_headers:
            return "provenance_headers is off for this flow, so the mirror cannot tell its copies from other records"
        why = self._foreign_record(c, partitions)
        if why is not None:
            return why
        self._check_stop()
        return self._not_the_mirrors(c)

    def _foreign_record(self, c: CreatedTopic, partitions: int) -> str | None:
        """The first record of `c.target` found not to be this flow's copy of `c.source`:
        every record of a partition of at most `READ_WHOLE` records, else its first and last
        `SAMPLE` records."""
        cluster = self.config.cluster(self.flow.target)
        marks = self.admins.target.watermarks([(c.target, p) for p in range(partitions)], committed_only=False)
        for (topic, p), wm in sorted(marks.items()):
            if wm.high - wm.low <= READ_WHOLE:
                ranges = [(wm.low, wm.high)]
            else:
                ranges = [(wm.low, wm.low + SAMPLE), (wm.high - SAMPLE, wm.high)]
            for start, end in ranges:
                self._check_stop()
                records = self._read(self.flow.target, cluster, topic, p, start, end, timeout=cluster.timeout)
                foreign = foreign_record(records, self.flow.source, c.source)
                if foreign is not None:
                    offset, reason = foreign
                    return f"the record at {topic}[{p}]@{offset} was not written by the mirror ({reason})"
        return None

    def run(self, stop: threading.Event) -> None:
        """Tick every `sync_topic_configs_interval` until `stop` is set; failures are logged, never fatal."""
        self._stop = stop
        interval = self.flow.sync_topic_configs_interval
        last_error = None
        while not stop.wait(interval):
            try:
                self.tick()
                last_error = None
            except MirrorError as exc:
                if str(exc) != last_error:
                    log.warning(
                        "flow %s: topic deletion check skipped (retrying every %gs): %s", self.flow.name, interval, exc
                    )
                last_error = str(exc)
            except Exception:
                log.exception("flow %s: topic deletion check failed unexpectedly", self.flow.name)
                last_error = "unexpected error"
