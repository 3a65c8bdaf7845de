"""Exactly-once progress: how far a flow's copy got, committed on the target in its transactions.

With `exactly_once`, a transaction on the target holds a run of copied records *and*, in the
flow's progress group (`FlowConfig.progress_group`), one offset per target partition it wrote:
the next source offset to copy, with the writer's transactional.id as the offset's metadata.
Both become visible together or not at all, so the progress group says exactly which source
records the target holds (read_committed), whatever crashed.

The progress group never has members: its group metadata comes from a consumer that never
subscribes (generation -1, no member id), which the broker accepts for a transactional offset
commit as it does for a simple (assign-only) consumer's commit.

Invariants:

* Progress is read with `require_stable` (a read_committed consumer asks for it): an offset
  sent in a transaction not yet committed or aborted is never read as done. librdkafka retries
  the broker's UNSTABLE_OFFSET_COMMIT until the timeout, so a pending transaction reads as a
  timeout, never as a value.
* `fence(id)` bumps the epoch of a transactional.id and aborts its open transaction (what
  `init_transactions` does for a new producer with that id): every later call of the producer
  that held it fails with a fatal fenced error, so it can never commit again.
* A writer records its id in the progress of every partition it holds (`claim`) before it writes
  a record there, so whoever takes a partition over knows whom to fence, even if the writer
  died inside its first transaction. The empty metadata (`RELEASED`) says the writer let the
  partition go cleanly (it committed on revoke): the next owner has no one to fence.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from mirror.config import ClusterConfig
from mirror.domain.acls import transactional_id_prefix
from mirror.errors import AuthorizationFailed, ClusterUnavailable, MirrorError
from mirror.kafka.admin import Admin
from mirror.kafka.clients import build_client
from mirror.kafka.errors import AUTHORIZATION, authorization_error, raise_for
from mirror.kafka.offsets import committed_offsets
from mirror.kafka.settings import transactional_settings

log = logging.getLogger(__name__)

# The metadata of a partition's progress whose writer released it (no one to fence).
RELEASED = ""
# Then, in the metadata: the id of the source topic the progress counts in. A source topic
# deleted and created again has a new id, and progress of the old one means nothing there.
SOURCE_ID = ";src="

# How long a progress read that timed out waits to learn whether the group was refused.
ACCESS_CHECK_TIMEOUT = 5.0

# A target partition: (target topic, partition number; the source partition's number).
TargetPartition = tuple[str, int]

T = TypeVar("T")


@dataclass(frozen=True)
class Progress:
    """A target partition's committed progress: the next source offset to copy, and who wrote it."""

    next_offset: int
    writer_id: str | None  # None: released, or written by something that did not say
    source_id: str | None = None  # the source topic's id (None: not said, trusted)


class TransactionFailed(MirrorError):
    """A transaction could not be committed; nothing it wrote counts.

    `fenced`: the producer can never be used again (another writer took its transactional.id's
    epoch, or it failed for good); otherwise the transaction was aborted, or must be, and the
    producer may begin another.
    """

    def __init__(self, message: str, *, fenced: bool, error: KafkaError | None = None) -> None:
        super().__init__(message)
        self.fenced = fenced
        self.error = error  # librdkafka's, when it said why


class ProgressPending(MirrorError):
    """The progress of some partition is still in an open transaction (another writer's)."""


def new_writer_id(flow: str) -> str:
    """A transactional.id for one incarnation of a flow's worker: never used before, never again."""
    return f"{transactional_id_prefix(flow)}{uuid.uuid4().hex[:12]}"


def progress_offsets(
    next_offsets: Mapping[TargetPartition, int],
    writer_id: str | None,
    source_ids: Mapping[TargetPartition, str] | None = None,
) -> list[TopicPartition]:
    """The offsets a transaction sends to the progress group: next source offset; as metadata
    the writer id, and the source topic's id where known (`source_ids`)."""
    meta = writer_id if writer_id is not None else RELEASED
    ids = source_ids or {}
    return [
        TopicPartition(topic, partition, offset, metadata=meta + (f"{SOURCE_ID}{ids[tp]}" if tp in ids else ""))
        for tp, offset in next_offsets.items()
        for topic, partition in [tp]
    ]


