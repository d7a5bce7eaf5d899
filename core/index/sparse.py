"""Where a segment's sparse indexes take their entries: the one home of Kafka's rule.

An offset-index entry ``(last offset of the batch, its position)`` goes in before a batch once
more than ``index.interval.bytes`` were written since the last entry; the time index takes the
segment's max timestamp (and its offset) at that same moment, when it rose above the time
index's last entry. Every writer of index entries asks this rule: the general append
(``LogSegment.append``), the active segment's Python appender (``PlainAppenderPy``) and the
recovery scan (``segment_recovery.scan_segment``). The C appender (``_segment_appender.c``)
cannot call Python per batch, so it mirrors :meth:`SparseIndexRule.add` line for line; a
parity test (tests/index/test_index_sparse.py) proves they place entries identically.

Not thread-safe: one rule belongs to one writer, under the owning log's lock.
"""

from __future__ import annotations

from typing import Final

__all__ = ["NO_ENTRY", "OFFSET_AND_TIME_ENTRY", "OFFSET_ENTRY", "SparseIndexRule"]

#: What :meth:`SparseIndexRule.add` says is due before the batch it was told about.
NO_ENTRY: Final = 0
OFFSET_ENTRY: Final = 1
OFFSET_AND_TIME_ENTRY: Final = 2


class SparseIndexRule:
    """The index-entry state of one segment's tail: ``since`` (bytes written since the last
    offset-index entry) and ``indexed_timestamp`` (the time index's last timestamp, -1 when
    it has none), against ``interval`` (``index.interval.bytes``)."""

    __slots__ = ("indexed_timestamp", "interval", "since")

    def __init__(self, interval: int, since: int = 0, indexed_timestamp: int = -1) -> None:
        self.interval = interval
        self.since = since
        self.indexed_timestamp = indexed_timestamp

    def add(self, size: int, max_timestamp: int) -> int:
        """Account a batch of ``size`` bytes, after which the segment's max timestamp is
        ``max_timestamp``; returns which entries are due at the batch's position: NO_ENTRY,
        OFFSET_ENTRY (the batch's last offset -> its position) or OFFSET_AND_TIME_ENTRY (also
        ``(max_timestamp, its offset)`` in the time index)."""
        since = self.since
        if since <= self.interval:
            self.since = since + size
            return NO_ENTRY
        self.since = size
        if max_timestamp > self.indexed_timestamp:
            self.indexed_timestamp = max_timestamp
            return OFFSET_AND_TIME_ENTRY
        return OFFSET_ENTRY
