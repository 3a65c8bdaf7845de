"""A flow's read cap: bytes and records per second, held by not reading (pure, clock injected).

Invariant: over any window of W seconds a throttled reader takes at most `rate * (W + 1)`
(one second's worth of burst) plus the size misjudged in one batch, unless one record is
larger than `MAX_DEBT_SECONDS` of the cap (read whole, never split). It holds because the
bucket never holds more than one second's worth, a read is asked only for what the bucket
holds (`allowed`), and a batch that overdraws it (records larger than the running average)
is paid back before the next read. Nothing is dropped and nothing waits that was already
read: the cap only decides when the next batch is read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Clock = Callable[[], float]

# The longest a read may wait to pay for what it took: a record larger than this much of the
# cap is forgiven the rest. The worker does not poll while it waits, and librdkafka takes a
# consumer that polls less often than max.poll.interval.ms (60 s at least) out of its group.
MAX_DEBT_SECONDS = 30.0


class TokenBucket:
    """Tokens refill at `rate` per second up to one second's worth; a take may overdraw."""

    def __init__(self, rate: float | None, clock: Clock) -> None:
        self._clock = clock
        self.rate = rate
        self.tokens = rate or 0.0
        self._last = clock()

    def set_rate(self, rate: float | None) -> None:
        self._refill()
        was, self.rate = self.rate, rate
        if rate is not None:
            # Newly capped: one second's worth to start with, as a bucket left to fill would hold.
            # A lowered cap keeps the debt in seconds, not bytes: at most MAX_DEBT_SECONDS of
            # the new rate, or reading would wait past max.poll.interval.ms.
            self.tokens = rate if was is None else max(min(self.tokens, rate), -MAX_DEBT_SECONDS * rate)

    def _refill(self) -> None:
        now = self._clock()
        if self.rate is not None:
            self.tokens = min(self.rate, self.tokens + (now - self._last) * self.rate)
        self._last = now

    def available(self) -> float:
        """Tokens held now (infinite when uncapped)."""
        self._refill()
        return float("inf") if self.rate is None else self.tokens

    def take(self, n: float) -> None:
        self._refill()
        if self.rate is not None:
            self.tokens = max(self.tokens - n, -MAX_DEBT_SECONDS * self.rate)

    def wait(self) -> float:
        """Seconds until the bucket holds a token again (0 now, or uncapped)."""
        self._refill()
        if self.rate is None or self.tokens > 0:
            return 0.0
        return (1.0 - self.tokens) / self.rate


class Throttle:
    """A flow's cap on the source records and bytes one worker reads per second.

    `--workers N` share the flow's cap: each worker takes `cap / N`, so the flow never reads
    more than the cap; a worker with fewer partitions than the others may read below its
    share meanwhile. `set_caps` may be called from another thread (a reload): the next read
    obeys the new caps.
    """

    def __init__(
        self,
        max_bytes: float | None = None,
        max_records: float | None = None,
        *,
        share: int = 1,
        clock: Clock,
    ) -> None:
        self._clock = clock
        self._share = max(1, share)
        self._lock = threading.Lock()
        self._bytes = TokenBucket(None, clock)
        self._records = TokenBucket(None, clock)
        # A record's key + value bytes: up at once to a batch's mean, down slowly, so a batch
        # of larger records than before overdraws the bucket once, not for many batches.
        self._avg_size: float | None = None  # None: no record read yet (read one to learn)
        self._last_count = 0  # records the previous read returned
        self._since: float | None = None  # throttled since (None: reading)
        self._throttled = 0.0  # seconds spent throttled before `_since`
        self.max_bytes: float | None = None
        self.max_records: float | None = None
        self.set_caps(max_bytes, max_records)

    @property
    def share(self) -> int:
        """How many workers share the flow's cap (each reads this fraction of it)."""
        return self._share

    @property
    def capped(self) -> bool:
        return self.max_bytes is not None or self.max_records is not None

    @property
    def holding(self) -> bool:
        """The cap held the last read back: records may be waiting at the source (not idle)."""
        return self._since is not None

    def set_caps(self, max_bytes: float | None, max_records: float | None) -> None:
        """The flow's caps (None: none); this worker takes its share of each."""
        with self._lock:
            self.max_bytes, self.max_records = max_bytes, max_records
            self._bytes.set_rate(None if max_bytes is None else max_bytes / self._share)
            self._records.set_rate(None if max_records is None else max_records / self._share)
            if not self.capped:
                self._end_throttled()

    def allowed(self, most: int) -> int:
        """How many records to read now (at most `most`); 0 while the cap holds reading back."""
        with self._lock:
            if not self.capped:
                return most
            records, nbytes = self._records.available(), self._bytes.available()
            if records <= 0 or nbytes <= 0:
                if self._since is None:
                    self._since = self._clock()
                return 0
            self._end_throttled()
            n = min(float(most), records)
            if self.max_bytes is not None:
                # Sizes are known only once read: a batch asks for what the bucket holds at
                # the mean size so far, and at most twice the previous batch, so a wrong
                # guess overdraws by one small batch rather than a whole one.
                guess = 1.0 if self._avg_size is None else nbytes / self._avg_size
                n = min(n, guess, 2.0 * self._last_count + 1)
            return max(1, int(n))

    def took(self, records: int, nbytes: int) -> None:
        """What a read returned: paid from the buckets (overdrawn if larger than expected)."""
        if records <= 0:
            return
        with self._lock:
            self._records.take(records)
            self._bytes.take(nbytes)
            self._last_count = records
            mean = max(1.0, nbytes / records)
            self._avg_size = mean if self._avg_size is None else max(mean, 0.8 * self._avg_size + 0.2 * mean)

    def delay(self) -> float:
        """Seconds until reading may go on (0: now)."""
        with self._lock:
            return max(self._records.wait(), self._bytes.wait())

    def throttled_seconds(self) -> float:
        """Time spent held back by the cap, this one included if it is going on."""
        with self._lock:
            now = self._clock()
            return self._throttled + (now - self._since if self._since is not None else 0.0)

    def _end_throttled(self) -> None:
        if self._since is not None:
            self._throttled += self._clock() - self._since
            self._since = None
