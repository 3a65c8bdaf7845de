"""confluent-kafka's errors turned into this project's exceptions, and their classes.

Security failures get messages of their own. librdkafka reports a refused TLS handshake or
SASL login only to a client's `error_cb` (the request itself just times out, "transport
failure"), so every client built here records its last such error (`note_security_error`)
and a timeout on a cluster that refused the login is reported as that refusal instead.
None of librdkafka's texts quote a password; ours name the user, never the secret.
"""

from __future__ import annotations

import re
import threading

from confluent_kafka import KafkaError, KafkaException

from mirror.errors import AuthenticationFailed, AuthorizationFailed, ClusterUnavailable, KafkaOperationError

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

AUTHORIZATION = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "group",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional-id",
}
AUTHENTICATION = {
    KafkaError._AUTHENTICATION,
    KafkaError._SSL,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.ILLEGAL_SASL_STATE,
}

# Delivery errors that mean "this record can never be written", as opposed to the
# retriable ones librdkafka keeps retrying on its own.
SIZE_ERRORS = {KafkaError.MSG_SIZE_TOO_LARGE, getattr(KafkaError, "RECORD_LIST_TOO_LARGE", -1)}
# The target topic (or partition) does not exist (any more): deleted, or not yet grown.
GONE_ERRORS = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
# A record the client itself dropped, unsent or unanswered, when asked to purge.
PURGED_ERRORS = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}
# A client's error_cb saying its cluster is away (it retries on its own).
AWAY_ERRORS = {KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT}

_FATAL_PARTITION = re.compile(r"for (\S+) \[(\d+)\]")

_lock = threading.Lock()
_security_errors: dict[str, KafkaError] = {}
_principals: dict[str, str] = {}


HINT_UNREACHABLE = "check that its brokers are up and its bootstrap address is right"
HINT_NOT_READY = "retried; usual for a moment after a broker restart or while new topics are created"
# Of the errors above, those where nothing came back (the rest are answers: no leader yet).
_SILENT = {
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION,
}


def is_retriable(err: KafkaError) -> bool:
    if err.code() in AUTHORIZATION or err.code() in AUTHENTICATION:
        return False
    return bool(err.retriable()) or err.code() in _UNREACHABLE


def denied_in_fatal(err: KafkaError) -> tuple[str, str, str] | None:
    """The ACL (operation, resource kind, name) a fatal producer error says is missing.

    librdkafka wraps the broker's refusal in a fatal (gapless, idempotence) error whose code
    is not the broker's, only its text.
    """
    text = err.str()
    m = _FATAL_PARTITION.search(text)
    if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED or "Topic authorization failed" in text:
        return ("Write", "topic", m.group(1) if m else "the target topics")
    if err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED or "Cluster authorization failed" in text:
        # Since Kafka 3.0 (KIP-679) Write on any topic lets a producer be idempotent.
        return ("Write", "topic", "the target topics")
    return None


def fatal_partition(err: KafkaError) -> tuple[str, int] | None:
    """The target partition a fatal producer error names ("... for TOPIC [PARTITION] ..."), if any."""
    m = _FATAL_PARTITION.search(err.str())
    return (m.group(1), int(m.group(2))) if m else None


def is_size_refusal(err: KafkaError) -> bool:
    """Does a fatal producer error say a request was too large? (Its code is librdkafka's own.)"""
    return "size" in err.str().lower()


def note_principal(name: str, principal: str) -> None:
    with _lock:
        _principals[name] = principal


def principal_of(name: str) -> str:
    with _lock:
        return _principals.get(name) or _principals.get(name.split("-")[0]) or "the client's principal"


def note_security_error(name: str, err: KafkaError) -> None:
    """Remember a client's TLS/SASL failure (called from every client's error_cb)."""
    if err.code() in AUTHENTICATION:
        with _lock:
            _security_errors[name] = err


def security_error(name: str) -> KafkaError | None:
    with _lock:
        return _security_errors.get(name)


