"""The one exception tree of the project, and the exit codes it maps to.

Every failure a user can meet is a `MirrorError` subclass carrying its exit code, so the
CLI root (and only it) turns exceptions into messages and statuses. Core code raises
these; it never prints or calls `sys.exit`.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit statuses; a contract with scripts and runbooks (docs/design.md)."""

    OK = 0
    FAILURE = 1  # runtime failure: cluster unreachable past its timeout, fatal produce error
    USAGE = 2  # usage or config error
    UNSAFE = 3  # refused as unsafe (e.g. group still active on the target)
    SOURCE_GAP = 4  # a flow with on_source_gap: stop found records the source lost before they were copied
    INTERRUPTED = 130  # Ctrl-C


class MirrorError(Exception):
    """Root of every error this project raises on purpose.

    `hint` is one short sentence telling the user how to fix it; it is printed after the
    message so the message itself can stay a plain statement of fact.
    """

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(MirrorError):
    """A flag or argument is wrong."""

    exit_code = ExitCode.USAGE


class ConfigError(UsageError):
    """The config file is wrong; `key` is the dotted path of the offending entry."""

    def __init__(self, key: str | None, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{key}: {message}" if key else message, hint=hint)
        self.key = key


class ConfigProblems(ConfigError):
    """Several things are wrong in the config file: all of them, one line each."""

    def __init__(self, problems: list[ConfigError]) -> None:
        super().__init__(None, f"{len(problems)} problems in the config:")
        self.key = problems[0].key
        self.problems = problems

    def __str__(self) -> str:
        return "\n".join([self.message, *(f"  {p}" for p in self.problems)])


class ClusterUnavailable(MirrorError):
    """A Kafka cluster did not answer within its timeout."""


class KafkaOperationError(MirrorError):
    """A Kafka request failed for a reason other than reachability."""

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.code = code


class FatalProduceError(MirrorError):
    """A record cannot be written to the target; the flow stops without committing past it."""

    def __init__(
        self, topic: str, partition: int, offset: int, reason: str, *, hint: str | None = None, size: int | None = None
    ) -> None:
        super().__init__(f"cannot mirror {topic}[{partition}]@{offset}: {reason}", hint=hint)
        self.topic, self.partition, self.offset = topic, partition, offset
        self.size = size  # key + value bytes of the record, when the target refused its size


class OffsetStoreError(MirrorError):
    """The offset store (SQLite or Cassandra) failed or is unreachable."""


class UnsafeOperation(MirrorError):
    """Refused because carrying on could lose or corrupt consumer positions."""

    exit_code = ExitCode.UNSAFE


class NotFound(UsageError):
    """Something named by the user (group, topic, flow) does not exist."""


class DevClusterError(MirrorError):
    """A local dev cluster (Kafka or Cassandra) could not be set up or started."""


class AuthenticationFailed(ClusterUnavailable):
    """A cluster refused the TLS handshake or the SASL login; says what failed, never the secret."""


class AuthorizationFailed(KafkaOperationError):
    """The cluster refused a request for want of an ACL; names principal, operation and resource."""


class SourceGapError(MirrorError):
    """A flow with `on_source_gap: stop` found source records deleted before they were copied;
    it stopped before copying anything past them (docs/running.md, "Source gaps")."""

    exit_code = ExitCode.SOURCE_GAP
