"""ExponentialBackoff: Kafka's ``org.apache.kafka.common.utils.ExponentialBackoff``, the one home
of the retry delays of the RemoteLogManager's failed tasks
(``remote.log.manager.task.retry.backoff.ms`` / ``.backoff.max.ms`` / ``.retry.jitter``), and
RetrySchedule, which remembers per key (a partition) when its next attempt is due.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["ExponentialBackoff", "RetrySchedule"]

_K = TypeVar("_K", bound=Hashable)


class ExponentialBackoff:
    """``initial_ms * multiplier ** attempts`` times a random factor in
    ``[1 - jitter, 1 + jitter)``, at most ``max_ms`` (Kafka's formula: the exponent is capped
    where the term would pass ``max_ms``). ``rng`` returns a float in [0, 1) (injectable)."""

    def __init__(self, initial_ms: int, multiplier: float, max_ms: int, jitter: float, *,
                 rng: Callable[[], float] = random.random) -> None:
        if initial_ms < 0 or max_ms < 0 or multiplier < 1 or not 0 <= jitter < 1:
            raise ValueError(f"bad backoff: initial {initial_ms} ms, x{multiplier}, "
                             f"max {max_ms} ms, jitter {jitter}")
        self.initial_ms = initial_ms
        self.multiplier = multiplier
        self.max_ms = max_ms
        self.jitter = jitter
        self._rng = rng
        self._exp_max = (math.log(max_ms / max(initial_ms, 1)) / math.log(multiplier)
                         if max_ms > initial_ms and multiplier > 1 else 0.0)

    def backoff_ms(self, attempts: int) -> int:
        """The delay before retry number ``attempts + 1`` (``attempts`` failures so far, from 0)."""
        if self._exp_max == 0:
            return min(self.initial_ms, self.max_ms)
        term = self.initial_ms * self.multiplier ** min(float(attempts), self._exp_max)
        factor = 1.0 if self.jitter <= 0 else 1 - self.jitter + 2 * self.jitter * self._rng()
        return min(int(factor * term), self.max_ms)


class RetrySchedule(Generic[_K]):
    """Failures per key and when each may be tried again. Thread-safe."""

    def __init__(self, backoff: ExponentialBackoff) -> None:
        self.backoff = backoff
        self._lock = threading.Lock()
        self._state: dict[_K, tuple[int, int]] = {}

    def failed(self, key: _K, now_ms: int) -> int:
        """Count a failure of ``key``; returns the time its next attempt is due."""
        with self._lock:
            attempts = self._state.get(key, (0, 0))[0]
            due = now_ms + self.backoff.backoff_ms(attempts)
            self._state[key] = (attempts + 1, due)
            return due

    def succeeded(self, key: _K) -> None:
        with self._lock:
            self._state.pop(key, None)

    def due(self, key: _K, now_ms: int) -> bool:
        """Whether ``key`` may run now (never failed, or its backoff has passed)."""
        state = self._state.get(key)
        return state is None or now_ms >= state[1]

    def attempts(self, key: _K) -> int:
        """Consecutive failures of ``key``."""
        state = self._state.get(key)
        return 0 if state is None else state[0]

    def next_attempt_ms(self, key: _K) -> int | None:
        state = self._state.get(key)
        return None if state is None else state[1]
