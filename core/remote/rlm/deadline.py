"""Bounded waits on the remote tier: RemoteCalls runs a remote call on its own threads and
waits for it at most a timeout, and BoundedReaderPool is Kafka's remote reader thread pool
with a bounded queue.

A caller never waits on the object store longer than its timeout: a call that does not answer
in time is abandoned (cancelled if it has not started; otherwise its thread is left to finish,
and the caller decides what a late finish may still do, see RemoteLogManager), and the caller
gets a retriable RemoteTimeoutError naming the call. The number of threads a hung store can
hold is the pools' size.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from tierlog.errors import RemoteReaderBusyError, RemoteStorageError, RemoteTimeoutError

__all__ = ["BoundedReaderPool", "RemoteCalls"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


def wait_bounded(future: Future[_T], timeout_s: float, what: str,
                 error: type[RemoteTimeoutError] = RemoteTimeoutError) -> _T:
    """``future``'s result within ``timeout_s``; else the future is cancelled (when it has not
    started) and ``error`` names ``what``. The one place a remote wait is bounded."""
    try:
        return future.result(timeout=timeout_s)
    except FutureTimeout:
        future.cancel()
        raise error(f"{what}: no answer from the remote tier within "
                    f"{timeout_s * 1000:.0f} ms; abandoned") from None
    except CancelledError:  # the pool was shut down before the call ran
        raise RemoteStorageError(f"{what}: cancelled, the remote tier is closing") from None


class RemoteCalls:
    """Runs remote calls on ``threads`` threads of its own, each waited for at most
    ``timeout_s`` (``remote.storage.request.timeout.ms``). Thread-safe."""

    def __init__(self, threads: int, timeout_s: float, name: str = "tierlog-remote-call") -> None:
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=name)
        self._lock = threading.Lock()
        #: Calls that timed out after they had started (their threads may still be blocked).
        self.abandoned_total = 0

    def submit(self, fn: Callable[[], _T]) -> Future[_T]:
        try:
            return self._pool.submit(fn)
        except RuntimeError as exc:  # shut down
            raise RemoteStorageError(f"remote calls are closed: {exc}") from None

    def call(self, what: str, fn: Callable[[], _T],
             on_abandon: Callable[[Future[_T]], None] | None = None) -> _T:
        """``fn()`` on a call thread, waited for at most the timeout; on a timeout
        ``on_abandon(future)`` is told of a call that had started (it may still finish)."""
        future = self.submit(fn)
        try:
            return wait_bounded(future, self.timeout_s, what)
        except RemoteTimeoutError:
            if not future.cancelled():
                with self._lock:
                    self.abandoned_total += 1
                if on_abandon is not None:
                    on_abandon(future)
            raise

    def close(self) -> None:
        """Stop taking calls; queued ones are cancelled, running ones are not waited for."""
        self._pool.shutdown(wait=False, cancel_futures=True)


class BoundedReaderPool:
    """Kafka's RemoteStorageThreadPool: ``threads`` reader threads and a queue of at most
    ``max_pending`` reads waiting for one; a read submitted to a full queue raises
    RemoteReaderBusyError at once (retriable). Thread-safe."""

    def __init__(self, threads: int, max_pending: int, name: str = "tierlog-fetch") -> None:
        self.threads = threads
        self.max_pending = max_pending
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._queued = 0
        self._running = 0

    def queue_size(self) -> int:
        """Reads waiting for a reader thread (Kafka's RemoteLogReaderTaskQueueSize)."""
        return self._queued

    def active(self) -> int:
        """Reads running on a reader thread now."""
        return self._running

    def submit(self, fn: Callable[[], _T]) -> Future[_T]:
        with self._lock:
            # Reads beyond the free threads wait in the queue: the bound is on those.
            if self._queued + self._running >= self.threads + self.max_pending:
                raise RemoteReaderBusyError(
                    f"remote reader queue is full ({self._queued} reads waiting for "
                    f"{self.threads} threads, remote.log.reader.max.pending.tasks="
                    f"{self.max_pending}); retry the read")
            self._queued += 1

        def run() -> _T:
            with self._lock:
                self._queued -= 1
                self._running += 1
            try:
                return fn()
            finally:
                with self._lock:
                    self._running -= 1

        try:
            future = self._pool.submit(run)
        except RuntimeError as exc:
            with self._lock:
                self._queued -= 1
            raise RemoteStorageError(f"remote reader is closed: {exc}") from None
        future.add_done_callback(self._dequeue_if_cancelled)
        return future

    def _dequeue_if_cancelled(self, future: Future[Any]) -> None:
        if future.cancelled():  # never ran: it leaves the queue here
            with self._lock:
                self._queued -= 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
