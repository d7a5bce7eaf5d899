"""The engine's counter path: plain counters the storage layer bumps as it works, read on scrape.

A :class:`LogStats` lives on every :class:`~tierlog.log.Log` (``log.stats``) and counts what
happened to that partition: appends, flushes, rolls, cleanup runs and its traffic with the
remote tier. The counters are plain ints (and nanoseconds from ``perf_counter_ns`` where time
is measured): no metrics library, no registry and no lock on the append path, which already
runs under the log's lock. What is a level rather than an event (size, segment count, offsets,
copy lag) is not counted at all: the exporter reads it from the log when scraped.

The remote counters are bumped from the copy and reader pools, where several threads may count
for one partition at once, so they go through methods that take a small lock of their own.

This module imports nothing of tierlog's: every layer may count into it, and exporters (the
``tierlog.plugins.metrics`` plugin) only read it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

__all__ = ["CacheStats", "CleanupCounts", "LogStats", "perf_ns"]

#: The clock of every measured duration (monotonic, nanoseconds).
perf_ns = time.perf_counter_ns


class CleanupCounts(Protocol):
    """What a cleanup run reports that the counters keep (a ``CleanupResult``)."""

    segments_deleted: int
    bytes_deleted: int
    bytes_before: int
    bytes_after: int


class LogStats:
    """Event counters of one partition's log (``log.stats``). Totals since the log was opened.

    The append, flush and roll counters are bumped under the log's lock; the cleanup counters
    by the one cleanup run of the log at a time; the remote counters through the ``remote_*``
    methods, which are thread-safe.
    """

    __slots__ = (
        "_remote_lock",
        "append_bytes",
        "append_messages",
        "cleaner_bytes_after",
        "cleaner_bytes_before",
        "cleaner_bytes_deleted",
        "cleaner_runs",
        "cleaner_segments_deleted",
        "cleaner_time_ns",
        "flush_time_ns",
        "flushes",
        "general_append_time_ns",
        "general_appends",
        "remote_copy_bytes",
        "remote_copy_errors",
        "remote_copy_requests",
        "remote_delete_errors",
        "remote_delete_requests",
        "remote_fetch_bytes",
        "remote_fetch_errors",
        "remote_fetch_requests",
        "rolls",
    )

    def __init__(self) -> None:
        #: Bytes and records appended (every path; the bytes as written, headers included).
        self.append_bytes = 0
        self.append_messages = 0
        #: Appends that took the general path (producer ids, compression, control batches,
        #: rolls) and their time; the plain producer hot path is counted but not timed
        #: (two clock reads would cost it ~5%).
        self.general_appends = 0
        self.general_append_time_ns = 0
        self.flushes = 0
        self.flush_time_ns = 0
        self.rolls = 0
        #: Runs of a cleanup policy (delete, compact, a plugin's) on this log, their time,
        #: the bytes of the segments compaction rewrote before/after, what retention deleted.
        self.cleaner_runs = 0
        self.cleaner_time_ns = 0
        self.cleaner_bytes_before = 0
        self.cleaner_bytes_after = 0
        self.cleaner_segments_deleted = 0
        self.cleaner_bytes_deleted = 0
        self.remote_copy_requests = 0
        self.remote_copy_bytes = 0
        self.remote_copy_errors = 0
        self.remote_fetch_requests = 0
        self.remote_fetch_bytes = 0
        self.remote_fetch_errors = 0
        self.remote_delete_requests = 0
        self.remote_delete_errors = 0
        self._remote_lock = threading.Lock()

    # -- the log's own events (under the log's lock) ------------------------------------

    def record_flush(self, elapsed_ns: int) -> None:
        self.flushes += 1
        self.flush_time_ns += elapsed_ns

    def record_cleanup(self, result: CleanupCounts, elapsed_ns: int) -> None:
        """One run of a cleanup policy over the log and what it reported."""
        self.cleaner_runs += 1
        self.cleaner_time_ns += elapsed_ns
        self.cleaner_bytes_before += result.bytes_before
        self.cleaner_bytes_after += result.bytes_after
        self.cleaner_segments_deleted += result.segments_deleted
        self.cleaner_bytes_deleted += result.bytes_deleted

    # -- the remote tier (copy and reader pools: thread-safe) ----------------------------

    @contextmanager
    def remote_copy(self, size: int) -> Iterator[None]:
        """Count one segment copy of ``size`` bytes around it: its bytes once it succeeded,
        an error if it raised."""
        with self._remote_lock:
            self.remote_copy_requests += 1
        try:
            yield
        except BaseException:
            with self._remote_lock:
                self.remote_copy_errors += 1
            raise
        with self._remote_lock:
            self.remote_copy_bytes += size

    @contextmanager
    def remote_fetch(self) -> Iterator[None]:
        """Count one remote fetch (a read below the local log start) around it, and an error
        if it raised; the bytes go through :meth:`remote_fetched`."""
        with self._remote_lock:
            self.remote_fetch_requests += 1
        try:
            yield
        except BaseException:
            with self._remote_lock:
                self.remote_fetch_errors += 1
            raise

    def remote_fetched(self, size: int) -> None:
        """``size`` bytes of a segment's ``.log`` came back from the tier."""
        with self._remote_lock:
            self.remote_fetch_bytes += size

    @contextmanager
    def remote_delete(self) -> Iterator[None]:
        """Count one remote segment delete around it, and an error if it raised."""
        with self._remote_lock:
            self.remote_delete_requests += 1
        try:
            yield
        except BaseException:
            with self._remote_lock:
                self.remote_delete_errors += 1
            raise

    def snapshot(self) -> dict[str, int]:
        """Every counter by name (a copy)."""
        return {name: getattr(self, name) for name in self.__slots__ if not name.startswith("_")}


class CacheStats:
    """Hits, misses (fetched from the remote tier) and evictions of a cache, bumped under the
    cache's own lock."""

    __slots__ = ("evictions", "hits", "misses")

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def snapshot(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "evictions": self.evictions}
