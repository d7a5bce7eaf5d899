"""Scheduler: periodic background tasks (flush, retention, checkpoints, tiering) on an injectable
clock.

In production a daemon thread runs due tasks; tests call ``run_due()`` after moving a fake clock,
so nothing ever waits on wall time.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from tierlog.common.clock import system_time_ms

# system_time_ms is re-exported: manager.py imports it from here (to be switched to
# tierlog.common.clock).
__all__ = ["Scheduler", "system_time_ms"]

log = logging.getLogger(__name__)


@dataclass(order=True, slots=True)
class _Task:
    due_ms: int
    seq: int
    name: str = field(compare=False)
    fn: Callable[[], object] = field(compare=False)
    period_ms: int = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class Scheduler:
    """Runs named tasks once or every ``period_ms``, in due order.

    Thread-safe. A task that raises is logged and, if periodic, rescheduled: one failing
    flush must not stop retention. ``start()`` runs tasks on a daemon thread; without it,
    ``run_due()`` runs whatever is due now (the deterministic mode tests use).
    """

    def __init__(self, time_ms: Callable[[], int] = system_time_ms, name: str = "tierlog") -> None:
        self._time_ms = time_ms
        self._name = name
        self._queue: list[_Task] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def schedule(self, name: str, fn: Callable[[], object], *, delay_ms: int = 0,
                 period_ms: int = -1) -> _Task:
        """Run ``fn`` after ``delay_ms`` and then every ``period_ms`` (once if negative)."""
        with self._cond:
            task = _Task(self._time_ms() + delay_ms, next(self._seq), name, fn, period_ms)
            heapq.heappush(self._queue, task)
            self._cond.notify()
            return task

    def cancel(self, task: _Task) -> None:
        with self._cond:
            task.cancelled = True

    def task_names(self) -> list[str]:
        with self._cond:
            return sorted({t.name for t in self._queue if not t.cancelled})

    def run_due(self) -> int:
        """Run every task due at the current clock time; returns how many ran."""
        ran = 0
        while True:
            task = self._pop_due()
            if task is None:
                return ran
            self._run(task)
            ran += 1

    def _pop_due(self) -> _Task | None:
        with self._cond:
            while self._queue and self._queue[0].cancelled:
                heapq.heappop(self._queue)
            if self._queue and self._queue[0].due_ms <= self._time_ms():
                return heapq.heappop(self._queue)
            return None

    def _run(self, task: _Task) -> None:
        try:
            task.fn()
        except Exception:  # a failing task must not kill the scheduler
            log.exception("scheduled task %s failed", task.name)
        if task.period_ms >= 0 and not task.cancelled:
            with self._cond:
                task.due_ms = self._time_ms() + task.period_ms
                task.seq = next(self._seq)
                heapq.heappush(self._queue, task)

    # -- background thread -----------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name=f"{self._name}-scheduler",
                                            daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                wait_s = 1.0
                if self._queue:
                    wait_s = max(0.0, (self._queue[0].due_ms - self._time_ms()) / 1000)
                if wait_s > 0:
                    self._cond.wait(timeout=min(wait_s, 1.0))
                    continue
            self.run_due()

    def shutdown(self) -> None:
        """Stop the thread (letting a running task finish) and drop every pending task."""
        with self._cond:
            self._stopping = True
            self._queue.clear()
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
