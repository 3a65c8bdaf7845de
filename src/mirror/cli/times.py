"""`--at TIME`: ISO 8601, epoch milliseconds, or relative (`-15m`) -> epoch milliseconds (pure)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from mirror.errors import UsageError

_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# Epoch milliseconds have 13 digits today; fewer digits are most likely seconds, and
# silently reading them as milliseconds would fail over to January 1970.
_EPOCH_MS = re.compile(r"^\d{12,}$")

_HELP = "use ISO 8601 (2026-11-22T04:03:00Z), epoch milliseconds (1795838580000) or relative (-15m)"


def parse_time(value: str, now_ms: int) -> int:
    """Epoch ms of `value`; `UsageError` (exit 2, naming --at) if it does not parse or lies ahead."""
    text = value.strip()
    m = _RELATIVE.match(text)
    if m:
        ms = now_ms - int(float(m.group(1)) * _UNIT_MS[m.group(2)])
    elif _EPOCH_MS.match(text):
        ms = int(text)
    else:
        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise UsageError(f"--at: cannot read {value!r} as a time", hint=_HELP) from None
        if dt.tzinfo is None:
            # A bare local time in an incident is ambiguous across datacenters; UTC is the
            # only reading that means the same thing on every host.
            dt = dt.replace(tzinfo=UTC)
        ms = int(dt.timestamp() * 1000)
    if ms > now_ms:
        raise UsageError(
            f"--at: {value!r} is in the future", hint="a failover can only start from a time that has passed"
        )
    return ms


def format_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
