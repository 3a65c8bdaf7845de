"""Consumer groups: committed offsets (with their metadata), members, state, offsets set, groups deleted."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

from mirror.errors import ClusterUnavailable, KafkaOperationError
from mirror.kafka.admin.base import AdminBase
from mirror.kafka.admin.offsets import PendingOffsets
from mirror.kafka.errors import AUTHORIZATION, HINT_NOT_READY, authorization_error, is_retriable
from mirror.kafka.offsets import chunks


class GroupAdmin(AdminBase):
    """Consumer group requests, each sent only once the group's coordinator answers where librdkafka needs that."""

    def list_groups(self) -> list[str]:
        res = self._result("list consumer groups", self._client.list_consumer_groups(request_timeout=self.timeout))
        return sorted(g.group_id for g in res.valid)

    def group_offsets(
        self, group: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], int]:
        """Committed offsets of a group (partitions without a commit are left out);
        `partitions`: only those (see `request_group_offsets`)."""
        return self.request_group_offsets(group, partitions).result()

    def request_group_offsets(
        self,
        group: str,
        partitions: Iterable[tuple[str, int]] | None = None,
        *,
        strict: bool = False,
        described: bool = False,
    ) -> PendingOffsets[int]:
        """`group_offsets`, sent now (once the coordinator answers) and waited for by
        `.result()`: two groups' offsets in flight at once (10,000 partitions each).

        `partitions`: only these, asked a chunk at a time with every chunk in flight at once
        (mirror.kafka.offsets says why); None: every partition
        the group committed, in one request. `strict`: a partition we may not Describe is
        an error, not a partition without a commit. `described`: the caller's
        `group_states` just proved the coordinators ready (no round trip per group)."""
        pending = self._request_group_offsets(group, partitions, described)

        def wait() -> dict[tuple[str, int], int]:
            tps = pending()
            if strict:
                for tp in tps:
                    if tp.error is not None and tp.error.code() in AUTHORIZATION:
                        raise authorization_error(
                            self.name, tp.error, f"read offsets of group {group!r}", ("Describe", "topic", tp.topic)
                        )
            return {(tp.topic, tp.partition): tp.offset for tp in tps if tp.offset >= 0 and tp.error is None}

        return PendingOffsets(wait)

    def group_offsets_with_metadata(
        self, group: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """Committed offsets of a group with their commit metadata (None when empty)."""
        return {
            (tp.topic, tp.partition): (tp.offset, tp.metadata or None)
            for tp in self._request_group_offsets(group, partitions)()
            if tp.offset >= 0 and tp.error is None
        }

    def _request_group_offsets(
        self, group: str, partitions: Iterable[tuple[str, int]] | None, described: bool = False
    ) -> Callable[[], list[TopicPartition]]:
        if not described:
            self._wait_for_coordinator(group)
        if partitions is None:
            requests = [ConsumerGroupTopicPartitions(group)]
        else:
            requests = [
                ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in chunk])
                for chunk in chunks(list(partitions))
            ]
        # One group per call: librdkafka's ListConsumerGroupOffsets takes exactly one.
        lane = self._lane(group)
        futures = [lane.list_consumer_group_offsets([r], request_timeout=self.timeout)[group] for r in requests]

        def wait() -> list[TopicPartition]:
            out: list[TopicPartition] = []
            for fut in futures:
                out.extend(
                    self._result(f"read offsets of group {group!r}", fut, ("Describe", "group", group)).topic_partitions
                )
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
                futs = self._lane(group).describe_consumer_groups([group], request_timeout=self.timeout)
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
        futs = self._lane(group).describe_consumer_groups([group], request_timeout=self.timeout)
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
            raise ClusterUnavailable(
                f"cluster {self.name!r} could not list every broker's groups yet: {res.errors[0]}", hint=HINT_NOT_READY
            )
        return {g.group_id: str(getattr(g.state, "name", g.state)) for g in res.valid}

    def prepare_groups(self, groups: Iterable[str]) -> dict[str, str]:
        """These groups' states, each one's coordinator known to answer: their offset
        requests may then skip the wait per group (`request_group_offsets(described=True)`).

        A group `group_states` lists was listed by its coordinator. The others (no commit
        on this cluster yet, or hidden from us) are described in one round: that finds their
        coordinators where a ListConsumerGroupOffsets would meet NOT_COORDINATOR (the
        librdkafka crash `_wait_for_coordinator` explains: a cluster where no group ever
        committed creates its offsets topic on the first request), and refuses a group we
        may not Describe with the missing grant named."""
        wanted = list(groups)
        states = self.group_states()
        unlisted = [g for g in wanted if g not in states]
        futs = {
            g: fut
            for lane, mine in self._by_lane(unlisted)
            for g, fut in lane.describe_consumer_groups(mine, request_timeout=self.timeout).items()
        }
        for g, fut in futs.items():
            desc = self._result(f"describe group {g!r}", fut, ("Describe", "group", g))
            states[g] = str(getattr(desc.state, "name", desc.state))
        return {g: states[g] for g in wanted}

    def group_state(self, group: str) -> str:
        futs = self._lane(group).describe_consumer_groups([group], request_timeout=self.timeout)
        desc = self._result(f"describe group {group!r}", futs[group], ("Describe", "group", group))
        return str(getattr(desc.state, "name", desc.state))

    def alter_group_offsets(
        self,
        group: str,
        offsets: Mapping[tuple[str, int], int],
        *,
        metadata: str | Mapping[tuple[str, int], str] | None = None,
    ) -> None:
        """Set a group's offsets; `metadata` for all of them, or per partition (absent: none)."""
        self.request_alter_group_offsets(group, offsets, metadata=metadata)()

    def request_alter_group_offsets(
        self,
        group: str,
        offsets: Mapping[tuple[str, int], int],
        *,
        metadata: str | Mapping[tuple[str, int], str] | None = None,
    ) -> Callable[[], None]:
        """`alter_group_offsets`, sent now and waited for (its errors raised) by the call
        returned: many groups' commits in flight at once (one group per request)."""

        def meta(tp: tuple[str, int]) -> str | None:
            return metadata if isinstance(metadata, str) or metadata is None else metadata.get(tp)

        tps = [
            TopicPartition(t, p, o, metadata=m) if (m := meta((t, p))) else TopicPartition(t, p, o)
            for (t, p), o in offsets.items()
        ]
        futs = self._lane(group).alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, tps)], request_timeout=self.timeout
        )
        return lambda: self._altered(group, futs[group])

    def _altered(self, group: str, fut: Any) -> None:
        res = self._result(f"set offsets of group {group!r}", fut, ("Read", "group", group))
        # A refusal for good first, whatever the answer's order: the broker refuses a topic we
        # may not Read itself and hands the rest to the coordinator, which may be moving.
        refused = sorted(
            (tp for tp in res.topic_partitions if tp.error is not None),
            key=lambda tp: (tp.error.code() not in AUTHORIZATION, is_retriable(tp.error)),
        )
        if refused:
            tp = refused[0]
            if tp.error.code() in AUTHORIZATION:
                # librdkafka puts a refused group (GROUP_AUTHORIZATION_FAILED) on every partition too.
                group_refused = tp.error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
                need = ("Read", "group", group) if group_refused else ("Read", "topic", tp.topic)
                raise authorization_error(self.name, tp.error, f"set {group!r} offsets", need)
            if is_retriable(tp.error):
                # The group's coordinator moving (a rolling restart): these partitions were
                # not set (or, after a timed-out write, may be later); sending the same
                # offsets again once it answers is safe.
                raise ClusterUnavailable(
                    f"cluster {self.name!r} could not set {group!r} offset of {tp.topic}[{tp.partition}] yet: "
                    f"{tp.error.str()}",
                    hint=HINT_NOT_READY,
                )
            raise KafkaOperationError(
                f"cluster {self.name!r}: cannot set {group!r} offset of {tp.topic}[{tp.partition}]: {tp.error.str()}"
            )

    def delete_groups(self, groups: Iterable[str]) -> None:
        futs = {
            g: fut
            for lane, mine in self._by_lane(groups)
            for g, fut in lane.delete_consumer_groups(mine, request_timeout=self.timeout).items()
        }
        for group, fut in futs.items():
            try:
                self._answer(f"delete group {group!r}", fut)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                    self._raise(f"delete group {group!r}", exc, self.timeout, ("Delete", "group", group))

    def _by_lane(self, groups: Iterable[str]) -> list[tuple[Any, list[str]]]:
        """The groups split by the lane each goes through (one request per lane where the API takes many)."""
        out: dict[int, tuple[Any, list[str]]] = {}
        for g in groups:
            lane = self._lane(g)
            out.setdefault(id(lane), (lane, []))[1].append(g)
        return list(out.values())
