"""The entries of Kafka's index files and the lookup rule over them, written once.

Every index file is an array of fixed-size, big-endian entries:

```
.index      relativeOffset int32 | position int32                              8 bytes
.timeindex  timestamp int64 | relativeOffset int32                            12 bytes
.txnindex   version int16 | producerId int64 | firstOffset int64 |
            lastOffset int64 | lastStableOffset int64                         34 bytes
```
The live, memory-mapped indexes (``tierlog.index.offset_index``, ``.time_index``,
``.transaction_index``) and the tier reader's views of fetched index objects
(``tierlog.reader._indexes``) all decode, check and search entries through this module, over
any buffer (an mmap or bytes), so a fix to the layout, the sanity rules or the search lands
in every reader of an index at once.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
from operator import le, lt
from typing import TYPE_CHECKING, TypeAlias

from tierlog.errors import CorruptIndexError

if TYPE_CHECKING:
    from typing_extensions import Buffer

#: ``unpack_from(buffer, offset) -> (value, ...)``: how a search reads one field of an entry.
UnpackFrom: TypeAlias = "Callable[[Buffer, int], tuple[int, ...]]"

#: Entries decoded per struct call when a check walks a whole index.
CHECK_CHUNK_ENTRIES = 4096
#: Kafka's timestamp of "none yet": the time index's empty last entry.
NO_TIMESTAMP = -1

INT32 = struct.Struct(">i").unpack_from
INT64 = struct.Struct(">q").unpack_from


@dataclass(frozen=True, slots=True)
class EntryLayout:
    """The entry of a sparse index: two big-endian fields, the first the one lookups search
    (the relative offset of an offset index, the timestamp of a time index). Immutable."""

    kind: str
    """What the file is, as errors name it: ``"offset index"``, ``"time index"``."""
    format: str
    """struct codes of one entry, after ``>``."""
    key_at: int
    """Byte position of the first field in an entry."""
    value_at: int
    """Byte position of the second field in an entry."""
    key: UnpackFrom
    value: UnpackFrom
    entry: struct.Struct = field(init=False)
    """One entry's struct."""
    size: int = field(init=False)
    """Bytes of one entry."""

    def __post_init__(self) -> None:
        entry = _chunk_struct(self.format, 1)
        object.__setattr__(self, "entry", entry)
        object.__setattr__(self, "size", entry.size)

    def check_length(self, length: int, source: object) -> None:
        """CorruptIndexError naming ``source`` unless ``length`` bytes are whole entries."""
        if length % self.size:
            raise CorruptIndexError(f"{self.kind} {source} is corrupt: {length} bytes is not a "
                                    f"multiple of {self.size}")

    def pack(self, fields: Sequence[int]) -> bytes:
        """The bytes of entries given as flat fields (``key, value, key, value, ...``)."""
        count = len(fields) // 2
        return _chunk_struct(self.format, count).pack(*fields) if count else b""

    def chunks(self, buf: Buffer, count: int) -> Iterator[tuple[int, ...]]:
        """The fields of the first ``count`` entries of ``buf``, flat, a chunk of entries at
        a time: a whole-file check of a 10 MiB index stays fast without decoding it all."""
        if count <= 0:
            return
        full, rest = divmod(count, CHECK_CHUNK_ENTRIES)
        chunk = _chunk_struct(self.format, CHECK_CHUNK_ENTRIES)
        for i in range(full):
            yield chunk.unpack_from(buf, i * chunk.size)
        if rest:
            yield _chunk_struct(self.format, rest).unpack_from(buf, full * chunk.size)


@lru_cache(maxsize=16)
def _chunk_struct(entry_format: str, count: int) -> struct.Struct:
    return struct.Struct(">" + entry_format * count)


OFFSET_ENTRY = EntryLayout("offset index", "ii", 0, 4, INT32, INT32)
"""``relativeOffset int32 | position int32``."""
TIME_ENTRY = EntryLayout("time index", "qi", 0, 8, INT64, INT32)
"""``timestamp int64 | relativeOffset int32``."""

