"""LogSegments: a partition's segments ordered by base offset, with floor/higher lookups.

A sorted list of base offsets beside a dict; lookups are binary searches. Not thread-safe:
the owning Log mutates it under its lock, readers take a snapshot with ``values()``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator

from tierlog.log.segment import LogSegment


class LogSegments:
    """The segments of one log, keyed by base offset."""

    __slots__ = ("_offsets", "_segments")

    def __init__(self) -> None:
        self._offsets: list[int] = []
        self._segments: dict[int, LogSegment] = {}

    def add(self, segment: LogSegment) -> LogSegment | None:
        """Insert (or replace) the segment at its base offset; returns the one replaced."""
        base = segment.base_offset
        previous = self._segments.get(base)
        if previous is None:
            insort(self._offsets, base)
        self._segments[base] = segment
        return previous

    def remove(self, base_offset: int) -> LogSegment | None:
        segment = self._segments.pop(base_offset, None)
        if segment is not None:
            del self._offsets[bisect_left(self._offsets, base_offset)]
        return segment

    def clear(self) -> None:
        self._offsets.clear()
        self._segments.clear()

    def __len__(self) -> int:
        return len(self._offsets)

    def __bool__(self) -> bool:
        return bool(self._offsets)

    def __contains__(self, base_offset: int) -> bool:
        return base_offset in self._segments

    def get(self, base_offset: int) -> LogSegment | None:
        return self._segments.get(base_offset)

    @property
    def active(self) -> LogSegment:
        """The last segment: the only one that takes appends."""
        return self._segments[self._offsets[-1]]

    @property
    def first(self) -> LogSegment | None:
        return self._segments[self._offsets[0]] if self._offsets else None

    def floor(self, offset: int) -> LogSegment | None:
        """The segment with the largest base offset <= ``offset``."""
        i = bisect_right(self._offsets, offset)
        return self._segments[self._offsets[i - 1]] if i else None

    def higher(self, offset: int) -> LogSegment | None:
        """The segment with the smallest base offset > ``offset``."""
        i = bisect_right(self._offsets, offset)
        return self._segments[self._offsets[i]] if i < len(self._offsets) else None

    def values(self, start: int | None = None, stop: int | None = None) -> list[LogSegment]:
        """Segments in order; with bounds, those whose base offset is in ``[floor(start), stop)``."""
        lo = 0
        if start is not None:
            lo = max(0, bisect_right(self._offsets, start) - 1)
        hi = len(self._offsets) if stop is None else bisect_left(self._offsets, stop)
        return [self._segments[o] for o in self._offsets[lo:hi]]

    def non_active(self) -> list[LogSegment]:
        return [self._segments[o] for o in self._offsets[:-1]]

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self.values())

    def base_offsets(self) -> list[int]:
        return list(self._offsets)

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments.values())
