"""`--at TIME`: ISO 8601, epoch milliseconds, or relative (`-15m`) -> epoch milliseconds (pure).

The reading itself lives in `mirror.domain.times`, shared with a flow's `start_from`.
"""

from __future__ import annotations

from mirror.domain.times import format_ms, parse_time

__all__ = ["format_ms", "parse_time"]