TXN_ENTRY = struct.Struct(">hqqqq")
"""``version int16 | producerId int64 | firstOffset int64 | lastOffset int64 |
lastStableOffset int64``."""
TXN_ENTRY_SIZE = TXN_ENTRY.size
TXN_CURRENT_VERSION = 0


# -- the lookup rule -----------------------------------------------------------------------


def largest_lower_bound(buf: Buffer, unpack: UnpackFrom, size: int, at: int, target: int,
                        lo: int, hi: int) -> int:
    """Kafka's largest-lower-bound search: the slot of the last entry in ``[lo, hi)`` whose
    field (read with ``unpack`` at byte ``at`` of the ``size``-byte entry) is <= ``target``;
    ``lo - 1`` when there is none. The field must not decrease over the slots searched.

    The one binary search of every index: the live index narrows ``[lo, hi)`` first (its
    warm section and fence), a fetched index object searches all of it.
    """
    while lo < hi:
        mid = (lo + hi) >> 1
        if unpack(buf, mid * size + at)[0] > target:
            hi = mid
        else:
            lo = mid + 1
    return lo - 1


def upper_from_lower(buf: Buffer | None, unpack: UnpackFrom, size: int, at: int, target: int,
                     count: int, lower: int) -> int:
    """Kafka's smallest upper bound from the largest lower bound ``lower`` of ``target``
    among ``count`` entries: ``lower`` when its field equals ``target``, else the next slot;
    -1 when there is none. ``buf`` is None for an index without entries (then unread)."""
    if lower < 0:
        return 0 if count else -1
    assert buf is not None  # ``lower`` is an entry
    if unpack(buf, lower * size + at)[0] == target:
        return lower
    return lower + 1 if lower + 1 < count else -1


def smallest_upper_bound(buf: Buffer, unpack: UnpackFrom, size: int, at: int, target: int,
                         count: int) -> int:
    """The slot of the first entry (of ``count``) whose field is >= ``target`` (for a field
    that strictly increases; Kafka's rule on a repeated one), or -1 when there is none."""
    lower = largest_lower_bound(buf, unpack, size, at, target, 0, count)
    return upper_from_lower(buf, unpack, size, at, target, count, lower)


# -- the sanity rules ----------------------------------------------------------------------


def check_offset_entries(buf: Buffer, count: int, base_offset: int, source: object) -> None:
    """CorruptIndexError (naming ``source`` and the entry) unless the first ``count`` offset
    index entries of ``buf`` have offsets >= ``base_offset`` and strictly increasing, and
    positions that never decrease: an untrimmed (zero-tailed) or non-monotonic index fails.
    """
    prev_relative, prev_position, start = -1, 0, 0
    for fields in OFFSET_ENTRY.chunks(buf, count):
        relatives, positions = fields[0::2], fields[1::2]
        if not (
            prev_relative < relatives[0]
            and all(map(lt, relatives, islice(relatives, 1, None)))
            and prev_position <= positions[0]
            and all(map(le, positions, islice(positions, 1, None)))
        ):
            _raise_offset_disorder(source, count, base_offset, start, prev_relative,
                                   prev_position, fields)
        prev_relative, prev_position = relatives[-1], positions[-1]
        start += len(relatives)


def _raise_offset_disorder(source: object, count: int, base: int, start: int,
                           prev_relative: int, prev_position: int,
                           fields: tuple[int, ...]) -> None:
    for i in range(0, len(fields), 2):
        relative, position = fields[i], fields[i + 1]
        if relative < 0:
            problem = f"offset {base + relative} is below the base offset {base}"
        elif relative <= prev_relative:
            problem = (f"offset {base + relative} is not above the previous entry's offset"
                       f" {base + prev_relative} (zeroed or non-monotonic index)")
        elif position < prev_position:
            problem = f"position {position} is below the previous entry's {prev_position}"
        else:
            prev_relative, prev_position = relative, position
            continue
        raise CorruptIndexError(f"offset index {source} is corrupt: entry {start + i // 2} of "
                                f"{count}: {problem}")


