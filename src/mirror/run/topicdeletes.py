"""Target topics that follow their source topics into deletion (`sync_topic_deletes`, opt-in).

A source topic gone for `topic_delete_grace` takes its target topic with it, but only a
target topic the mirror itself created (the offset store keeps each one with its topic id:
`mirror.run.recorder`) and whose first and last records in every partition are all this
flow's copies of that source topic (`mirror.domain.topic_deletes.foreign_record`). Anything
else is kept, with one WARNING saying why. The guard matters because a deletion cannot be
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
from mirror.domain.topic_deletes import GoneTopics, Headers, foreign_record
from mirror.errors import MirrorError
from mirror.kafka.admin import FlowAdmins
from mirror.kafka.reader import read_headers
from mirror.store.base import CreatedTopic, CreatedTopicStore

log = logging.getLogger(__name__)

SAMPLE = 100  # records read at each end of every partition of a target topic before it is deleted


class TopicDeleter:
    """One flow's deletion loop: `tick()` once, or `run(stop)` until the event is set."""

    def __init__(
        self,
        config: Config,
        flow: FlowConfig,
        store: CreatedTopicStore,
        *,
        admins: FlowAdmins | None = None,
        clock: Callable[[], float] = time.monotonic,
        reader: Callable[..., Sequence[tuple[int, Headers]]] = read_headers,
    ) -> None:
        self.config = config
        self.flow = flow
        self.store = store
        self.admins = admins or FlowAdmins(config, flow)
        self.clock = clock
        self._read = reader  # (cluster name, cluster, topic, partition, start, end, timeout) -> [(offset, headers)]
        self.gone = GoneTopics(flow.topic_delete_grace)
        self.kept: dict[str, str] = {}  # target topic -> why it is kept (warned once)
        self.deleted: list[str] = []

    def tick(self) -> list[str]:
        """One round; returns the target topics deleted in it."""
        created = {c.source: c for c in self.store.created_topics(self.flow.name)}
        if not created:
            return []
        present = set(self.admins.source.topics())
        due, back, new = self.gone.observe(present, created, self.clock())
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
        existing = self.admins.target.topics()
        out = []
        for source in due:
            c = created[source]
            if c.target not in existing:
                self._forget(c)  # deleted already (by another worker, or by hand)
                continue
            why = self._why_keep(c, existing[c.target])
            if why is not None:
                if self.kept.get(c.target) != why:
                    log.warning(
                        "flow %s: source topic %s is gone, but target topic %s is kept: %s",
                        self.flow.name,
                        source,
                        c.target,
                        why,
                    )
                self.kept[c.target] = why
                continue
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

    def _forget(self, c: CreatedTopic) -> None:
        self.store.forget_created_topic(self.flow.name, c.target)
        self.gone.forget(c.source)
        self.kept.pop(c.target, None)

    def _why_keep(self, c: CreatedTopic, partitions: int) -> str | None:
        """Why `c.target` must not be deleted, or None when it is the mirror's alone."""
        target = self.admins.target
        if c.topic_id:
            now_id = target.topic_ids([c.target]).get(c.target)
            if now_id is not None and now_id != c.topic_id:
                self._forget(c)
                return "it was deleted and created again by someone else since the mirror created it"
        if not self.flow.provenance_headers:
            return "provenance_headers is off for this flow, so the mirror cannot tell its copies from other records"
        cluster = self.config.cluster(self.flow.target)
        marks = target.watermarks([(c.target, p) for p in range(partitions)], committed_only=False)
        for (topic, p), wm in sorted(marks.items()):
            head_end = min(wm.low + SAMPLE, wm.high)
            ranges = [(wm.low, head_end), (max(head_end, wm.high - SAMPLE), wm.high)]
            for start, end in ranges:
                records = self._read(self.flow.target, cluster, topic, p, start, end, timeout=cluster.timeout)
                foreign = foreign_record(records, self.flow.source, c.source)
                if foreign is not None:
                    offset, reason = foreign
                    return f"the record at {topic}[{p}]@{offset} was not written by the mirror ({reason})"
        return None

    def run(self, stop: threading.Event) -> None:
        """Tick every `sync_topic_configs_interval` until `stop` is set; failures are logged, never fatal."""
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
