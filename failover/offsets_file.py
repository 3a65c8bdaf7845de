"""The offsets file: a group's committed offsets on one cluster, as JSON.

`export` writes it, `apply` writes one as its backup before changing anything, `import`
restores one. The format is small and stable on purpose, so a backup taken during an
incident can be read (and edited) by a person:

    {"version": 1, "cluster": "sf", "group": "billing", "time_ms": 1795838580000,
     "offsets": [{"topic": "nyc.orders", "partition": 0, "offset": 42}]}
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from mirror.errors import ClusterUnavailable, UnsafeOperation, UsageError
from mirror.kafka import Admin

VERSION = 1


@dataclass(frozen=True)
class GroupOffsets:
    cluster: str
    group: str
    time_ms: int
    offsets: dict[tuple[str, int], int]

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "cluster": self.cluster,
            "group": self.group,
            "time_ms": self.time_ms,
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(self.offsets.items())],
        }

    @classmethod
    def from_json(cls, doc: Any, source: str, flag: str = "FILE") -> GroupOffsets:
        try:
            if doc.get("version") != VERSION:
                raise ValueError(f"unsupported version {doc.get('version')!r}")
            offsets = {(str(e["topic"]), int(e["partition"])): int(e["offset"]) for e in doc["offsets"]}
            return cls(str(doc["cluster"]), str(doc["group"]), int(doc.get("time_ms", 0)), offsets)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise UsageError(
                f"{flag}: {source} is not an offsets file ({malformed(exc)})",
                hint="pass a file written by `mirror failover export` or by `apply` as its backup",
            ) from None


def malformed(exc: Exception) -> str:
    """What is wrong with a JSON document read by hand-written code, in words."""
    return f"no {exc.args[0]!r} key" if isinstance(exc, KeyError) else str(exc)


def write(path: Path, doc: GroupOffsets) -> None:
    write_json(path, doc.to_json())


def write_json(path: Path, body: Any, *, indent: int | None = 2) -> None:
    """Write atomically and fsync: a backup that may be half-written is no backup.

    `indent=None` for large documents: one line, by json's C encoder (with an indent the
    pure-Python one runs, about 1 s per 10,000 offsets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(body, f, indent=indent)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path, flag: str = "FILE") -> Any:
    """A JSON file's document; a usage error naming `flag` when it cannot be read or parsed."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{flag}: cannot read {str(path)!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"{flag}: {str(path)!r} is not JSON: {exc}") from None


def read(path: Path) -> GroupOffsets:
    return GroupOffsets.from_json(read_json(path), str(path))


T = TypeVar("T")


def coordinated(admin: Admin, call: Callable[[], T]) -> T:
    """Run a group request, riding out a coordinator that is not ready yet.

    A cluster where no group ever committed has no `__consumer_offsets` yet: the first
    group request creates it and meanwhile fails fast with NOT_COORDINATOR. Such fast
    failures are retried for up to the cluster's timeout; a cluster that does not answer
    at all already took that long and is reported at once.
    """
    deadline = time.monotonic() + admin.timeout
    while True:
        started = time.monotonic()
        try:
            return call()
        except ClusterUnavailable:
            if time.monotonic() - started > 2.0 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def export(admin: Admin, cluster: str, group: str, now_ms: int) -> GroupOffsets:
    return GroupOffsets(cluster, group, now_ms, coordinated(admin, lambda: admin.group_offsets(group)))


def require_idle(admin: Admin, cluster: str, group: str) -> None:
    """Exit 3 while the group has members: their next commit would overwrite ours anyway."""
    members = coordinated(admin, lambda: admin.group_members(group))
    if members:
        raise UnsafeOperation(
            f"group {group!r} has {members} active member{'s' if members != 1 else ''} on cluster "
            f"{cluster!r}; nothing was changed",
            hint="stop the group's consumers there, then run this again",
        )


def restore(admin: Admin, doc: GroupOffsets) -> dict[tuple[str, int], int]:
    """Make the group's offsets on the cluster exactly `doc.offsets`; returns what they were.

    Exactly: partitions the file does not list end up with no committed offset, which is
    what a backup of a group that had none must restore. That needs deleting the group
    first (allowed only while it is empty, which `require_idle` checked).
    """
    require_idle(admin, doc.cluster, doc.group)
    before = coordinated(admin, lambda: admin.group_offsets(doc.group))
    extra = set(before) - set(doc.offsets)
    if extra:
        admin.delete_groups([doc.group])
    if doc.offsets:
        admin.alter_group_offsets(doc.group, doc.offsets)
    return before
