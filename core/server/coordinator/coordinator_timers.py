"""Where the coordinators' timers come from: the running event loop in the server, a manual
timer source in tests (the one home of "call this later" for sessions, rebalances and
pending members).

Session timeouts and rebalance deadlines are one-shot callbacks after a delay. Scheduling
them through :class:`Timers` rather than ``loop.call_later`` directly lets a test fire them
deterministically with :class:`ManualTimers` (advance virtual time; due callbacks run in
deadline order) instead of waiting on the wall clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any, Protocol


class TimerHandle(Protocol):
    """A scheduled callback that can be cancelled (``asyncio.TimerHandle`` is one)."""

    def cancel(self) -> None: ...


class Timers(Protocol):
    """Schedules ``callback(*args)`` after ``delay_s`` seconds."""

    def call_later(self, delay_s: float, callback: Callable[..., object],
                   *args: object) -> TimerHandle: ...


class LoopTimers:
    """The running asyncio loop's timers (the server's)."""

    def call_later(self, delay_s: float, callback: Callable[..., object],
                   *args: object) -> TimerHandle:
        return asyncio.get_running_loop().call_later(delay_s, callback, *args)


class _ManualHandle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualTimers:
    """Virtual time for tests: callbacks fire only in :meth:`advance`, in deadline order
    (ties in scheduling order), so timeouts are exercised without sleeping."""

    def __init__(self) -> None:
        self.now_ms = 0
        self._heap: list[tuple[int, int, _ManualHandle, Callable[..., object],
                               tuple[Any, ...]]] = []
        self._seq = itertools.count()

    def call_later(self, delay_s: float, callback: Callable[..., object],
                   *args: object) -> TimerHandle:
        if delay_s < 0:
            raise ValueError(f"a timer's delay must not be negative, got {delay_s}")
        handle = _ManualHandle()
        due = self.now_ms + round(delay_s * 1000)
        heapq.heappush(self._heap, (due, next(self._seq), handle, callback, args))
        return handle

    @property
    def pending(self) -> int:
        """How many scheduled callbacks are neither fired nor cancelled."""
        return sum(1 for entry in self._heap if not entry[2].cancelled)

    def advance(self, ms: int) -> int:
        """Move virtual time ``ms`` forward, running every callback due by then (including
        ones those callbacks schedule within the window); returns how many ran."""
        if ms < 0:
            raise ValueError(f"time only moves forward, got {ms} ms")
        target = self.now_ms + ms
        ran = 0
        while self._heap and self._heap[0][0] <= target:
            due, _, handle, callback, args = heapq.heappop(self._heap)
            if handle.cancelled:
                continue
            self.now_ms = max(self.now_ms, due)
            handle.cancelled = True
            callback(*args)
            ran += 1
        self.now_ms = target
        return ran