def _what_failed(err: KafkaError) -> str:
    text = err.str()
    low = text.lower()
    if "hostname" in low or "host name" in low:
        what = "TLS: the broker's certificate does not match its hostname"
    elif "certificate verify failed" in low or "could not be verified" in low:
        what = "TLS: the broker's certificate is not trusted (check ssl.ca.location)"
    elif err.code() == KafkaError._SSL:
        what = "TLS handshake failed (check security.protocol and the ssl.* settings)"
    elif "credentials" in low:
        what = "SASL credentials refused (check sasl.username and sasl.password)"
    elif "mechanism" in low:
        what = "SASL mechanism refused (check sasl.mechanism)"
    else:
        what = "authentication failed"
    # librdkafka prefixes the broker ("sasl_ssl://127.0.0.1:9093/bootstrap: ") and appends timings.
    detail = text.split(": ", 1)[-1].split(" (after ")[0]
    return f"{what}: {detail}"


def authentication_error(cluster: str, err: KafkaError) -> AuthenticationFailed:
    return AuthenticationFailed(f"cluster {cluster!r}: {principal_of(cluster)} cannot log in: {_what_failed(err)}")


def authorization_error(
    cluster: str, err: KafkaError, what: str, acl: tuple[str, str, str] | None = None
) -> AuthorizationFailed:
    """`acl`: (operation, resource kind, resource name) the request needed, when known."""
    who = principal_of(cluster)
    if acl is not None:
        op, kind, name = acl
        need = f"{op} on {kind} {name!r}" if kind != "cluster" else f"{op} on the cluster"
    else:
        need = f"the {AUTHORIZATION.get(err.code(), 'resource')} ACL this needs"
    return AuthorizationFailed(
        f"cluster {cluster!r}: {who} is not allowed to {what}: missing {need} ({err.name()})",
        hint="grant it; `mirror acls -c CONFIG` lists every ACL the mirror needs",
    )


def raise_if_refused(cluster: str, what: str, err: KafkaError, *, group: str, topic: str, op: str = "Read") -> None:
    """A client's error event that is a refused grant, raised naming it: a consumer or
    producer gets those as events (message errors, delivery reports), not exceptions, and
    would otherwise go on retrying as if the cluster were slow. A refused idempotence id
    (CLUSTER_AUTHORIZATION_FAILED) is `op` on the topic: since Kafka 3.0 (KIP-679) that grants it."""
    if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
        raise authorization_error(cluster, err, what, ("Read", "group", group))
    if err.code() in AUTHORIZATION:
        raise authorization_error(cluster, err, what, (op, "topic", topic))


def raise_for(
    cluster: str, what: str, exc: BaseException, timeout: float | None = None, acl: tuple[str, str, str] | None = None
) -> None:
    """Re-raise a confluent-kafka failure as the project's exception."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    if isinstance(err, KafkaError):
        if err.code() in AUTHORIZATION:
            raise authorization_error(cluster, err, what, acl) from None
        if err.code() in AUTHENTICATION:
            raise authentication_error(cluster, err) from None
        if err.code() in _UNREACHABLE:
            refused = security_error(cluster)
            if refused is not None:
                raise authentication_error(cluster, refused) from None
            if err.code() in _SILENT:
                within = f" within {timeout:g}s" if timeout else ""
                raise ClusterUnavailable(
                    f"cluster {cluster!r} did not answer{within} while trying to {what}", hint=HINT_UNREACHABLE
                ) from exc
            # It did answer: no leader or coordinator right now (a broker restarting, a topic
            # being created). Said as it is, not as an unreachable cluster.
            raise ClusterUnavailable(
                f"cluster {cluster!r} could not {what} yet: {err.str()}", hint=HINT_NOT_READY
            ) from exc
        raise KafkaOperationError(f"cluster {cluster!r}: cannot {what}: {err.str()}", code=err.name()) from exc
    raise KafkaOperationError(f"cluster {cluster!r}: cannot {what}: {exc}") from exc
