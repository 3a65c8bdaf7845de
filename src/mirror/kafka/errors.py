"""confluent-kafka's errors turned into this project's exceptions, and their classes."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from mirror.errors import ClusterUnavailable, KafkaOperationError

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


HINT_UNREACHABLE = "check that its brokers are up and its bootstrap address is right"


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
                hint=HINT_UNREACHABLE,
            ) from exc
        raise KafkaOperationError(f"cluster {cluster!r}: cannot {what}: {err.str()}", code=err.name()) from exc
    raise KafkaOperationError(f"cluster {cluster!r}: cannot {what}: {exc}") from exc
