"""RateQuota: Kafka's remote-storage quota (``RLMQuotaManager``), a byte rate over the quota
windows, made exact for the copy path: no trailing window ever carries more than its budget.

The one home of the copy and fetch quotas of the RemoteLogManager
(``remote.log.manager.{copy,fetch}.max.bytes.per.second`` = X and their
``...quota.window.num`` / ``...quota.window.size.seconds``). The settings keep Kafka's names
and meaning, an average rate over the quota windows, measured two ways:

* :meth:`rate`, :meth:`throttle_time_ms`, :meth:`is_exceeded` and :meth:`record` are Kafka's
  ``Rate`` of a ``SampledStat`` (``window_num`` samples of ``window_size_s``; the rate is the
  bytes of the live samples over the time they span, at least ``window_num - 1`` whole
  windows; over the bound the throttle time is ``(rate - bound) / bound * window``). The
  fetch path uses them as Kafka does: a read is refused while the quota is exceeded, and
  what it read is recorded after (its size is not known before).
* :meth:`try_acquire` / :meth:`acquire` (the copy path, which knows a segment's size before
  it starts) grant bytes against a sliding log of the grants of the last
  ``span = max(window_num - 1, 1) * window_size_s`` seconds (10 s with Kafka's defaults) and a
  token bucket of one ``window_size_s``'s worth (``X * window_size_s``, refilled at X).
  A grant of n bytes is made only when both hold, checked and recorded under one lock (no
  race lets several copies start before their usage is counted):

  - the bytes granted in the trailing span plus n stay within ``X * span``;
  - the bucket holds ``min(n, X * window_size_s)`` tokens (n are taken; a grant larger
    than the bucket leaves it in debt, which the next grants wait out).

  The guarantee: every interval of ``span`` seconds carries at most ``X * span`` granted
  bytes (the sampled rate's budget; Kafka's own sampled check lets up to ``window_num``
  samples' worth plus one segment through), with one exception: a single request larger
  than ``X * span`` is granted when nothing else was granted in the trailing span (it would
  otherwise never go), and that interval carries it alone. The bucket paces saturating
  copies at X from the start (an idle quota lets one window's worth through at once, not
  the whole span's budget), so after the first span every interval of ``span`` seconds of a
  saturating load carries between ``X * span`` less about one request and ``X * span``.
  A caller over the quota sleeps the computed time until both conditions can hold (when
  enough old grants leave the span and the bucket has refilled), not a poll; its waits are
  counted in :attr:`throttle_time_ms_total` and :attr:`throttled_count`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from tierlog.config import LONG_MAX

__all__ = ["RateQuota"]

#: A sleep of a computed wait may end a float's rounding short of the instant it named (a
#: millisecond clock near 1.7e12 has a resolution of 2.4e-4 ms); these
#: absorb that (far below a millisecond and a byte), so the retry after a wait is granted.
_EPSILON_MS = 1e-3
_BYTE_SLACK = 1e-6


class RateQuota:
    """A byte rate against ``max_bytes_per_second`` (``LONG_MAX``: unlimited) over
    ``window_num`` windows of ``window_size_s`` (see the module docstring for the exact
    guarantee of :meth:`acquire`). ``time_ms`` is the clock (injectable for tests);
    ``sleep(seconds, wake)`` is how :meth:`acquire` waits (default: ``wake.wait(seconds)``, so
    :meth:`close` wakes waiters). Thread-safe."""

    def __init__(self, max_bytes_per_second: int, window_num: int = 11,
                 window_size_s: int = 1, *, time_ms: Callable[[], float],
                 sleep: Callable[[float, threading.Event], object] | None = None) -> None:
        if max_bytes_per_second <= 0:
            raise ValueError(f"quota {max_bytes_per_second} bytes/s must be positive")
        if window_num < 1 or window_size_s < 1:
            raise ValueError(f"quota windows {window_num} x {window_size_s} s must be >= 1")
        self.max_bytes_per_second = max_bytes_per_second
        self.window_num = window_num
        self.window_ms = window_size_s * 1000
        #: The sliding span of :meth:`acquire`'s grant log, ms, and the bytes it may carry.
        self.span_ms = max(window_num - 1, 1) * self.window_ms
        self.span_budget = max_bytes_per_second * self.span_ms / 1000
        #: The token bucket's capacity: one window's worth.
        self.burst = max_bytes_per_second * self.window_ms / 1000
        self._time_ms = time_ms
        self._sleep = sleep or (lambda seconds, wake: wake.wait(seconds))
        self._lock = threading.Lock()
        #: [window start ms, bytes] of each live sample, oldest first (Kafka's SampledStat).
        self._samples: list[list[float]] = []
        #: (time ms, bytes) of each grant within the trailing span, oldest first, and their sum.
        self._grants: deque[tuple[float, float]] = deque()
        self._granted = 0.0
        self._tokens = self.burst
        self._tokens_at: float | None = None
        self._closed = threading.Event()
        #: Total milliseconds callers of :meth:`acquire` were throttled (a metric).
        self.throttle_time_ms_total = 0.0
        #: How many times :meth:`acquire` had to wait (a metric).
        self.throttled_count = 0

    @property
    def unlimited(self) -> bool:
        return self.max_bytes_per_second >= LONG_MAX

    # -- Kafka's SampledStat / Rate -------------------------------------------------------

    def _purge(self, now: float) -> None:
        expire = self.window_num * self.window_ms
        samples = self._samples
        while samples and now - samples[0][0] >= expire:
            samples.pop(0)

    def _record_sample(self, amount: float, now: float) -> None:
        samples = self._samples
        if not samples or now - samples[-1][0] >= self.window_ms:
            samples.append([now, 0.0])
            if len(samples) > self.window_num:
                samples.pop(0)
        samples[-1][1] += amount

    def _window_ms(self, now: float) -> float:
        """Kafka's ``Rate.windowSize``: time since the oldest sample, at least
        ``window_num - 1`` whole windows."""
        elapsed = now - self._samples[0][0] if self._samples else 0.0
        full = int(elapsed // self.window_ms)
        minimum = self.window_num - 1
        if full < minimum:
            elapsed += (minimum - full) * self.window_ms
        return max(elapsed, 1.0)

    def _throttle_ms(self, now: float) -> float:
        if self.unlimited:
            return 0.0
        self._purge(now)
        window = self._window_ms(now)
        rate = sum(s[1] for s in self._samples) * 1000.0 / window
        bound = self.max_bytes_per_second
        if rate <= bound:
            return 0.0
        return (rate - bound) / bound * window

    # -- the grant log and the bucket (acquire's exact check) -----------------------------

    def _prune(self, now: float) -> None:
        grants = self._grants
        while grants and now - grants[0][0] >= self.span_ms - _EPSILON_MS:
            self._granted -= grants.popleft()[1]
        if not grants:
            self._granted = 0.0  # no float drift survives an empty span

    def _refill(self, now: float) -> None:
        if self._tokens_at is not None and now > self._tokens_at:
            self._tokens = min(self.burst, self._tokens
                               + (now - self._tokens_at) * self.max_bytes_per_second / 1000)
        self._tokens_at = now if self._tokens_at is None else max(self._tokens_at, now)

    def _use(self, amount: float, now: float) -> None:
        """Count ``amount`` used now everywhere (samples, grant log, bucket)."""
        self._record_sample(amount, now)
        self._prune(now)
        self._refill(now)
        self._grants.append((now, float(amount)))
        self._granted += amount
        self._tokens -= amount

    def _grant_wait_ms(self, amount: int, now: float) -> float:
        """0 when ``amount`` may be granted now, else the milliseconds until it may (with no
        other grant in between)."""
        self._prune(now)
        self._refill(now)
        wait = 0.0
        # The span: which old grants must leave it first (all of them for an oversize one).
        excess = (self._granted if amount > self.span_budget
                  else self._granted + amount - self.span_budget)
        if excess > 0:
            freed = 0.0
            for at, size in self._grants:
                freed += size
                if freed >= excess - _BYTE_SLACK:
                    wait = at + self.span_ms - now
                    break
        # The bucket: how long until it holds min(amount, burst) tokens.
        need = min(float(amount), self.burst) - self._tokens
        if need > _BYTE_SLACK:
            wait = max(wait, need * 1000 / self.max_bytes_per_second)
        return wait if wait > _EPSILON_MS else 0.0

    # -- public ----------------------------------------------------------------------------

    def rate(self) -> float:
        """Bytes per second over the live samples now (Kafka's sampled rate)."""
        with self._lock:
            now = self._time_ms()
            self._purge(now)
            return sum(s[1] for s in self._samples) * 1000.0 / self._window_ms(now)

    def throttle_time_ms(self) -> float:
        """0 while the sampled rate is within the quota, else how long to wait (Kafka's
        ``getThrottleTimeMs``; the fetch path's check)."""
        with self._lock:
            return self._throttle_ms(self._time_ms())

    def is_exceeded(self) -> bool:
        """Kafka's ``isQuotaExceeded``."""
        return self.throttle_time_ms() > 0

    def record(self, amount: int) -> None:
        """Count ``amount`` bytes used now (a fetch records what it read)."""
        if self.unlimited:
            return
        with self._lock:
            self._use(amount, self._time_ms())

    def try_acquire(self, amount: int) -> float:
        """Atomically: 0 and ``amount`` recorded when it may be granted now (the module's
        rule), else the milliseconds until it may (nothing recorded)."""
        if self.unlimited:
            return 0.0
        with self._lock:
            now = self._time_ms()
            wait = self._grant_wait_ms(amount, now)
            if wait <= 0:
                self._use(amount, now)
            return wait

    def acquire(self, amount: int, cancelled: threading.Event | None = None) -> bool:
        """Wait until ``amount`` may be granted, then record it (the copy's check before a
        copy starts). The waits are added to :attr:`throttle_time_ms_total`. False (nothing
        recorded) when ``cancelled`` is set or the quota is closed while waiting."""
        while True:
            throttle = self.try_acquire(amount)
            if throttle <= 0:
                return True
            with self._lock:
                self.throttle_time_ms_total += throttle
                self.throttled_count += 1
            if self._closed.is_set() or (cancelled is not None and cancelled.is_set()):
                return False
            self._sleep(throttle / 1000.0, self._closed)
            if self._closed.is_set() or (cancelled is not None and cancelled.is_set()):
                return False

    def close(self) -> None:
        """Wake every waiter of :meth:`acquire`; they return False."""
        self._closed.set()

    def __repr__(self) -> str:
        limit = "unlimited" if self.unlimited else f"{self.max_bytes_per_second} B/s"
        return (f"RateQuota({limit}, {self.window_num} x {self.window_ms // 1000} s, "
                f"throttled {self.throttle_time_ms_total:.0f} ms)")
