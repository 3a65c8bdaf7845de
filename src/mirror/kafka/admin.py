"""The admin client: topics, configs, partitions, offsets, groups, records deleted."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.cimpl import _AdminClientImpl

from mirror.config import ClusterConfig
from mirror.domain.acls import Resource, resource_for, visibility_probes
from mirror.errors import AuthorizationFailed, ClusterUnavailable, KafkaOperationError
from mirror.kafka.clients import client_settings
from mirror.kafka.errors import AUTHORIZATION, HINT_NOT_READY, HINT_UNREACHABLE, authentication_error, authorization_error, principal_of, raise_for, security_error
from mirror.kafka.offsets import chunks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Watermarks:
    low: int
    high: int


T = TypeVar("T")


class PendingOffsets(Generic[T]):
    """Offsets requested and not waited for yet: `result()` waits (once) and returns them."""

    def __init__(self, wait: Callable[[], dict[tuple[str, int], T]]) -> None:
        self._wait: Callable[[], dict[tuple[str, int], T]] | None = wait
        self._value: dict[tuple[str, int], T] = {}

    def result(self) -> dict[tuple[str, int], T]:
        if self._wait is not None:
            wait, self._wait = self._wait, None
            self._value = wait()
        return self._value


# Partitions per ListOffsets call: the C client's cost per call grows faster than the
# partition count (2,000 in one call: ~27 ms to send; in 500s: ~16 ms; 10,000 in one call
# ~0.4 s), and librdkafka sends the requests of one call to each leader anyway.
LIST_OFFSETS_CHUNK = 500

# Partition errors that go away on their own (leadership moving, a broker just restarted
# and still loading its partitions: "Leader epoch is newer than broker epoch", which took
# more than 10 s at 10,000 partitions on a loaded machine): asked again rather than failing
# the whole listing, until the cluster's timeout.
_TRANSIENT_PARTITION = {
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.KAFKA_STORAGE_ERROR,
}


# A KRaft controller refuses one operation writing more than 10,000 metadata records
# ("Unable to perform excessively large batch operation"): a topic costs one record, plus
# one per partition and per config. Requests stay well below that.
CREATE_BATCH_RECORDS = 5000


def _create_chunks(topics: Mapping[str, tuple[int, int, Mapping[str, str]]]) -> list[dict[str, tuple[int, int, Mapping[str, str]]]]:
    chunks: list[dict[str, tuple[int, int, Mapping[str, str]]]] = [{}]
    size = 0
    for name, spec in topics.items():
        cost = 1 + spec[0] + len(spec[2])
        if chunks[-1] and size + cost > CREATE_BATCH_RECORDS:
            chunks.append({})
            size = 0
        chunks[-1][name] = spec
        size += cost
    return chunks if chunks[-1] else []


class Admin:
    """Admin requests against one cluster, each bounded by the cluster's timeout."""

    def __init__(self, name: str, cluster: ClusterConfig) -> None:
        self.name = name
        self.timeout = cluster.timeout
        self._client = AdminClient(client_settings(name, cluster))

    # -- plumbing
    def _raise(self, what: str, exc: BaseException, timeout: float | None = None, acl: tuple[str, str, str] | None = None) -> None:
        self._client.poll(0)  # serve error_cb: a refused login is recorded there
        raise_for(self.name, what, exc, timeout, acl)

    def _result(self, what: str, future: Any, acl: tuple[str, str, str] | None = None) -> Any:
        try:
            return self._answer(what, future)
        except KafkaException as exc:
            self._raise(what, exc, self.timeout, acl)

    def _answer(self, what: str, future: Any) -> Any:
        """The future's result; its KafkaException raised as is (the caller may expect some:
        a topic that already exists), no answer within the timeout as `ClusterUnavailable`.
        Python's wait can give up before librdkafka's own request timeout fires (a broker
        out of heap, seen at 10,000 partitions): that `TimeoutError` must not escape."""
        try:
            return future.result(timeout=self.timeout)
        except TimeoutError as exc:
            self._client.poll(0)
            refused = security_error(self.name)
            if refused is not None:
                raise authentication_error(self.name, refused) from None
            raise ClusterUnavailable(
                f"cluster {self.name!r} did not answer within {self.timeout:g}s while trying to {what}",
                hint=HINT_UNREACHABLE,
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
            self._raise("list topics", exc, self.timeout, ("Describe", "topic", "*"))
        return {t.topic: len(t.partitions) for t in md.topics.values() if t.error is None and t.topic is not None}

    def request_topics(self) -> Callable[[], dict[str, int]]:
        """`topics()`, asked now on a thread of its own (a listing blocks, a quarter of a
        second at 10,000 partitions, while other requests could be on their way); the
        returned callable waits for it and returns or raises what `topics()` did. A daemon
        thread: a command that fails before waiting does not wait for it either."""
        box: list[Any] = []
        done = threading.Event()

        def run() -> None:
            try:
                box.append((True, self.topics()))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiter, raised there
                box.append((False, exc))
            finally:
                done.set()

        threading.Thread(target=run, name=f"list-topics-{self.name}", daemon=True).start()

        def wait() -> dict[str, int]:
            done.wait()
            ok, value = box[0]
            if not ok:
                raise value
            return value  # type: ignore[no-any-return]

        return wait

    def topic_details(self) -> dict[str, tuple[int, int]]:
        """Topic name -> (partition count, replication factor)."""
        try:
            md = self._client.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            self._raise("list topics", exc, self.timeout, ("Describe", "topic", "*"))
        out = {}
        for t in md.topics.values():
            if t.error is None and t.topic is not None and t.partitions:
                out[t.topic] = (len(t.partitions), max(len(p.replicas) for p in t.partitions.values()))
        return out

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """Topic name -> topic id, for those that exist. A topic deleted and created again
        under the same name gets a new id: how a worker that never saw it missing knows."""
        names = list(topics)
        if not names:
            return {}
        futures = self._client.describe_topics(TopicCollection(names), request_timeout=self.timeout)
        out = {}
        for name, fut in futures.items():
            try:
                out[name] = str(self._answer(f"describe topic {name!r}", fut).topic_id)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    self._raise(f"describe topic {name!r}", exc, self.timeout, ("Describe", "topic", name))
        return out

    def hidden_topics(self, topics: Iterable[str]) -> list[str]:
        """Of these topic names, those the principal may not Describe.

        Listing topics shows only the ones the principal may Describe, so a missing grant
        looks like a missing topic; asked by name, the cluster says which it is.
        """
        names = list(topics)
        if not names:
            return []
        out = []
        for name, fut in self._client.describe_topics(TopicCollection(names), request_timeout=self.timeout).items():
            try:
                fut.result(timeout=self.timeout)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    out.append(name)
            except TimeoutError:  # no answer says nothing about grants; the callers' own requests report it
                continue
        return sorted(out)

    def require_visible(self, patterns: Iterable[str], listed: Iterable[str], need: str = "Read", literal: Iterable[str] = ()) -> None:
        """Raise `AuthorizationFailed` when an include pattern matches no listed topic because
        the principal may not see the topics it names (not even Describe), rather than
        because there are none. `literal`: exact names to check too (the canary topic)."""
        names = set(listed)
        probes = visibility_probes(patterns, names)
        probes.update({re.escape(t): t for t in literal if t not in names})
        hidden = set(self.hidden_topics(sorted(set(probes.values()))))
        bad = [(p, n) for p, n in probes.items() if n in hidden]
        if not bad:
            return
        pattern, name = bad[0]
        exact = resource_for("topic", pattern)[0] == Resource("topic", pattern) or pattern == re.escape(name)
        what, res, them = (f"see topic {name!r}", f"topic {name!r}", "it") if exact else (
            f"see any topic matching {pattern!r}", f"topics prefixed {name!r}", "them")
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise AuthorizationFailed(
            f"cluster {self.name!r}: {principal_of(self.name)} is not allowed to {what}: missing {need} on {res}"
            f" (not even Describe: listings leave {them} out){more}",
            hint="grant it; `mirror acls -c CONFIG` lists every ACL the mirror needs",
        )

    def broker_count(self) -> int:
        try:
            return len(self._client.list_topics(timeout=self.timeout).brokers)
        except KafkaException as exc:
            self._raise("describe the cluster", exc, self.timeout)
        return 0  # unreachable; raise_for always raises

    def create_topic(self, topic: str, partitions: int, replication: int = -1, config: Mapping[str, str] | None = None) -> bool:
        """Create a topic; False if it already existed."""
        fut = self._client.create_topics([NewTopic(topic, partitions, replication, config=dict(config or {}))], operation_timeout=self.timeout)[topic]
        try:
            self._answer(f"create topic {topic!r}", fut)
            return True
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            self._raise(f"create topic {topic!r}", exc, self.timeout, ("Create", "topic", topic))
        return False

    def create_topics(self, topics: Mapping[str, tuple[int, int, Mapping[str, str]]]) -> list[str]:
        """Create many topics in one request: name -> (partitions, replication, configs).

        Returns the ones created (those that already existed are left out). One request,
        not one round trip per topic: a flow starting over 1,000 topics waited ~50 s for
        them one by one.
        """
        created = []
        for chunk in _create_chunks(topics):
            new = [NewTopic(t, n, rf, config=dict(cfg)) for t, (n, rf, cfg) in chunk.items()]
            for topic, fut in self._client.create_topics(new, operation_timeout=self.timeout, request_timeout=self.timeout).items():
                try:
                    self._answer(f"create topic {topic!r}", fut)
                    created.append(topic)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        self._raise(f"create topic {topic!r}", exc, self.timeout, ("Create", "topic", topic))
        return created

    def delete_topics(self, topics: Iterable[str]) -> None:
        topics = list(topics)
        if not topics:
            return
        for topic, fut in self._client.delete_topics(topics, operation_timeout=self.timeout).items():
            try:
                self._answer(f"delete topic {topic!r}", fut)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    self._raise(f"delete topic {topic!r}", exc, self.timeout, ("Delete", "topic", topic))

    def create_partitions(self, topic: str, total: int) -> None:
        fut = self._client.create_partitions([NewPartitions(topic, total)], operation_timeout=self.timeout)[topic]
        self._result(f"grow {topic!r} to {total} partitions", fut, ("Alter", "topic", topic))

    def topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """Non-default configs of each topic (what a user or the cluster set on purpose)."""
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        if not resources:
            return {}
        out: dict[str, dict[str, str]] = {}
        for res, fut in self._client.describe_configs(resources, request_timeout=self.timeout).items():
            entries = self._result(f"describe configs of {res.name!r}", fut, ("DescribeConfigs", "topic", res.name))
            # Only what was set on the topic itself: broker-wide settings belong to each cluster.
            out[res.name] = {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and e.value is not None}
        return out

    def alter_topic_configs(self, topic: str, set_configs: Mapping[str, str], reset: Iterable[str] = ()) -> None:
        """Set some topic configs and return others to the cluster's default, leaving the rest alone.

        Incremental (KIP-339): a plain AlterConfigs would replace the topic's whole config,
        wiping the target operator's own settings (segment sizes, placement).
        """
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set_configs.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in reset]
        if not entries:
            return
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        for fut in self._client.incremental_alter_configs([res], request_timeout=self.timeout).values():
            self._result(f"alter the configs of topic {topic!r}", fut, ("AlterConfigs", "topic", topic))

    def effective_configs(self, topics: Iterable[str], names: Iterable[str]) -> dict[str, dict[str, str]]:
        """The effective value (set on the topic, or its broker's default) of each config in
        `names`, per topic; a topic that is gone is left out."""
        wanted = set(names)
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        out: dict[str, dict[str, str]] = {}
        if not resources:
            return out
        for res, fut in self._client.describe_configs(resources, request_timeout=self.timeout).items():
            try:
                entries = self._answer(f"describe configs of {res.name!r}", fut)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                self._result(f"describe configs of {res.name!r}", fut, ("DescribeConfigs", "topic", res.name))  # raises the right error
                continue
            out[res.name] = {k: e.value for k, e in entries.items() if k in wanted and e.value is not None}
        return out

    def max_message_bytes(self, topics: Iterable[str]) -> dict[str, int]:
        """Each topic's effective `max.message.bytes` (set on it, or its broker's default):
        the largest record batch the broker accepts for it."""
        resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        out: dict[str, int] = {}
        if not resources:
            return out
        for res, fut in self._client.describe_configs(resources, request_timeout=self.timeout).items():
            try:
                entry = self._answer(f"describe configs of {res.name!r}", fut).get("max.message.bytes")
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue  # deleted, or created a moment ago: not known yet
                self._result(f"describe configs of {res.name!r}", fut, ("DescribeConfigs", "topic", res.name))  # raises the right error
                continue
            if entry is not None and entry.value is not None:
                out[res.name] = int(entry.value)
        return out

    # -- offsets
    def watermarks(self, partitions: Iterable[tuple[str, int]], *, committed_only: bool = True) -> dict[tuple[str, int], Watermarks]:
        """Low and high offsets per partition.

        With `committed_only` the high mark is the last stable offset, i.e. what a
        read_committed consumer (the mirror) can reach; open transactions are not "lag".
        """
        return self.request_watermarks(partitions, committed_only=committed_only).result()

    def request_watermarks(self, partitions: Iterable[tuple[str, int]], *, committed_only: bool = True) -> PendingOffsets[Watermarks]:
        """`watermarks`, sent now and waited for by `.result()`: both ends in flight at once,
        and the caller may send other requests (to another cluster) meanwhile."""
        parts = list(partitions)
        iso = IsolationLevel.READ_COMMITTED if committed_only else IsolationLevel.READ_UNCOMMITTED
        lows = self._send_list_offsets(parts, OffsetSpec.earliest(), iso)
        highs = self._send_list_offsets(parts, OffsetSpec.latest(), iso)

        def combine() -> dict[tuple[str, int], Watermarks]:
            low, high = lows.result(), highs.result()
            return {k: Watermarks(low[k], h) for k, h in high.items()}

        return PendingOffsets(combine)

    def end_offsets(self, partitions: Iterable[tuple[str, int]], *, committed_only: bool = True) -> dict[tuple[str, int], int]:
        """High offsets only: half the requests of `watermarks` when the low mark is not needed."""
        return self.request_end_offsets(partitions, committed_only=committed_only).result()

    def request_end_offsets(self, partitions: Iterable[tuple[str, int]], *, committed_only: bool = True) -> PendingOffsets[int]:
        iso = IsolationLevel.READ_COMMITTED if committed_only else IsolationLevel.READ_UNCOMMITTED
        return self._send_list_offsets(list(partitions), OffsetSpec.latest(), iso)

    def offsets_for_times(self, partitions: Iterable[tuple[str, int]], timestamp_ms: int) -> dict[tuple[str, int], int]:
        """First offset with timestamp >= `timestamp_ms`, or -1 when there is none."""
        return self._send_list_offsets(list(partitions), OffsetSpec.for_timestamp(timestamp_ms), IsolationLevel.READ_COMMITTED).result()

    def _send_list_offsets(self, parts: list[tuple[str, int]], spec: Any, iso: Any) -> PendingOffsets[int]:
        """One ListOffsets request for all `parts`, sent at once; `.result()` waits for it.

        confluent-kafka's `AdminClient.list_offsets` makes one Future per partition and
        resolves each through a callback: at 10,000 partitions that Python work cost more
        than the request itself (~1 s of the 1.2 s each call took). Here the request goes to
        the C client with a single Future per `LIST_OFFSETS_CHUNK` partitions (what
        `list_offsets` does underneath), and the per-partition results are read from them.

        A partition failing with a transient error (a leader moving, a broker that just
        restarted: "Leader epoch is newer than broker epoch") is asked again, alone, until
        the cluster's timeout; any other error, or one still there then, is raised naming
        the first failing partition.
        """
        if not parts:
            return PendingOffsets(dict)
        deadline = time.monotonic() + self.timeout
        spec_value = int(spec._value)

        def send(keys: list[tuple[str, int]]) -> list[Future[Any]]:
            futs = []
            for i in range(0, len(keys), LIST_OFFSETS_CHUNK):
                fut: Future[Any] = Future()
                fut.set_running_or_notify_cancel()
                tps = [TopicPartition(t, p, spec_value) for t, p in keys[i:i + LIST_OFFSETS_CHUNK]]
                # The C method AdminClient.list_offsets wraps (confluent-kafka >= 2.3).
                _AdminClientImpl.list_offsets(self._client, tps, fut, isolation_level_value=iso.value, request_timeout=self.timeout)
                futs.append(fut)
            return futs

        first = send(parts)

        def wait() -> dict[tuple[str, int], int]:
            out: dict[tuple[str, int], int] = {}
            futs, backoff = first, 0.1
            while True:
                retry: list[tuple[str, int]] = []
                for fut in futs:
                    for tp, res in self._result(f"list offsets of {len(parts)} partitions", fut).items():
                        key = (tp.topic, tp.partition)
                        if not isinstance(res, KafkaError):
                            out[key] = res.offset
                        elif res.code() in _TRANSIENT_PARTITION and time.monotonic() + backoff < deadline:
                            retry.append(key)
                        else:
                            self._raise(f"list offsets of {key[0]}[{key[1]}]", KafkaException(res), self.timeout, ("Describe", "topic", key[0]))
                if not retry:
                    return out
                log.debug("cluster %s: list offsets of %d partitions again (first %s[%d])", self.name, len(retry), *retry[0])
                time.sleep(backoff)
                backoff = min(1.0, backoff * 2)
                futs = send(retry)

        return PendingOffsets(wait)

    # -- consumer groups
    def list_groups(self) -> list[str]:
        res = self._result("list consumer groups", self._client.list_consumer_groups(request_timeout=self.timeout))
        return sorted(g.group_id for g in res.valid)

    def group_offsets(self, group: str, partitions: Iterable[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        """Committed offsets of a group (partitions without a commit are left out);
        `partitions`: only those (see `request_group_offsets`)."""
        return self.request_group_offsets(group, partitions).result()

    def request_group_offsets(self, group: str, partitions: Iterable[tuple[str, int]] | None = None, *, strict: bool = False,
                              described: bool = False) -> PendingOffsets[int]:
        """`group_offsets`, sent now (once the coordinator answers) and waited for by
        `.result()`: two groups' offsets in flight at once (10,000 partitions each).

        `partitions`: only these, asked a chunk at a time with every chunk in flight at once
        (mirror.kafka.offsets: 0.07 s instead of 0.46 s at 10,000); None: every partition
        the group committed, in one request."""
        pending = self._request_group_offsets(group, partitions, described)

        def wait() -> dict[tuple[str, int], int]:
            tps = pending()
            if strict:  # a partition we may not Describe is an error, not a partition without a commit
                for tp in tps:
                    if tp.error is not None and tp.error.code() in AUTHORIZATION:
                        raise authorization_error(self.name, tp.error, f"read offsets of group {group!r}", ("Describe", "topic", tp.topic))
            return {(tp.topic, tp.partition): tp.offset for tp in tps if tp.offset >= 0 and tp.error is None}

        return PendingOffsets(wait)

    def group_offsets_with_metadata(self, group: str, partitions: Iterable[tuple[str, int]] | None = None) -> dict[tuple[str, int], tuple[int, str | None]]:
        """Committed offsets of a group with their commit metadata (None when empty)."""
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata or None) for tp in self._request_group_offsets(group, partitions)() if tp.offset >= 0 and tp.error is None}

    def _request_group_offsets(self, group: str, partitions: Iterable[tuple[str, int]] | None, described: bool = False) -> Callable[[], list[TopicPartition]]:
        if not described:  # `described`: the caller's `groups_members` just had the coordinator answer for it
            self._wait_for_coordinator(group)
        if partitions is None:
            requests = [ConsumerGroupTopicPartitions(group)]
        else:
            requests = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in chunk]) for chunk in chunks(list(partitions))]
        # One group per call: librdkafka's ListConsumerGroupOffsets takes exactly one.
        futures = [self._client.list_consumer_group_offsets([r], request_timeout=self.timeout)[group] for r in requests]

        def wait() -> list[TopicPartition]:
            out: list[TopicPartition] = []
            for fut in futures:
                out.extend(self._result(f"read offsets of group {group!r}", fut, ("Describe", "group", group)).topic_partitions)
            return out

        return wait

    def _wait_for_coordinator(self, group: str) -> None:
        """Return once the group's coordinator answers (a DescribeGroups round trip).

        librdkafka (2.4-2.16 at least) crashes the process with SIGSEGV when a
        ListConsumerGroupOffsets response says NOT_COORDINATOR (librdkafka#5040,
        confluent-kafka-python#1982), which is what a cluster answers while it creates or
        loads `__consumer_offsets`, e.g. the first group request on a new cluster.
        DescribeGroups handles that error safely, so it goes first and is retried.
        """
        deadline = time.monotonic() + self.timeout
        while True:
            started = time.monotonic()
            try:
                futs = self._client.describe_consumer_groups([group], request_timeout=self.timeout)
                self._result(f"find the coordinator of group {group!r}", futs[group], ("Describe", "group", group))
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
        desc = self._result(f"describe group {group!r}", futs[group], ("Describe", "group", group))
        return len(desc.members or [])

    def group_states(self) -> dict[str, str]:
        """Every group's state (STABLE, EMPTY, ...) in one ListGroups round, for a site's
        hundreds of groups at once; only EMPTY and DEAD groups have no members.

        A broker still loading its share of the offsets topic answers with an error
        (COORDINATOR_LOAD_IN_PROGRESS) instead of a partial list: that is ClusterUnavailable
        here, so a full answer also means every group's coordinator is ready, which the
        offset requests that follow rely on (`request_group_offsets(described=True)`)."""
        res = self._result("list consumer groups", self._client.list_consumer_groups(request_timeout=self.timeout))
        if res.errors:
            raise ClusterUnavailable(f"cluster {self.name!r} could not list every broker's groups yet: {res.errors[0]}", hint=HINT_NOT_READY)
        return {g.group_id: str(getattr(g.state, "name", g.state)) for g in res.valid}

    def groups_members(self, groups: Iterable[str]) -> dict[str, int]:
        """`group_members` of many groups in one DescribeGroups round (a site's hundreds)."""
        groups = list(groups)
        if not groups:
            return {}
        futs = self._client.describe_consumer_groups(groups, request_timeout=self.timeout)
        return {g: len(self._result(f"describe group {g!r}", f, ("Describe", "group", g)).members or []) for g, f in futs.items()}

    def group_state(self, group: str) -> str:
        futs = self._client.describe_consumer_groups([group], request_timeout=self.timeout)
        desc = self._result(f"describe group {group!r}", futs[group], ("Describe", "group", group))
        return str(getattr(desc.state, "name", desc.state))

    def alter_group_offsets(self, group: str, offsets: Mapping[tuple[str, int], int], *,
                            metadata: str | Mapping[tuple[str, int], str] | None = None) -> None:
        """Set a group's offsets; `metadata` for all of them, or per partition (absent: none)."""
        self.request_alter_group_offsets(group, offsets, metadata=metadata)()

    def request_alter_group_offsets(self, group: str, offsets: Mapping[tuple[str, int], int], *,
                                    metadata: str | Mapping[tuple[str, int], str] | None = None) -> Callable[[], None]:
        """`alter_group_offsets`, sent now and waited for (its errors raised) by the call
        returned: many groups' commits in flight at once (one group per request)."""
        def meta(tp: tuple[str, int]) -> str | None:
            return metadata if isinstance(metadata, str) or metadata is None else metadata.get(tp)

        tps = [TopicPartition(t, p, o, metadata=m) if (m := meta((t, p))) else TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        futs = self._client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)], request_timeout=self.timeout)
        return lambda: self._altered(group, futs[group])

    def _altered(self, group: str, fut: Any) -> None:
        res = self._result(f"set offsets of group {group!r}", fut, ("Read", "group", group))
        for tp in res.topic_partitions:
            if tp.error is not None and tp.error.code() in AUTHORIZATION:
                raise authorization_error(self.name, tp.error, f"set {group!r} offsets", ("Read", "topic", tp.topic))
            if tp.error is not None:
                raise KafkaOperationError(f"cluster {self.name!r}: cannot set {group!r} offset of {tp.topic}[{tp.partition}]: {tp.error.str()}")

    def delete_groups(self, groups: Iterable[str]) -> None:
        groups = list(groups)
        if groups:
            for group, fut in self._client.delete_consumer_groups(groups, request_timeout=self.timeout).items():
                try:
                    self._answer(f"delete group {group!r}", fut)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                        self._raise(f"delete group {group!r}", exc, self.timeout, ("Delete", "group", group))

    def delete_records(self, before: Mapping[tuple[str, int], int]) -> None:
        """Delete every record below the given offset (OFFSET_END for all) per partition."""
        if not before:
            return
        tps = [TopicPartition(t, p, o) for (t, p), o in before.items()]
        for tp, fut in self._client.delete_records(tps, request_timeout=self.timeout, operation_timeout=self.timeout).items():
            self._result(f"delete records of {tp.topic}[{tp.partition}]", fut, ("Delete", "topic", tp.topic))

    # -- ACLs
    def create_acls(self, principal: str, bindings: Mapping[tuple[str, str, str], Iterable[str]]) -> int:
        """Allow `principal` each operation on each (kind, name, pattern) resource; returns the count.

        kind: topic | group | cluster; pattern: literal | prefixed; operations by Kafka's
        names (Read, Write, Describe, IdempotentWrite, ...).
        """
        acls = [self._binding(principal, res, op) for res, ops in bindings.items() for op in ops]
        if not acls:
            return 0
        for fut in self._client.create_acls(acls, request_timeout=self.timeout).values():
            self._result(f"create ACLs for {principal}", fut)
        return len(acls)

    def delete_acls(self, principal: str, bindings: Mapping[tuple[str, str, str], Iterable[str]]) -> None:
        filters = [self._binding(principal, res, op, filter_=True) for res, ops in bindings.items() for op in ops]
        if filters:
            for fut in self._client.delete_acls(filters, request_timeout=self.timeout).values():
                self._result(f"delete ACLs of {principal}", fut)

    @staticmethod
    def _binding(principal: str, resource: tuple[str, str, str], operation: str, *, filter_: bool = False) -> Any:
        kind, name, pattern = resource
        op = AclOperation[re.sub(r"(?<!^)(?=[A-Z])", "_", operation).upper()]
        cls = AclBindingFilter if filter_ else AclBinding
        return cls(
            ResourceType.BROKER if kind == "cluster" else ResourceType[kind.upper()], "kafka-cluster" if kind == "cluster" else name, ResourcePatternType[pattern.upper()],
            principal, "*", op, AclPermissionType.ALLOW,
        )
