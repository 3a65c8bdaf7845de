"""`read_capped`: one batch of source records, within the flow's read cap."""

from __future__ import annotations

import threading
from typing import Any

from mirror.domain.throttle import Throttle


def read_capped(consumer: Any, throttle: Throttle, stop: threading.Event, most: int) -> list[Any]:
    """A batch of at most `most` source records, or none while the cap holds reading back.

    Throttled, the loop does not read at all (librdkafka's prefetch fills up and stops
    fetching), but it still serves reports and commits what was sent: the cap delays only
    reading, never an acknowledgement or a commit. The wait is short (0.1 s at most), so a
    stop, a commit tick or a report is never far away.
    """
    allowed = throttle.allowed(most)
    if not allowed:
        stop.wait(min(throttle.delay(), 0.1))
        return []
    # Take what is there without waiting for a full batch (consume(n, t) returns only when n
    # records arrived or t passed, so at low rates every record would wait t); only when
    # nothing is there, block briefly for the next one.
    msgs: list[Any] = consumer.consume(allowed, 0) or consumer.consume(1, 0.1)
    if msgs and throttle.capped:
        throttle.took(len(msgs), sum(len(m.key() or b"") + len(m.value() or b"") for m in msgs))
    return msgs
