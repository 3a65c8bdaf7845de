"""Partition offsets: low and high watermarks, end offsets, offsets for a time; records deleted below an offset."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec
from confluent_kafka.cimpl import _AdminClientImpl

from mirror.kafka.admin.base import AdminBase

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
# partition count (bench/README.md, "Figures behind the code"), and librdkafka sends the
# requests of one call to each leader anyway.
LIST_OFFSETS_CHUNK = 500

# Partition errors that go away on their own (leadership moving, a broker just restarted
# and still loading its partitions: "Leader epoch is newer than broker epoch", which can
# last seconds on a broker with thousands of partitions): asked again rather than failing
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


class OffsetAdmin(AdminBase):
    """ListOffsets and DeleteRecords: requests sent at once, waited for by `PendingOffsets.result()`."""

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
        resolves each through a callback: at thousands of partitions that Python work costs
        more than the request itself. Here the request goes to
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

    def delete_records(self, before: Mapping[tuple[str, int], int]) -> None:
        """Delete every record below the given offset (OFFSET_END for all) per partition."""
        if not before:
            return
        tps = [TopicPartition(t, p, o) for (t, p), o in before.items()]
        for tp, fut in self._client.delete_records(tps, request_timeout=self.timeout, operation_timeout=self.timeout).items():
            self._result(f"delete records of {tp.topic}[{tp.partition}]", fut, ("Delete", "topic", tp.topic))