def parse_metadata(metadata: str | None) -> tuple[str | None, str | None]:
    """A progress's metadata as (writer id, source topic id), None where not said."""
    writer, _, source = (metadata or "").partition(SOURCE_ID)
    return writer or None, source or None


def _parse(tps: Iterable[TopicPartition]) -> dict[TargetPartition, Progress]:
    out: dict[TargetPartition, Progress] = {}
    for tp in tps:
        if tp.error is not None:
            raise KafkaException(tp.error)
        if tp.offset >= 0:
            out[(tp.topic, tp.partition)] = Progress(tp.offset, *parse_metadata(tp.metadata))
    return out


class ProgressGroup:
    """The flow's progress group on the target, seen from a consumer that never subscribes.

    Gives the group metadata a transaction's `send_offsets_to_transaction` needs, and reads
    the committed progress: `stable` (pending transactions are waited for) or not (the last
    committed progress, whatever is pending: how a new owner learns whom to fence).
    """

    def __init__(self, cluster_name: str, cluster: ClusterConfig, group: str) -> None:
        self.cluster_name = cluster_name
        self.group = group
        self._cluster = cluster
        self._stable = self._consumer("read_committed")
        self._unstable: Consumer | None = None
        self._admin: Admin | None = None  # made at the first read that times out (`_check_access`)

    def _consumer(self, isolation: str) -> Consumer:
        settings = {"group.id": self.group, "enable.auto.commit": False, "isolation.level": isolation}
        return build_client(
            Consumer, f"{self.cluster_name}-progress", self._cluster, settings, cluster_name=self.cluster_name
        )

    def metadata(self) -> Any:
        return self._stable.consumer_group_metadata()

    def read(
        self, partitions: Iterable[TargetPartition], timeout: float, *, stable: bool = True
    ) -> dict[TargetPartition, Progress]:
        """The committed progress of `partitions` (absent: none yet).

        Raises ProgressPending when `stable` and a partition's progress is still in an open
        transaction after `timeout`, ClusterUnavailable / KafkaOperationError otherwise.
        """
        tps = [TopicPartition(t, p) for t, p in partitions]
        if not tps:
            return {}
        if stable:
            consumer = self._stable
        else:
            if self._unstable is None:
                self._unstable = self._consumer("read_uncommitted")
            consumer = self._unstable
        try:
            return _parse(committed_offsets(consumer, tps, timeout))
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError._TIMED_OUT:
                self._check_access()
            if stable and err.code() in (KafkaError._TIMED_OUT, KafkaError.UNSTABLE_OFFSET_COMMIT):
                raise ProgressPending(
                    f"cluster {self.cluster_name!r}: progress group {self.group!r} still has an open "
                    f"transaction's offsets after {timeout:g}s"
                ) from exc
            raise_for(self.cluster_name, f"read the progress of group {self.group!r}", exc, timeout)
            raise  # unreachable: raise_for always raises

    def _check_access(self) -> None:
        """A consumer refused the group (no Describe) only times out: librdkafka retries the
        coordinator lookup without a word. An admin's DescribeGroups gets the refusal back
        (asked briefly: a cluster away makes the caller wait long enough already)."""
        if self._admin is None:
            brief = self._cluster.model_copy(update={"timeout": min(ACCESS_CHECK_TIMEOUT, self._cluster.timeout)})
            self._admin = Admin(self.cluster_name, brief)
        try:
            self._admin.group_state(self.group)
        except AuthorizationFailed:
            err = KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)
            what = f"read the progress of group {self.group!r}"
            raise authorization_error(self.cluster_name, err, what, ("Read", "group", self.group)) from None
        except MirrorError:
            pass  # not a refusal: the caller reports its timeout

    def close(self) -> None:
        for consumer in (self._stable, self._unstable):
            if consumer is not None:
                consumer.close()


def read_progress(
    cluster_name: str, cluster: ClusterConfig, group: str, partitions: Iterable[TargetPartition], timeout: float
) -> dict[TargetPartition, Progress]:
    """The stable committed progress of `partitions` in `group` (see `ProgressGroup.read`)."""
    progress = ProgressGroup(cluster_name, cluster, group)
    try:
        return progress.read(partitions, timeout)
    finally:
        progress.close()


