"""The engine's counter path: plain counters the storage layer bumps as it works, read on scrape.

A :class:`LogStats` lives on every :class:`~tierlog.log.log.Log` (``log.stats``) and counts what
happened to that partition: appends, flushes, rolls, cleanup runs and its traffic with the
remote tier. The counters are plain ints, and a timed event goes into a :class:`Histogram`
(its count, total and recent percentiles, from ``perf_counter_ns``): no metrics library, no registry
and no lock on the append path, which already runs under the log's lock. What is a level rather than
an event (size, segment count, offsets, copy lag) is not counted at all: the exporter reads it from
the log when scraped.

The remote counters are bumped from the copy and reader pools, where several threads may count
for one partition at once, so they go through methods that take a small lock of their own.

This module imports nothing of tierlog's: every layer may count into it, and exporters (the
``tierlog.plugins.metrics`` plugin) only read it.
"""

from __future__ import annotations

import operator
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

__all__ = ["QUANTILES", "QUANTILE_VALUES", "CacheStats", "CleanupCounts", "Histogram",
           "LogStats", "percentiles", "perf_ns"]

#: The clock of every measured duration (monotonic, nanoseconds).
perf_ns = time.perf_counter_ns

#: The percentiles a Kafka (Yammer) histogram reports, by their JMX attribute names.
QUANTILES: tuple[tuple[str, float], ...] = (
    ("50thPercentile", 0.50), ("75thPercentile", 0.75), ("95thPercentile", 0.95),
    ("98thPercentile", 0.98), ("99thPercentile", 0.99), ("999thPercentile", 0.999))
QUANTILE_VALUES: tuple[float, ...] = tuple(q for _, q in QUANTILES)

#: A histogram's window: percentiles cover the current and the previous one (one to two
#: minutes of the recent past; Kafka's histograms decay over about five).
HISTOGRAM_WINDOW_NS = 60 * 10**9
#: Sub-buckets per power of two (a percentile is within 1/8 of the true value) and the
#: largest power of two kept (2**40 us, about 12 days; longer durations count as that).
_SUB_BITS = 3
_MAX_SHIFT = 36
_BUCKETS = ((_MAX_SHIFT + 1) << _SUB_BITS) + (1 << (_SUB_BITS + 1))
_SMALL = 1 << (_SUB_BITS + 1)
_LARGEST_US = (1 << (_MAX_SHIFT + _SUB_BITS + 1)) - 1


def _bounds_us(index: int) -> tuple[int, int]:
    """The smallest and largest duration (microseconds) bucket ``index`` counts."""
    if index < _SMALL:
        return index, index
    shift = (index >> _SUB_BITS) - 1
    mantissa = index - (shift << _SUB_BITS)
    return mantissa << shift, ((mantissa + 1) << shift) - 1


