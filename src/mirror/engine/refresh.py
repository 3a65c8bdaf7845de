"""`RefreshRequests`: the units' way to ask the target watch (engine/target_watch.py) for a refresh.

Its own module so that the units that ask (the forwarder, the delivery reports) do not import
the watch, which wires the units that resync.
"""

from __future__ import annotations


class RefreshRequests:
    """Asks the target watch for a refresh before its interval is up.

    `soon`: a target partition is unknown to the producer, or a fence ended. `gone_at_delivery`:
    a delivery report said a target topic is gone, and the refresh must rewind even if the
    topic is still there. Invariant: each flag is cleared only by the one who acts on it.
    """

    def __init__(self) -> None:
        self._soon = False
        self._gone = False

    def soon(self) -> None:
        self._soon = True

    def gone_at_delivery(self) -> None:
        self._soon = self._gone = True

    def take(self) -> bool:
        """Was a refresh asked for? (The loop refreshes now, so the request is spent.)"""
        asked, self._soon = self._soon, False
        return asked

    def take_gone(self) -> bool:
        gone, self._gone = self._gone, False
        return gone