def fence(cluster_name: str, cluster: ClusterConfig, transactional_id: str, timeout: float) -> None:
    """Fence every producer that used `transactional_id`: its open transaction is aborted and
    its next transactional call fails with a fatal fenced error."""
    producer = build_client(
        Producer, f"{cluster_name}-fence", cluster, transactional_settings(transactional_id), cluster_name=cluster_name
    )
    try:
        # Bounded as every transactional call (`_bounded`): init_transactions can block past
        # its timeout too, and a claim waiting on it would hang the worker's loop.
        _bounded(producer.init_transactions, timeout)
    except KafkaException as exc:
        raise_for(
            cluster_name,
            f"fence transactional id {transactional_id!r}",
            exc,
            timeout,
            acl=("Write", "transactional-id", transactional_id),
        )
    except TransactionFailed as exc:
        raise ClusterUnavailable(
            f"cluster {cluster_name!r}: fence transactional id {transactional_id!r}: {exc}"
        ) from exc
    finally:
        producer.flush(0)
    log.info("cluster %s: fenced transactional id %s", cluster_name, transactional_id)


# librdkafka 2.x can block in send_offsets_to_transaction past its timeout, for good, when the
# group coordinator went away (confluentinc/librdkafka#5456, #5511: a single-broker target
# restarting is enough). A transactional call gets this long beyond its own timeout.
HANG_GRACE = 5.0


def _bounded(call: Callable[[float], T], timeout: float) -> T:
    """`call(timeout)` on a helper thread, given up on after `timeout` + HANG_GRACE: the
    producer is then abandoned (`TransactionFailed(fenced=True)`) and its id fenced by the
    next incarnation, whatever the stuck call does when it returns."""
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, call(timeout)))
        except BaseException as exc:  # handed to the caller's thread as it is
            box.append((False, exc))

    thread = threading.Thread(target=run, name="mirror-txn-call", daemon=True)
    thread.start()
    thread.join(timeout + HANG_GRACE)
    if not box:
        raise TransactionFailed(f"no answer within {timeout + HANG_GRACE:g}s; producer abandoned", fenced=True)
    ok, value = box[0]
    if ok:
        return value  # type: ignore[no-any-return]
    raise value


def transact(what: str, call: Callable[[float], T], timeout: float) -> T:
    """One transactional call of a producer (`call(remaining)`), retried while librdkafka says
    it is retriable and time is left; a fenced or fatal error (or a call that never returns)
    is `TransactionFailed(fenced=True)`, one that requires an abort `TransactionFailed(fenced=False)`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return _bounded(call, max(0.1, deadline - time.monotonic()))
        except TransactionFailed as exc:
            raise TransactionFailed(f"{what}: {exc}", fenced=exc.fenced, error=exc.error) from exc
        except KafkaException as exc:
            err = exc.args[0]
            if err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED):
                raise TransactionFailed(f"{what}: {err.str()}", fenced=True, error=err) from exc
            if err.txn_requires_abort():
                raise TransactionFailed(f"{what}: {err.str()}", fenced=False, error=err) from exc
            if not err.retriable() or time.monotonic() >= deadline:
                raise TransactionFailed(f"{what}: {err.str()}", fenced=False, error=err) from exc


def refused_grant(
    cluster: str, what: str, exc: TransactionFailed, *, writer_id: str, group: str, topics: Iterable[str]
) -> AuthorizationFailed | None:
    """The missing grant a failed transactional call reports, named as `mirror acls` lists it
    (None: not a refusal). A refusal is no fault to retry: the worker stops with it."""
    err = exc.error
    if err is None or err.code() not in AUTHORIZATION:
        return None
    if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
        return authorization_error(cluster, err, what, ("Read", "group", group))
    if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        # TxnOffsetCommit's refusal names the partition ("TOPIC((null))[P](Broker: Topic ...)").
        named = [t for t in sorted(set(topics)) if f"{t}(" in err.str()] or sorted(set(topics))
        return authorization_error(cluster, err, what, ("Read", "topic", ", ".join(named)))
    # InitProducerId, AddPartitionsToTxn, EndTxn: a transactional id the principal may not Write.
    return authorization_error(cluster, err, what, ("Write", "transactional-id", writer_id))
