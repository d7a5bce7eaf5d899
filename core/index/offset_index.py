"""OffsetIndex: the sparse ``.index`` of a segment, offset -> position in the ``.log``.

Lookups return the largest indexed offset <= the target; the caller scans the log from there.
"""

from __future__ import annotations

from typing import NamedTuple

from tierlog.common.int_bounds import INT32_MAX
from tierlog.errors import IndexFullError, InvalidIndexOffsetError
from tierlog.index.base import AbstractIndex
from tierlog.index.entries import OFFSET_ENTRY, check_offset_entries

_ENTRY = OFFSET_ENTRY.entry
_SIZE = OFFSET_ENTRY.size
_INT32 = OFFSET_ENTRY.key
_OFFSET_FIELD = OFFSET_ENTRY.key_at
_POSITION_FIELD = OFFSET_ENTRY.value_at


class OffsetPosition(NamedTuple):
    """An absolute offset and the byte position in the ``.log`` of the batch that holds it."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """Entries of ``relativeOffset int32 | position int32`` (8 bytes, big-endian).

    ``relativeOffset = offset - base_offset``; offsets strictly increase and positions
    never decrease. Not thread-safe: the owning segment serialises access.

    The plain appender's contract (:class:`tierlog.log.segment_appender.PlainAppendOffsetIndex`):
    ``entries`` and ``last_offset`` change only through :meth:`append`, truncation and
    resizing, or the armed appender, which writes an entry into :attr:`mapping` and sets both
    as :meth:`append` would, under the owning Log's lock.
    """

    layout = OFFSET_ENTRY
    entry_size = _SIZE
    last_offset: int
    """Offset of the last entry; ``base_offset`` when the index is empty."""

    def _load_last_entry(self) -> None:
        if self.entries == 0:
            self.last_offset = self._base_offset
        else:
            mm = self._buffer()
            self.last_offset = self._base_offset + _INT32(mm, (self.entries - 1) * _SIZE)[0]

    def entry(self, n: int) -> OffsetPosition:
        relative, position = _ENTRY.unpack_from(self._buffer(), self._slot_of(n))
        return OffsetPosition(self._base_offset + relative, position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= ``target_offset``, or
        ``(base_offset, 0)`` when every entry is larger or the index is empty."""
        base = self._base_offset
        slot = self._largest_lower_bound_slot(target_offset - base, _INT32, _OFFSET_FIELD)
        if slot < 0:
            return OffsetPosition(base, 0)
        relative, position = _ENTRY.unpack_from(self._buffer(), slot * _SIZE)
        return OffsetPosition(base + relative, position)

    def fetch_upper_bound_offset(
        self, fetch_position: OffsetPosition, fetch_size: int
    ) -> OffsetPosition | None:
        """The first entry at or beyond ``fetch_position.position + fetch_size``: an offset
        surely outside a fetch of that size (not necessarily the smallest such). None if
        no entry lies that far."""
        slot = self._smallest_upper_bound_slot(
            fetch_position.position + fetch_size, _INT32, _POSITION_FIELD
        )
        return None if slot < 0 else self.entry(slot)

    def append(self, offset: int, position: int) -> None:
        """Add ``offset -> position``; the offset must be above ``last_offset``.

        Raises IndexFullError, InvalidIndexOffsetError (offset not increasing) or
        IndexOffsetOverflowError (offset outside the 4-byte relative range). On the append
        hot path, so the checks are inline.
        """
        if not self._writable:
            self._check_writable()
        entries = self.entries
        if entries >= self._max_entries:
            raise IndexFullError(f"offset index {self._path} is full ({entries} entries)")
        if entries and offset <= self.last_offset:
            raise InvalidIndexOffsetError(
                f"offset {offset} appended to slot {entries} of offset index {self._path}"
                f" is not above the last offset {self.last_offset}"
            )
        if position < 0 or position > INT32_MAX:
            raise ValueError(f"position {position} for offset {offset} does not fit the 4-byte"
                             f" position of offset index {self._path}")
        relative = offset - self._base_offset
        if relative < 0 or relative > INT32_MAX:
            relative = self.relative_offset(offset)  # raises IndexOffsetOverflowError
        if (entries + 1) * _SIZE > self._reserved:
            self.reserve()  # the next step of disk under the mapping (OSError when full)
        _ENTRY.pack_into(self._buffer(), entries * _SIZE, relative, position)
        self.entries += 1
        self.last_offset = offset

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        relative = offset - self._base_offset
        slot = self._largest_lower_bound_slot(relative, _INT32, _OFFSET_FIELD)
        if slot < 0:
            new_entries = 0
        elif _INT32(self._buffer(), slot * _SIZE)[0] == relative:
            new_entries = slot
        else:
            new_entries = slot + 1
        self._truncate_to_entries(new_entries)

    def sanity_check(self) -> None:
        """Check the length, and that every entry's offset is >= the base offset and
        strictly above the previous one and positions never decrease: an untrimmed
        (zero-tailed) or non-monotonic file fails."""
        OFFSET_ENTRY.check_length(self._length, self._path)
        buf = self._buffer() if self.entries else b""  # an empty file has no mapping
        check_offset_entries(buf, self.entries, self._base_offset, self._path)
