"""The one module that talks to confluent-kafka.

It builds consumers, producers and admin clients from a cluster's config (security
settings passed through untouched, secrets never logged), and turns `KafkaError`s and
librdkafka's `None`-on-timeout into this project's exceptions, so the rest of the code
never imports `confluent_kafka` and never checks for `None`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import confluent_kafka
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from .config import ClusterConfig, redact
from .errors import ClusterUnavailable, KafkaOperationError

log = logging.getLogger(__name__)

__all__ = [
    "Admin",
    "Consumer",
    "KafkaError",
    "KafkaException",
    "Message",
    "Producer",
    "TopicPartition",
    "Watermarks",
    "client_settings",
    "is_retriable",
    "make_consumer",
    "make_producer",
    "raise_for",
]

OFFSET_BEGINNING = confluent_kafka.OFFSET_BEGINNING
OFFSET_END = confluent_kafka.OFFSET_END
OFFSET_INVALID = confluent_kafka.OFFSET_INVALID

# Error codes meaning "the cluster is not there (yet)", as opposed to "the request is wrong".
_UNREACHABLE = {
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
}


class _LibrdkafkaLog:
    """librdkafka's log lines (connection refused, …) go to Python logging at DEBUG.

    librdkafka would otherwise print them straight to stderr, once per retry, burying the
    one-line error the user needs; the project reports reachability itself.
    """

    def __init__(self, cluster: str) -> None:
        self._log = logging.getLogger(f"mirror.librdkafka.{cluster}")

    def log(self, level: int, fmt: str, *args: Any) -> None:
        self._log.debug(fmt, *args)


def client_settings(name: str, cluster: ClusterConfig, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {"bootstrap.servers": cluster.bootstrap, **cluster.client, **(extra or {})}
    log.debug("client settings for %s: %s", name, redact(settings))
    settings["logger"] = _LibrdkafkaLog(name)
    return settings


def make_consumer(name: str, cluster: ClusterConfig, settings: Mapping[str, Any]) -> Consumer:
    return Consumer(client_settings(name, cluster, settings))


def make_producer(name: str, cluster: ClusterConfig, settings: Mapping[str, Any]) -> Producer:
    return Producer(client_settings(name, cluster, settings))


def is_retriable(err: KafkaError) -> bool:
    return bool(err.retriable()) or err.code() in _UNREACHABLE


def raise_for(cluster: str, what: str, exc: BaseException, timeout: float | None = None) -> None:
    """Re-raise a confluent-kafka failure as the project's exception."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    if isinstance(err, KafkaError):
        if err.code() in _UNREACHABLE:
            within = f" within {timeout:g}s" if timeout else ""
            raise ClusterUnavailable(
                f"cluster {cluster!r} did not answer{within} while trying to {what}",
                hint="check that its brokers are up and its bootstrap address is right",
            ) from exc
        raise KafkaOperationError(f"cluster {cluster!r}: cannot {what}: {err.str()}", code=err.name()) from exc
    raise KafkaOperationError(f"cluster {cluster!r}: cannot {what}: {exc}") from exc


@dataclass(frozen=True)
class Watermarks:
    low: int
    high: int