def check_time_entries(buf: Buffer, count: int, base_offset: int, source: object) -> None:
    """CorruptIndexError (naming ``source`` and the entry) unless the first ``count`` time
    index entries of ``buf`` have timestamps strictly increasing from >= 0, and offsets from
    ``base_offset`` on that never decrease: an untrimmed or non-monotonic index fails."""
    prev_timestamp, prev_relative, start = NO_TIMESTAMP, 0, 0
    for fields in TIME_ENTRY.chunks(buf, count):
        timestamps, relatives = fields[0::2], fields[1::2]
        if not (
            prev_timestamp < timestamps[0]
            and all(map(lt, timestamps, islice(timestamps, 1, None)))
            and prev_relative <= relatives[0]
            and all(map(le, relatives, islice(relatives, 1, None)))
        ):
            _raise_time_disorder(source, count, base_offset, start, prev_timestamp,
                                 prev_relative, fields)
        prev_timestamp, prev_relative = timestamps[-1], relatives[-1]
        start += len(timestamps)


def _raise_time_disorder(source: object, count: int, base: int, start: int,
                         prev_timestamp: int, prev_relative: int,
                         fields: tuple[int, ...]) -> None:
    for i in range(0, len(fields), 2):
        timestamp, relative = fields[i], fields[i + 1]
        if timestamp <= prev_timestamp:
            problem = (f"timestamp {timestamp} is not above the previous entry's "
                       f"{prev_timestamp} (zeroed or non-monotonic index)")
        elif relative < 0:
            problem = f"offset {base + relative} is below the base offset {base}"
        elif relative < prev_relative:
            problem = (f"offset {base + relative} is below the previous entry's offset "
                       f"{base + prev_relative}")
        else:
            prev_timestamp, prev_relative = timestamp, relative
            continue
        raise CorruptIndexError(f"time index {source} is corrupt: entry {start + i // 2} of "
                                f"{count}: {problem}")


def unpack_txn_entry(buf: bytes | bytearray | memoryview, pos: int, source: object
                     ) -> tuple[int, int, int, int]:
    """``(producerId, firstOffset, lastOffset, lastStableOffset)`` of the transaction index
    entry at ``buf[pos:pos + 34]``; CorruptIndexError naming ``source`` on another version."""
    version, *fields = TXN_ENTRY.unpack_from(buf, pos)
    if version != TXN_CURRENT_VERSION:
        raise _bad_txn_version(source, pos, version)
    return tuple(fields)


def iter_txn_entries(data: bytes | bytearray | memoryview, source: object
                     ) -> Iterator[tuple[int, tuple[int, int, int, int]]]:
    """``(byte position, (producerId, firstOffset, lastOffset, lastStableOffset))`` of every
    complete transaction index entry of ``data`` (a torn trailing entry is left out);
    CorruptIndexError naming ``source`` and the entry on an unknown version."""
    complete = len(data) - len(data) % TXN_ENTRY_SIZE
    for i, (version, *fields) in enumerate(TXN_ENTRY.iter_unpack(memoryview(data)[:complete])):
        if version != TXN_CURRENT_VERSION:
            raise _bad_txn_version(source, i * TXN_ENTRY_SIZE, version)
        yield i * TXN_ENTRY_SIZE, tuple(fields)


def _bad_txn_version(source: object, pos: int, version: int) -> CorruptIndexError:
    return CorruptIndexError(f"{source} is corrupt: entry at byte {pos} has version {version};"
                             f" only {TXN_CURRENT_VERSION} is known")


def check_txn_length(length: int, source: object) -> None:
    """CorruptIndexError naming ``source`` unless ``length`` bytes are whole entries."""
    if length % TXN_ENTRY_SIZE:
        raise CorruptIndexError(f"{source} is corrupt: {length} bytes is not a multiple of "
                                f"{TXN_ENTRY_SIZE}")
