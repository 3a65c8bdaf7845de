"""TIME values: ISO 8601, epoch milliseconds, or relative (`-15m`) -> epoch milliseconds (pure).

One reading for every place a user writes a time: `failover plan --at`, `audit --from`, and a
flow's `start_from`, so a time that works in one works in all.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from mirror.errors import UsageError

_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# Epoch milliseconds have 13 digits today; fewer digits are most likely seconds, and
# silently reading them as milliseconds would fail over to January 1970.
_EPOCH_MS = re.compile(r"^\d{12,}$")

TIME_HELP = "use ISO 8601 (2026-11-22T04:03:00Z), epoch milliseconds (1795838580000) or relative (-15m)"


def relative_ms(value: str) -> int | None:
    """How far back a relative time (`-15m`) reaches, in ms; None if `value` is not relative."""
    m = _RELATIVE.match(value.strip())
    return int(float(m.group(1)) * _UNIT_MS[m.group(2)]) if m else None


def parse_time(
    value: str, now_ms: int, what: str = "--at", future: str = "a failover can only start from a time that has passed"
) -> int:
    """Epoch ms of `value`; `UsageError` (exit 2, naming `what`) if it does not parse or lies ahead."""
    text = value.strip()
    back = relative_ms(text)
    if back is not None:
        ms = now_ms - back
    elif _EPOCH_MS.match(text):
        ms = int(text)
    else:
        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise UsageError(f"{what}: cannot read {value!r} as a time", hint=TIME_HELP) from None
        if dt.tzinfo is None:
            # A bare local time in an incident is ambiguous across datacenters; UTC is the
            # only reading that means the same thing on every host.
            dt = dt.replace(tzinfo=UTC)
        ms = int(dt.timestamp() * 1000)
    if ms > now_ms:
        raise UsageError(f"{what}: {value!r} is in the future", hint=future)
    return ms


def format_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
