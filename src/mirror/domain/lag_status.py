"""Lag status (OK, WARN, ERR, STOP, STALL) of a partition and a flow, judged Burrow-style from a window of lag observations (pure).

Fixed lag thresholds do not work for a mirror: 10,000 records behind is nothing on a
busy topic and an outage on a quiet one. Like LinkedIn's Burrow, this evaluator asks
what the mirror's position *did* over the last few observations instead:

* **OK**: the lag is zero now (an idle, caught-up partition is OK however long its
  position has not moved: that is the false STOP Burrow's users hit), or the position
  is moving and the lag is not steadily growing.
* **WARN**: the position moves, but the lag never went down across the window: the
  mirror is alive but slower than the producers.
* **ERR**: the position went backwards (REWIND: records will be mirrored again), or it
  fell below the source's log start (records expired before they were mirrored: lost).
* **STOP**: lag > 0 and the position did not move over the window, and the mirror's
  group has no active member: the mirror is not running.
* **STALL**: lag > 0 and the position did not move although the mirror is running (or
  its liveness is unknown): it is stuck, e.g. commits vetoed or a record it cannot write.

No thresholds to tune. The only time input is `min_span`: a position is judged "not
moving" only once the unchanged observations span at least that long. The monitor sets
it from the flow's `commit_interval` (the mirror commits no more often than that, so a
shorter span proves nothing). Time is injected, so all of it is tested without sleeping.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum


class Status(IntEnum):
    """Values of `mirror_flow_status` (docs/design.md); the flow reports its highest."""

    OK = 0
    WARN = 1
    ERR = 2
    STOP = 3
    STALL = 4


@dataclass(frozen=True, slots=True)
class Observation:
    time: float  # seconds (any monotonic-enough clock; only differences matter)
    position: int  # the mirror's committed source position (next offset not yet acked)
    end: int  # source end offset (read_committed)
    start: int = 0  # source log start offset
    active: bool | None = None  # does the mirror's group have members? None: unknown

    @property
    def lag(self) -> int:
        return max(0, self.end - max(self.position, self.start))


@dataclass(frozen=True, slots=True)
class Verdict:
    status: Status
    reason: str  # one phrase for `mirror lag` and logs: "caught up", "rewound", …

    @property
    def name(self) -> str:
        return self.status.name


WINDOW = 10  # observations kept per partition, as Burrow's default
MIN_OBSERVATIONS = 3  # fewer than this is not a trend
# Reported (as OK: no evidence of a problem yet) while a lagging partition has fewer
# observations than a trend needs; `mirror lag` shows it as "?" rather than a confident OK.
NOT_JUDGED = "behind; not enough observations to judge yet"


CAUGHT_UP = Verdict(Status.OK, "caught up")


def evaluate(window: Iterable[Observation], *, min_span: float = 0.0, size: int = WINDOW) -> Verdict:
    """The status of one partition from its observations, oldest first.

    `size` is the full window length: WARN needs a whole window of lag that never went
    down (as in Burrow), so a busy partition's ordinary jitter does not warn.
    """
    obs = list(window)
    if not obs:
        return Verdict(Status.OK, "no data")
    last = obs[-1]
    if last.position < last.start and last.end > last.start:
        return Verdict(Status.ERR, f"position {last.position} is below the log start {last.start}: records expired before they were mirrored")
    for a, b in zip(obs, obs[1:]):
        if b.position < a.position:
            return Verdict(Status.ERR, f"position went back from {a.position} to {b.position} (rewind)")
    if last.lag == 0:
        return CAUGHT_UP
    # Judge only what happened since the partition was last caught up: a zero lag earlier
    # in the window says nothing about a mirror that stopped right after it.
    zeros = [i for i, o in enumerate(obs) if o.lag == 0]
    tail = obs[zeros[-1] + 1:] if zeros else obs
    # Positions never decrease from here on, so the observations at the current position
    # are a suffix of the tail.
    still = [o for o in tail if o.position == last.position]
    span = last.time - still[0].time
    if len(still) >= MIN_OBSERVATIONS and span >= min_span:
        if last.active is False:
            return Verdict(Status.STOP, f"not moving for {span:.0f}s with {last.lag} records behind and no mirror running")
        return Verdict(Status.STALL, f"not moving for {span:.0f}s with {last.lag} records behind although the mirror runs")
    if len(tail) < MIN_OBSERVATIONS:
        return Verdict(Status.OK, NOT_JUDGED)
    lags = [o.lag for o in tail]
    if len(tail) >= size and all(b >= a for a, b in zip(lags, lags[1:])) and lags[-1] > lags[0]:
        return Verdict(Status.WARN, f"falling behind: lag grew from {lags[0]} to {lags[-1]} over {last.time - tail[0].time:.0f}s")
    return Verdict(Status.OK, "caught up recently" if zeros else "behind, moving")


class Evaluator:
    """Keeps a window of observations per partition and judges partitions and flows."""

    def __init__(self, window: int = WINDOW, *, min_span: float = 0.0) -> None:
        self._size = window
        self._min_span = min_span
        self._windows: dict[tuple[str, str, int], deque[Observation]] = {}

    def observe(self, flow: str, topic: str, partition: int, obs: Observation) -> Verdict:
        key = (flow, topic, partition)
        win = self._windows.get(key)
        if win is None:
            win = self._windows[key] = deque(maxlen=self._size)
        if win and obs.end < win[-1].end:
            win.clear()  # the topic was recreated or truncated: the old window says nothing now
        win.append(obs)
        if len(win) == 1 and obs.end <= max(obs.position, obs.start):
            return CAUGHT_UP  # what `evaluate` says of one observation with no lag, without its work (`mirror lag`: 10,000 of them)
        return evaluate(win, min_span=self._min_span, size=self._size)

    def forget(self, flow: str, keep: Iterable[tuple[str, int]]) -> None:
        """Drop windows of partitions the flow no longer mirrors (deleted topics)."""
        keep_set = set(keep)
        for key in [k for k in self._windows if k[0] == flow and (k[1], k[2]) not in keep_set]:
            del self._windows[key]


def worst(verdicts: Iterable[Verdict]) -> Status:
    """A flow's status: its worst partition's (the highest value)."""
    return max((v.status for v in verdicts), default=Status.OK)