class Histogram:
    """Durations of one kind of event: how many (``count``, since the start), their total
    (``total_ns``), and percentiles of the recent past.

    Durations are counted in log-linear buckets of microseconds (8 per power of two) in two
    windows of ``window_ns``: :meth:`percentiles` read the current and the previous window,
    so they follow the recent past as Kafka's histograms do, at the cost of one list
    increment per event. ``record`` is called by one thread at a time (the owner's lock or
    event loop); readers on another thread see a consistent-enough view without a lock.
    """

    __slots__ = ("_clock", "_current", "_previous", "_rotate_at", "_window_ns", "count",
                 "total_ns")

    def __init__(self, window_ns: int = HISTOGRAM_WINDOW_NS,
                 clock: Callable[[], int] = perf_ns) -> None:
        self.count = 0
        self.total_ns = 0
        self._window_ns = window_ns
        self._clock = clock
        self._current = [0] * _BUCKETS
        self._previous = [0] * _BUCKETS
        self._rotate_at = clock() + window_ns

    def record(self, elapsed_ns: int, now_ns: int | None = None) -> None:
        """One event that took ``elapsed_ns`` (``now_ns``: the clock's reading, if the
        caller has it)."""
        self.count += 1
        self.total_ns += elapsed_ns
        now = self._clock() if now_ns is None else now_ns
        if now >= self._rotate_at:
            self._rotate(now)
        us = elapsed_ns // 1000
        if us < _SMALL:  # (a clock that stepped back counts as 0)
            self._current[max(us, 0)] += 1
            return
        shift = us.bit_length() - _SUB_BITS - 1
        if shift > _MAX_SHIFT:
            shift, us = _MAX_SHIFT, _LARGEST_US
        self._current[(shift << _SUB_BITS) + (us >> shift)] += 1

    def _rotate(self, now: int) -> None:
        stale = now >= self._rotate_at + self._window_ns
        self._previous = [0] * _BUCKETS if stale else self._current
        self._current = [0] * _BUCKETS
        self._rotate_at = now + self._window_ns

    def recent(self) -> list[int] | None:
        """The bucket counts of the recent past (the current and the previous window), or
        None when nothing happened in it."""
        now = self._clock()
        if self.count == 0 or now >= self._rotate_at + self._window_ns:
            return None
        if now >= self._rotate_at:
            return list(self._current)  # the current window is already the previous one
        return list(map(operator.add, self._current, self._previous))

    def percentiles(self, quantiles: Sequence[float] = QUANTILE_VALUES) -> list[float]:
        """Each quantile of the recent durations, in milliseconds (see :func:`percentiles`)."""
        return percentiles([self], quantiles)


def percentiles(histograms: Iterable[Histogram],
                quantiles: Sequence[float] = QUANTILE_VALUES) -> list[float]:
    """Each quantile (ascending) of the recent durations of ``histograms`` together, in
    milliseconds: the middle of the bucket it falls in (0 when there were none, as Kafka
    reports it)."""
    counts: list[int] | None = None
    for histogram in histograms:
        recent = histogram.recent()
        if recent is not None:
            counts = recent if counts is None else list(map(operator.add, counts, recent))
    total = sum(counts) if counts is not None else 0
    if counts is None or total == 0:
        return [0.0] * len(quantiles)
    out: list[float] = []
    index, seen = -1, 0
    for q in quantiles:
        rank = q * total
        while seen < rank or index < 0 or counts[index] == 0:
            index += 1
            seen += counts[index]
        low, high = _bounds_us(index)
        out.append((low + high) / 2 / 1000)
    return out


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
        "cleaner_segments_deleted",
        "cleanup_time",
        "flush_time",
        "general_append_time",
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
        #: rolls) and their times; the plain producer hot path is counted but not timed
        #: (two clock reads would cost it ~5%).
        self.general_append_time = Histogram()
        #: Flushes (fsync up to a new recovery point) and their times.
        self.flush_time = Histogram()
        self.rolls = 0
        #: Runs of a cleanup policy (delete, compact, a plugin's) on this log and their
        #: times, the bytes of the segments compaction rewrote before/after, what retention
        #: deleted.
        self.cleanup_time = Histogram()
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

    def record_general_append(self, elapsed_ns: int) -> None:
        """One append down the general path (its bytes and records are counted apart)."""
        self.general_append_time.record(elapsed_ns)

    def record_flush(self, elapsed_ns: int) -> None:
        self.flush_time.record(elapsed_ns)

    def record_cleanup(self, result: CleanupCounts, elapsed_ns: int) -> None:
        """One run of a cleanup policy over the log and what it reported."""
        self.cleanup_time.record(elapsed_ns)
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
        """Every counter by name (a copy); a timer as ``<name>_count`` and ``<name>_ns``."""
        out: dict[str, int] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, Histogram):
                out[f"{name}_count"], out[f"{name}_ns"] = value.count, value.total_ns
            elif not name.startswith("_"):
                out[name] = value
        return out


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
