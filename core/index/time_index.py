"""TimeIndex: the sparse ``.timeindex`` of a segment, max timestamp so far -> offset.

An entry (T, O) means no record before offset O has a timestamp above T.
"""

from __future__ import annotations

from typing import NamedTuple

from tierlog.errors import IndexFullError, InvalidIndexOffsetError
from tierlog.index.base import AbstractIndex
from tierlog.index.entries import NO_TIMESTAMP, TIME_ENTRY, check_time_entries

__all__ = ["NO_TIMESTAMP", "TimeIndex", "TimestampOffset"]

_ENTRY = TIME_ENTRY.entry
_SIZE = TIME_ENTRY.size
_INT64 = TIME_ENTRY.key
_INT32 = TIME_ENTRY.value
_TIMESTAMP_FIELD = TIME_ENTRY.key_at
_OFFSET_FIELD = TIME_ENTRY.value_at


class TimestampOffset(NamedTuple):
    """A timestamp and the offset of the record it was seen at."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    """Entries of ``timestamp int64 | relativeOffset int32`` (12 bytes, big-endian).

    Timestamps strictly increase (an entry is only appended for a larger timestamp) and
    offsets never decrease. The last slot is kept for the entry written when the segment
    rolls, so ``is_full`` is true one slot early. Not thread-safe: the owning segment
    serialises access.

    The plain appender's contract (:class:`tierlog.log.segment_appender.PlainAppendTimeIndex`):
    ``entries`` and ``last_entry`` change only through :meth:`maybe_append`, truncation and
    resizing, or the armed appender, which writes an entry into :attr:`mapping` and sets both
    as :meth:`maybe_append` would, under the owning Log's lock.
    """

    layout = TIME_ENTRY
    entry_size = _SIZE
    last_entry: TimestampOffset
    """The last entry; ``(-1, base_offset)`` when the index is empty."""

    def _load_last_entry(self) -> None:
        if self.entries == 0:
            self.last_entry = TimestampOffset(NO_TIMESTAMP, self._base_offset)
        else:
            self.last_entry = self.entry(self.entries - 1)

    def is_full(self) -> bool:
        return self.entries >= self._max_entries - 1

    def entry(self, n: int) -> TimestampOffset:
        timestamp, relative = _ENTRY.unpack_from(self._buffer(), self._slot_of(n))
        return TimestampOffset(timestamp, self._base_offset + relative)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= ``target_timestamp``, or
        ``(-1, base_offset)`` when every entry is later or the index is empty."""
        slot = self._largest_lower_bound_slot(target_timestamp, _INT64, _TIMESTAMP_FIELD)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self._base_offset)
        timestamp, relative = _ENTRY.unpack_from(self._buffer(), slot * _SIZE)
        return TimestampOffset(timestamp, self._base_offset + relative)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if ``timestamp`` is above the last entry's.

        An offset or timestamp below the last entry's raises InvalidIndexOffsetError; an
        equal one is ignored (closing or rolling repeats the last entry). The roll/close
        entry passes ``skip_full_check`` to use the reserved last slot.
        """
        if not skip_full_check and self.is_full():
            raise IndexFullError(f"time index {self._path} is full ({self.entries} entries)")
        last = self.last_entry
        if self.entries:
            if offset < last.offset:
                raise InvalidIndexOffsetError(
                    f"offset {offset} appended to slot {self.entries} of time index "
                    f"{self._path} is below the last offset {last.offset}"
                )
            if timestamp < last.timestamp:
                raise InvalidIndexOffsetError(
                    f"timestamp {timestamp} appended to slot {self.entries} of time index "
                    f"{self._path} is below the last timestamp {last.timestamp}"
                )
        if timestamp <= last.timestamp:
            return
        self._check_writable()
        if self.entries >= self._max_entries:
            raise IndexFullError(f"time index {self._path} has no slot left for the entry "
                                 f"({timestamp}, {offset})")
        relative = self.relative_offset(offset)
        if (self.entries + 1) * _SIZE > self._reserved:
            self.reserve()  # the next step of disk under the mapping (OSError when full)
        _ENTRY.pack_into(self._buffer(), self.entries * _SIZE, timestamp, relative)
        self.entries += 1
        self.last_entry = TimestampOffset(timestamp, offset)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        relative = offset - self._base_offset
        slot = self._largest_lower_bound_slot(relative, _INT32, _OFFSET_FIELD)
        if slot >= 0 and _INT32(self._buffer(), slot * _SIZE + _OFFSET_FIELD)[0] == relative:
            # Offsets may repeat: drop the whole run equal to `offset`.
            while slot > 0 and _INT32(self._buffer(), (slot - 1) * _SIZE + _OFFSET_FIELD)[0] == relative:
                slot -= 1
            new_entries = slot
        else:
            new_entries = slot + 1
        self._truncate_to_entries(new_entries)

    def sanity_check(self) -> None:
        """Check the length, that timestamps strictly increase from >= 0, and that offsets
        start at or above the base offset and never decrease: an untrimmed (zero-tailed)
        or non-monotonic file fails."""
        TIME_ENTRY.check_length(self._length, self._path)
        buf = self._buffer() if self.entries else b""  # an empty file has no mapping
        check_time_entries(buf, self.entries, self._base_offset, self._path)