class Admin:
    """Admin requests against one cluster, each bounded by the cluster's timeout."""

    def __init__(self, name: str, cluster: ClusterConfig) -> None:
        self.name = name
        self.timeout = cluster.timeout
        self._client = AdminClient(client_settings(name, cluster))

    # -- plumbing
    def _result(self, what: str, future: Any) -> Any:
        try:
            return future.result(timeout=self.timeout)
        except KafkaException as exc:
            raise_for(self.name, what, exc, self.timeout)
        except TimeoutError as exc:
            raise ClusterUnavailable(
                f"cluster {self.name!r} did not answer within {self.timeout:g}s while trying to {what}",
                hint="check that its brokers are up and its bootstrap address is right",
            ) from exc
        except Exception as exc:
            if type(exc).__name__ == "TimeoutError" or "timed out" in str(exc).lower():
                raise ClusterUnavailable(f"cluster {self.name!r} did not answer within {self.timeout:g}s while trying to {what}") from exc
            raise

    # -- topics
    def topics(self) -> dict[str, int]:
        """Topic name -> partition count (internal topics included; callers filter)."""
        try:
            md = self._client.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise_for(self.name, "list topics", exc, self.timeout)
        return {t.topic: len(t.partitions) for t in md.topics.values() if t.error is None}

    def topic_details(self) -> dict[str, tuple[int, int]]:
        """Topic name -> (partition count, replication factor)."""
        try:
            md = self._client.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise_for(self.name, "list topics", exc, self.timeout)
        out = {}
        for t in md.topics.values():
            if t.error is None and t.partitions:
                out[t.topic] = (len(t.partitions), max(len(p.replicas) for p in t.partitions.values()))
        return out

    def broker_count(self) -> int:
        try:
            return len(self._client.list_topics(timeout=self.timeout).brokers)
        except KafkaException as exc:
            raise_for(self.name, "describe the cluster", exc, self.timeout)
        return 0  # unreachable; raise_for always raises

    def create_topic(self, topic: str, partitions: int, replication: int = -1, config: Mapping[str, str] | None = None) -> bool:
        """Create a topic; False if it already existed."""
        fut = self._client.create_topics([NewTopic(topic, partitions, replication, config=dict(config or {}))], operation_timeout=self.timeout)[topic]
        try:
            fut.result(timeout=self.timeout)
            return True
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            raise_for(self.name, f"create topic {topic!r}", exc, self.timeout)
        return False

    def delete_topics(self, topics: Iterable[str]) -> None:
        topics = list(topics)
        if not topics:
            return
        for topic, fut in self._client.delete_topics(topics, operation_timeout=self.timeout).items():
            try:
                fut.result(timeout=self.timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise_for(self.name, f"delete topic {topic!r}", exc, self.timeout)

    def create_partitions(self, topic: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        fut = self._client.create_partitions([NewPartitions(topic, total)], operation_timeout=self.timeout)[topic]
        self._result(f"grow {topic!r} to {total} partitions", fut)

    def topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """Non-default configs of each topic (what a user or the cluster set on purpose)."""
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        if not resources:
            return {}
        out: dict[str, dict[str, str]] = {}
        for res, fut in self._client.describe_configs(resources, request_timeout=self.timeout).items():
            entries = self._result(f"describe configs of {res.name!r}", fut)
            # Only what was set on the topic itself: broker-wide settings belong to each cluster.
            out[res.name] = {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and e.value is not None}
        return out

    # -- offsets
    def watermarks(self, partitions: Iterable[tuple[str, int]], *, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        """Low and high offsets per partition.

        With `committed_only` the high mark is the last stable offset, i.e. what a
        read_committed consumer (the mirror) can reach; open transactions are not "lag".
        """
        parts = [TopicPartition(t, p) for t, p in partitions]
        if not parts:
            return {}
        iso = IsolationLevel.READ_COMMITTED if committed_only else IsolationLevel.READ_UNCOMMITTED
        lows = self._list_offsets(parts, OffsetSpec.earliest(), iso)
        highs = self._list_offsets(parts, OffsetSpec.latest(), iso)
        return {k: Watermarks(lows[k], highs[k]) for k in highs}

    def offsets_for_times(self, partitions: Iterable[tuple[str, int]], timestamp_ms: int) -> dict[tuple[str, int], int]:
        """First offset with timestamp >= `timestamp_ms`, or -1 when there is none."""
        parts = [TopicPartition(t, p) for t, p in partitions]
        return self._list_offsets(parts, OffsetSpec.for_timestamp(timestamp_ms), IsolationLevel.READ_COMMITTED) if parts else {}

    def _list_offsets(self, parts: list[TopicPartition], spec: Any, iso: Any) -> dict[tuple[str, int], int]:
        futs = self._client.list_offsets({tp: spec for tp in parts}, isolation_level=iso, request_timeout=self.timeout)
        out: dict[tuple[str, int], int] = {}
        for tp, fut in futs.items():
            out[(tp.topic, tp.partition)] = self._result(f"list offsets of {tp.topic}[{tp.partition}]", fut).offset
        return out

    # -- consumer groups
    def list_groups(self) -> list[str]:
        res = self._result("list consumer groups", self._client.list_consumer_groups(request_timeout=self.timeout))
        return sorted(g.group_id for g in res.valid)

    def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """Committed offsets of a group (partitions without a commit are left out)."""
        self._wait_for_coordinator(group)
        futs = self._client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout)
        res = self._result(f"read offsets of group {group!r}", futs[group])
        return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions if tp.offset >= 0 and tp.error is None}

    def _wait_for_coordinator(self, group: str) -> None:
        """Return once the group's coordinator answers (a DescribeGroups round trip).

        librdkafka (2.4-2.16 at least) crashes the process with SIGSEGV when a
        ListConsumerGroupOffsets response says NOT_COORDINATOR (librdkafka#5040,
        confluent-kafka-python#1982), which is what a cluster answers while it creates or
        loads `__consumer_offsets`, e.g. the first group request on a new cluster.
        DescribeGroups handles that error safely, so it goes first and is retried.
        """
        import time

        deadline = time.monotonic() + self.timeout
        while True:
            started = time.monotonic()
            try:
                futs = self._client.describe_consumer_groups([group], request_timeout=self.timeout)
                self._result(f"find the coordinator of group {group!r}", futs[group])
                return
            except ClusterUnavailable:
                # A quick "not coordinator" is the cluster getting ready; a slow failure
                # means it is not there, and waiting longer would not help.
                if time.monotonic() - started > 2.0 or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def group_members(self, group: str) -> int:
        """Active members of a group (0 for an empty, dead or unknown group)."""
        self._wait_for_coordinator(group)  # a new cluster answers NOT_COORDINATOR for a moment
        futs = self._client.describe_consumer_groups([group], request_timeout=self.timeout)
        desc = self._result(f"describe group {group!r}", futs[group])
        return len(desc.members or [])

    def group_state(self, group: str) -> str:
        futs = self._client.describe_consumer_groups([group], request_timeout=self.timeout)
        desc = self._result(f"describe group {group!r}", futs[group])
        return str(getattr(desc.state, "name", desc.state))

    def alter_group_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> None:
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        futs = self._client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)], request_timeout=self.timeout)
        res = self._result(f"set offsets of group {group!r}", futs[group])
        for tp in res.topic_partitions:
            if tp.error is not None:
                raise KafkaOperationError(f"cluster {self.name!r}: cannot set {group!r} offset of {tp.topic}[{tp.partition}]: {tp.error.str()}")

    def delete_groups(self, groups: Iterable[str]) -> None:
        groups = list(groups)
        if groups:
            for group, fut in self._client.delete_consumer_groups(groups, request_timeout=self.timeout).items():
                try:
                    fut.result(timeout=self.timeout)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                        raise_for(self.name, f"delete group {group!r}", exc, self.timeout)

    def delete_records(self, before: Mapping[tuple[str, int], int]) -> None:
        """Delete every record below the given offset (OFFSET_END for all) per partition."""
        if not before:
            return
        tps = [TopicPartition(t, p, o) for (t, p), o in before.items()]
        for tp, fut in self._client.delete_records(tps, request_timeout=self.timeout, operation_timeout=self.timeout).items():
            self._result(f"delete records of {tp.topic}[{tp.partition}]", fut)


