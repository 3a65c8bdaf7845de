"""Topics: listing, visibility to the principal, creation, deletion, partition increases."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import NewPartitions, NewTopic

from mirror.domain.acls import Resource, resource_for, visibility_probes
from mirror.errors import AuthorizationFailed
from mirror.kafka.admin.base import AdminBase
from mirror.kafka.errors import principal_of

# A KRaft controller refuses one operation writing more than 10,000 metadata records
# ("Unable to perform excessively large batch operation"): a topic costs one record, plus
# one per partition and per config. Requests stay well below that.
CREATE_BATCH_RECORDS = 5000


def _create_chunks(
    topics: Mapping[str, tuple[int, int, Mapping[str, str]]],
) -> list[dict[str, tuple[int, int, Mapping[str, str]]]]:
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


class TopicAdmin(AdminBase):
    """Which topics exist (and which the principal may not see), and their creation, deletion and growth."""

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count (internal topics included; callers filter)."""
        try:
            md = self._client.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            self._raise("list topics", exc, self.timeout, ("Describe", "topic", "*"))
        return {t.topic: len(t.partitions) for t in md.topics.values() if t.error is None and t.topic is not None}

    def request_topics(self) -> Callable[[], dict[str, int]]:
        """`topics()`, asked now on a thread of its own (a listing blocks, for a noticeable
        time on a cluster of thousands of partitions, while other requests could be on their way); the
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

    def require_visible(
        self, patterns: Iterable[str], listed: Iterable[str], need: str = "Read", literal: Iterable[str] = ()
    ) -> None:
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
        what, res, them = (
            (f"see topic {name!r}", f"topic {name!r}", "it")
            if exact
            else (f"see any topic matching {pattern!r}", f"topics prefixed {name!r}", "them")
        )
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

    def cluster_id(self) -> str:
        """The cluster's id: a cluster rebuilt empty at the same address has a new one. A
        DescribeCluster request (Kafka 2.8+), which needs no ACL."""
        fut = self._client.describe_cluster(request_timeout=self.timeout)
        return str(self._result("describe the cluster", fut).cluster_id or "")

    def create_topic(
        self, topic: str, partitions: int, replication: int = -1, config: Mapping[str, str] | None = None
    ) -> bool:
        """Create a topic; False if it already existed."""
        fut = self._client.create_topics(
            [NewTopic(topic, partitions, replication, config=dict(config or {}))], operation_timeout=self.timeout
        )[topic]
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
        not one round trip per topic: a flow starting over a thousand topics would wait
        for each in turn.
        """
        created = []
        for chunk in _create_chunks(topics):
            new = [NewTopic(t, n, rf, config=dict(cfg)) for t, (n, rf, cfg) in chunk.items()]
            for topic, fut in self._client.create_topics(
                new, operation_timeout=self.timeout, request_timeout=self.timeout
            ).items():
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
