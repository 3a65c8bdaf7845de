"""Consumer groups: committed offsets (with their metadata), members, state, offsets set, groups deleted."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

from mirror.errors import ClusterUnavailable, KafkaOperationError
from mirror.kafka.admin.base import AdminBase
from mirror.kafka.admin.offsets import PendingOffsets
from mirror.kafka.errors import AUTHORIZATION, authorization_error
from mirror.kafka.offsets import chunks


class GroupAdmin(AdminBase):
    """Consumer group requests, each sent only once the group's coordinator answers where librdkafka needs that."""

    def list_groups(self) -> list[str]:
        res = self._result("list consumer groups", self._client.list_consumer_groups(request_timeout=self.timeout))
        return sorted(g.group_id for g in res.valid)

    def group_offsets(self, group: str, partitions: Iterable[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        """Committed offsets of a group (partitions without a commit are left out);
        `partitions`: only those (see `request_group_offsets`)."""
        return self.request_group_offsets(group, partitions).result()

    def request_group_offsets(self, group: str, partitions: Iterable[tuple[str, int]] | None = None) -> PendingOffsets[int]:
        """`group_offsets`, sent now (once the coordinator answers) and waited for by
        `.result()`: two groups' offsets in flight at once (10,000 partitions each).

        `partitions`: only these, asked a chunk at a time with every chunk in flight at once
        (mirror.kafka.offsets says why); None: every partition
        the group committed, in one request."""
        pending = self._request_group_offsets(group, partitions)

        def wait() -> dict[tuple[str, int], int]:
            return {(tp.topic, tp.partition): tp.offset for tp in pending() if tp.offset >= 0 and tp.error is None}

        return PendingOffsets(wait)

    def group_offsets_with_metadata(self, group: str, partitions: Iterable[tuple[str, int]] | None = None) -> dict[tuple[str, int], tuple[int, str | None]]:
        """Committed offsets of a group with their commit metadata (None when empty)."""
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata or None) for tp in self._request_group_offsets(group, partitions)() if tp.offset >= 0 and tp.error is None}

    def _request_group_offsets(self, group: str, partitions: Iterable[tuple[str, int]] | None) -> Callable[[], list[TopicPartition]]:
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

    def group_state(self, group: str) -> str:
        futs = self._client.describe_consumer_groups([group], request_timeout=self.timeout)
        desc = self._result(f"describe group {group!r}", futs[group], ("Describe", "group", group))
        return str(getattr(desc.state, "name", desc.state))

    def alter_group_offsets(self, group: str, offsets: Mapping[tuple[str, int], int], *,
                            metadata: str | Mapping[tuple[str, int], str] | None = None) -> None:
        """Set a group's offsets; `metadata` for all of them, or per partition (absent: none)."""
        def meta(tp: tuple[str, int]) -> str | None:
            return metadata if isinstance(metadata, str) or metadata is None else metadata.get(tp)

        tps = [TopicPartition(t, p, o, metadata=m) if (m := meta((t, p))) else TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        futs = self._client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)], request_timeout=self.timeout)
        res = self._result(f"set offsets of group {group!r}", futs[group], ("Read", "group", group))
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