@dataclass(frozen=True, slots=True)
class Record:
    """A consumed record, detached from librdkafka's `Message`."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int  # -1 when the record carries none
    key: bytes | None
    value: bytes | None


class PartitionReader:
    """A group-less consumer that reads assigned partitions from explicit offsets.

    Used by monitoring (the timestamp of the record at the mirror's position) and the
    canary (probes on the target). It never joins a group and never commits, so it leaves
    no trace in the cluster's group list. read_committed, like the mirror itself.
    `auto.offset.reset=earliest`: an offset deleted by retention reads from the log start,
    which is the oldest record that still exists (the documented lag-seconds fallback).
    """

    def __init__(self, name: str, cluster: ClusterConfig, settings: Mapping[str, Any] | None = None) -> None:
        self.name = name
        base = {
            "group.id": f"mirror-reader-{id(self):x}",  # required by librdkafka; nothing is committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": False,
        }
        self._consumer = Consumer(client_settings(name, cluster, {**base, **(settings or {})}))
        self._assigned: set[tuple[str, int]] = set()

    def assign(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Read exactly these partitions, each from the given offset (OFFSET_BEGINNING/END allowed)."""
        try:
            self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in offsets.items()])
        except KafkaException as exc:
            raise_for(self.name, "assign partitions", exc)
        self._assigned = set(offsets)

    def add(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Start reading more partitions without moving the ones already assigned."""
        new = {k: v for k, v in offsets.items() if k not in self._assigned}
        if new:
            try:
                self._consumer.incremental_assign([TopicPartition(t, p, o) for (t, p), o in new.items()])
            except KafkaException as exc:
                raise_for(self.name, "assign partitions", exc)
            self._assigned |= set(new)

    @property
    def assigned(self) -> frozenset[tuple[str, int]]:
        return frozenset(self._assigned)

    def read(self, max_records: int = 500, timeout: float = 0.5) -> list[Record]:
        """Records available now (waits at most `timeout` for the first); transient errors are skipped.

        Returns as soon as one record is there: `consume(n, timeout)` would wait for n
        records or the whole timeout, and the canary would count that wait as latency.
        """
        try:
            first = self._consumer.poll(timeout)
            msgs = [first, *self._consumer.consume(max_records - 1, timeout=0)] if first is not None and max_records > 1 else [first] if first is not None else []
        except KafkaException as exc:
            raise_for(self.name, "read records", exc)
        out = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if is_retriable(err) or err.code() in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
                    log.debug("reader %s: %s", self.name, err.str())
                    continue
                raise_for(self.name, f"read {m.topic()}[{m.partition()}]", KafkaException(err))
            _kind, ts = m.timestamp()
            out.append(Record(m.topic(), m.partition(), m.offset(), ts if ts is not None else -1, m.key(), m.value()))
        return out

    def first_records(self, offsets: Mapping[tuple[str, int], int], timeout: float) -> dict[tuple[str, int], Record]:
        """The first readable record at or after each offset; partitions with none in time are absent."""
        import time

        self.assign(offsets)
        want = set(offsets)
        got: dict[tuple[str, int], Record] = {}
        deadline = time.monotonic() + timeout
        while want - got.keys():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for r in self.read(max_records=len(want) * 4, timeout=min(left, 0.5)):
                key = (r.topic, r.partition)
                if key in want and key not in got:
                    got[key] = r
        try:
            self._consumer.unassign()
        except KafkaException:
            pass
        self._assigned = set()
        return got

    def close(self) -> None:
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError):
            pass
