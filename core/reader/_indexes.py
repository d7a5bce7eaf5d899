"""Kafka's segment indexes read from the bytes of remote index objects (no mmap, no files):
offset and time lookups, batch-aligned byte ranges and split points. (A ``.txnindex`` object
is decoded by ``tierlog.index.transaction_index.decode_aborted_txns``.)

Thin views: the entry layouts, the sanity rules and the search are ``tierlog.index.entries``,
the same code the live, memory-mapped indexes use.
"""

from __future__ import annotations

from collections.abc import Sequence

from tierlog.index.entries import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    check_offset_entries,
    check_time_entries,
    largest_lower_bound,
    smallest_upper_bound,
)

_OFFSET_SIZE = OFFSET_ENTRY.size
_INT32 = OFFSET_ENTRY.key  # both fields of an offset index entry
_POSITION_AT = OFFSET_ENTRY.value_at
_TIME_SIZE = TIME_ENTRY.size
_TIMESTAMP = TIME_ENTRY.key
_TIME_OFFSET = TIME_ENTRY.value
_TIME_OFFSET_AT = TIME_ENTRY.value_at


class OffsetIndexView:
    """The entries of a ``.index`` object: ``relativeOffset int32 | position int32``, each the
    last offset of a batch and the position where that batch starts. Checked as the live
    index's sanity check checks a file. Immutable, hence thread-safe.
    """

    __slots__ = ("base_offset", "data", "entries")

    def __init__(self, data: bytes, base_offset: int, source: str) -> None:
        OFFSET_ENTRY.check_length(len(data), source)
        self.data = data
        self.base_offset = base_offset
        self.entries = len(data) // _OFFSET_SIZE
        check_offset_entries(data, self.entries, base_offset, source)

    def offset(self, slot: int) -> int:
        """The absolute offset of entry ``slot``."""
        return self.base_offset + _INT32(self.data, slot * _OFFSET_SIZE)[0]

    def position(self, slot: int) -> int:
        """The position of entry ``slot``."""
        return _INT32(self.data, slot * _OFFSET_SIZE + _POSITION_AT)[0]

    def offset_at(self, position: int) -> int | None:
        """The last offset of the batch at ``position`` when an entry names it, else None."""
        slot = smallest_upper_bound(self.data, _INT32, _OFFSET_SIZE, _POSITION_AT,
                                    position, self.entries)
        return self.offset(slot) if slot >= 0 and self.position(slot) == position else None

    def start_position(self, offset: int) -> int:
        """Where a scan for ``offset`` starts: the batch of the largest indexed offset <=
        ``offset``, or 0 (Kafka's lookup)."""
        slot = largest_lower_bound(self.data, _INT32, _OFFSET_SIZE, 0,
                                   offset - self.base_offset, 0, self.entries)
        return self.position(slot) if slot >= 0 else 0

    def end_position(self, end_offset: int, size: int) -> int:
        """A batch boundary at or after the end of every batch holding offsets below
        ``end_offset`` (exclusive): the next indexed batch after the first entry that reaches
        ``end_offset - 1``, or ``size``."""
        slot = smallest_upper_bound(self.data, _INT32, _OFFSET_SIZE, 0,
                                    end_offset - 1 - self.base_offset, self.entries)
        return self.position(slot + 1) if 0 <= slot < self.entries - 1 else size

    def split_points(self, start: int, end: int, target: int,
                     keep_whole: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Batch boundaries that cut ``[start, end)`` into pieces of about ``target`` bytes,
        never inside one of the ``keep_whole`` ``[from, to)`` byte ranges."""
        points: list[int] = []
        last = start
        first = 1 + largest_lower_bound(self.data, _INT32, _OFFSET_SIZE, _POSITION_AT,
                                        start, 0, self.entries)
        for slot in range(first, self.entries):
            position = self.position(slot)
            if position >= end:
                break
            if position - last < target or position == last:
                continue
            if any(a < position < b for a, b in keep_whole):
                continue
            points.append(position)
            last = position
        return points


class TimeIndexView:
    """The entries of a ``.timeindex`` object: ``timestamp int64 | relativeOffset int32``.
    Entry ``(T, O)`` says that no record up to offset ``O`` has a timestamp above ``T``, and
    that the batch ending at ``O`` holds a record stamped ``T``. Checked as the live index's
    sanity check checks a file. Immutable, hence thread-safe.
    """

    __slots__ = ("base_offset", "data", "entries")

    def __init__(self, data: bytes, base_offset: int, source: str) -> None:
        TIME_ENTRY.check_length(len(data), source)
        self.data = data
        self.base_offset = base_offset
        self.entries = len(data) // _TIME_SIZE
        check_time_entries(data, self.entries, base_offset, source)

    def offset(self, slot: int) -> int:
        """The absolute offset of entry ``slot``."""
        return self.base_offset + _TIME_OFFSET(self.data, slot * _TIME_SIZE + _TIME_OFFSET_AT)[0]

    def bracket(self, timestamp: int) -> tuple[int | None, int | None]:
        """``(below, reaching)``: the last offset up to which every record is older than
        ``timestamp`` (None when no entry says so), and an offset by which a record stamped
        ``timestamp`` or later has appeared (None when the index knows of none)."""
        slot = smallest_upper_bound(self.data, _TIMESTAMP, _TIME_SIZE, 0, timestamp,
                                    self.entries)
        first_reaching = self.entries if slot < 0 else slot
        below = self.offset(first_reaching - 1) if first_reaching > 0 else None
        reaching = self.offset(first_reaching) if first_reaching < self.entries else None
        return below, reaching

