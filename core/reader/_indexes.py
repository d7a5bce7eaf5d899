"""Kafka's segment indexes read from the bytes of remote index objects (no mmap, no files):
offset and time lookups, batch-aligned byte ranges, split points and aborted transactions.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence

from tierlog.errors import CorruptIndexError
from tierlog.index import AbortedTxn
from tierlog.index.transaction_index import ENTRY_SIZE as TXN_ENTRY_SIZE

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def _check_length(data: bytes, entry_size: int, source: str) -> None:
    if len(data) % entry_size:
        raise CorruptIndexError(
            f"index {source} is {len(data)} bytes, not a multiple of its {entry_size}-byte entries"
        )


class OffsetIndexView:
    """The entries of a ``.index`` object: ``relativeOffset int32 | position int32``, each the
    last offset of a batch and the position where that batch starts. Kept as absolute offsets
    and positions in two sorted lists. Immutable, hence thread-safe.
    """

    __slots__ = ("offsets", "positions")

    def __init__(self, data: bytes, base_offset: int, source: str) -> None:
        _check_length(data, _OFFSET_ENTRY.size, source)
        self.offsets: list[int] = []
        self.positions: list[int] = []
        for relative, position in _OFFSET_ENTRY.iter_unpack(data):
            offset = base_offset + relative
            if self.offsets and (offset <= self.offsets[-1] or position < self.positions[-1]):
                raise CorruptIndexError(
                    f"index {source}: entry {len(self.offsets)} (offset {offset}, position "
                    f"{position}) does not follow offset {self.offsets[-1]} at position "
                    f"{self.positions[-1]}"
                )
            self.offsets.append(offset)
            self.positions.append(position)

    def offset_at(self, position: int) -> int | None:
        """The last offset of the batch at ``position`` when an entry names it, else None."""
        i = bisect.bisect_left(self.positions, position)
        return self.offsets[i] if i < len(self.positions) and self.positions[i] == position \
            else None

    def start_position(self, offset: int) -> int:
        """Where a scan for ``offset`` starts: the batch of the largest indexed offset <=
        ``offset``, or 0 (Kafka's lookup)."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.positions[i] if i >= 0 else 0

    def end_position(self, end_offset: int, size: int) -> int:
        """A batch boundary at or after the end of every batch holding offsets below
        ``end_offset`` (exclusive): the next indexed batch after the first entry that reaches
        ``end_offset - 1``, or ``size``."""
        i = bisect.bisect_left(self.offsets, end_offset - 1)
        return self.positions[i + 1] if i + 1 < len(self.positions) else size

    def split_points(self, start: int, end: int, target: int,
                     keep_whole: Sequence[tuple[int, int]] = ()) -> list[int]:
        """Batch boundaries that cut ``[start, end)`` into pieces of about ``target`` bytes,
        never inside one of the ``keep_whole`` ``[from, to)`` byte ranges."""
        points: list[int] = []
        last = start
        lo = bisect.bisect_right(self.positions, start)
        for position in self.positions[lo:]:
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
    that the batch ending at ``O`` holds a record stamped ``T``. Immutable, hence thread-safe.
    """

    __slots__ = ("offsets", "timestamps")

    def __init__(self, data: bytes, base_offset: int, source: str) -> None:
        _check_length(data, _TIME_ENTRY.size, source)
        self.timestamps: list[int] = []
        self.offsets: list[int] = []
        for timestamp, relative in _TIME_ENTRY.iter_unpack(data):
            if self.timestamps and timestamp < self.timestamps[-1]:
                raise CorruptIndexError(
                    f"time index {source}: entry {len(self.timestamps)} has timestamp "
                    f"{timestamp}, below the previous {self.timestamps[-1]}"
                )
            self.timestamps.append(timestamp)
            self.offsets.append(base_offset + relative)

    def bracket(self, timestamp: int) -> tuple[int | None, int | None]:
        """``(below, reaching)``: the last offset up to which every record is older than
        ``timestamp`` (None when no entry says so), and an offset by which a record stamped
        ``timestamp`` or later has appeared (None when the index knows of none)."""
        i = bisect.bisect_left(self.timestamps, timestamp)
        below = self.offsets[i - 1] if i > 0 else None
        reaching = self.offsets[i] if i < len(self.offsets) else None
        return below, reaching


def parse_aborted_txns(data: bytes, source: str) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` object (34-byte AbortedTxn entries)."""
    _check_length(data, TXN_ENTRY_SIZE, source)
    try:
        return [AbortedTxn.from_bytes(data, pos) for pos in range(0, len(data), TXN_ENTRY_SIZE)]
    except CorruptIndexError as e:
        raise CorruptIndexError(f"transaction index {source}: {e}") from e
