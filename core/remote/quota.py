"""RateQuota: Kafka's remote-storage quota (``RLMQuotaManager``): a byte rate measured over
sampled windows, with the throttle time a caller must wait while it is exceeded.

The one home of the copy and fetch quotas of the RemoteLogManager
(``remote.log.manager.{copy,fetch}.max.bytes.per.second`` and their
``...quota.window.num`` / ``...quota.window.size.seconds``). As Kafka's ``Rate`` of a
``SampledStat``: ``window_num`` samples of ``window_size_s`` each; the rate is the bytes of the
samples not yet expired divided by the time they span, which counts at least
``window_num - 1`` whole windows (so a fresh quota does not read a tiny elapsed time as a huge
rate). Over the bound, the throttle time is Kafka's ``(rate - bound) / bound * window``: how
long until the rate is back at the bound with nothing more recorded.

:meth:`acquire` is the copy path's check: the check and the record of the usage happen under
one lock (Kafka's fix for several copy threads all starting before any usage was counted), and a
caller over the quota waits, its wait added to :attr:`throttle_time_ms_total`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tierlog.config import LONG_MAX

__all__ = ["RateQuota"]


class RateQuota:
    """A byte rate over sampled windows against ``max_bytes_per_second`` (``LONG_MAX``:
    unlimited). ``time_ms`` is the clock (injectable for tests); ``sleep(seconds, wake)`` is
    how :meth:`acquire` waits (default: ``wake.wait(seconds)``, so :meth:`close` and a recorded
    usage wake waiters). Thread-safe."""

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
        self._time_ms = time_ms
        self._sleep = sleep or (lambda seconds, wake: wake.wait(seconds))
        self._lock = threading.Lock()
        #: [window start ms, bytes] of each live sample, oldest first.
        self._samples: list[list[float]] = []
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

    def _record(self, amount: float, now: float) -> None:
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

    # -- public ----------------------------------------------------------------------------

    def rate(self) -> float:
        """Bytes per second over the live samples now."""
        with self._lock:
            now = self._time_ms()
            self._purge(now)
            return sum(s[1] for s in self._samples) * 1000.0 / self._window_ms(now)

    def throttle_time_ms(self) -> float:
        """0 while the rate is within the quota, else how long to wait (Kafka's
        ``getThrottleTimeMs``)."""
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
            self._record(amount, self._time_ms())

    def try_acquire(self, amount: int) -> float:
        """Atomically: 0 and ``amount`` recorded when the quota is not exceeded now, else the
        throttle time (nothing recorded)."""
        if self.unlimited:
            return 0.0
        with self._lock:
            now = self._time_ms()
            throttle = self._throttle_ms(now)
            if throttle <= 0:
                self._record(amount, now)
            return throttle

    def acquire(self, amount: int, cancelled: threading.Event | None = None) -> bool:
        """Wait while the quota is exceeded, then record ``amount`` (the copy's check before
        a copy starts). The waits are added to :attr:`throttle_time_ms_total`. False (nothing
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
