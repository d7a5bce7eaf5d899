"""Opening a segment read-only: what a reader beside a live owner (or after a crash) uses.

Nothing is written, created or deleted: the ``.log`` and the built-in indexes are opened
read-only (a missing index is empty), plugin indexes are not opened, and an index that cannot
be trusted (the preallocated, untrimmed index of a live active segment, a damaged one) serves
only its valid prefix, so lookups scan the ``.log`` from there instead of an index being rebuilt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from tierlog.common import filenames
from tierlog.common.clock import system_time_ms
from tierlog.errors import CorruptIndexError
from tierlog.index import OffsetIndex, TimeIndex, TransactionIndex
from tierlog.log.segment import LogSegment
from tierlog.records.file_records import FileRecords


def open_read_only(directory: Path, base_offset: int, *, index_interval_bytes: int,
                   max_index_size: int, time_ms: Callable[[], int] | None = None) -> LogSegment:
    """The existing segment at ``base_offset``, its files opened without writing or creating
    anything; :func:`trust_indexes` then limits its indexes to what can be trusted."""
    clock = time_ms or system_time_ms
    log_file = FileRecords.open(filenames.log_file(directory, base_offset), mutable=False)
    opened: list[FileRecords | OffsetIndex | TimeIndex] = [log_file]
    try:
        offset_index = OffsetIndex(filenames.offset_index_file(directory, base_offset),
                                   base_offset, max_index_size, writable=False, missing_ok=True)
        opened.append(offset_index)
        time_index = TimeIndex(filenames.time_index_file(directory, base_offset), base_offset,
                               max_index_size, writable=False, missing_ok=True)
        opened.append(time_index)
        txn_index = TransactionIndex(filenames.transaction_index_file(directory, base_offset),
                                     base_offset, create=False)
    except BaseException:
        for file in opened:
            with contextlib.suppress(Exception):
                file.close()
        raise
    return LogSegment(log_file, offset_index, time_index, txn_index, base_offset,
                      index_interval_bytes, 0, clock, read_only=True)


def trust_indexes(segment: LogSegment) -> str | None:
    """Limit a read-only segment's offset and time indexes to the slots before their zeroed
    tail (the unused, preallocated space of a live active segment's: not a problem), then to
    their valid prefix when they fail their sanity check (or the offset index points past the
    ``.log``); returns what was wrong, or None. Changes nothing on disk."""
    problems = []
    offsets, times = segment.offset_index, segment.time_index
    for index in (offsets, times):
        index.use_first(index.zero_tail_start())
    try:
        offsets.sanity_check()
        tail = offsets.lookup(offsets.last_offset).position if offsets.entries else -1
        if tail >= segment.size:
            raise CorruptIndexError(f"offset index {offsets.path} points at position {tail}, "
                                    f"beyond the {segment.size} bytes of {segment.path.name}")
    except CorruptIndexError as exc:
        offsets.use_first(_valid_offset_entries(offsets, segment.size))
        problems.append(str(exc))
    try:
        times.sanity_check()
    except CorruptIndexError as exc:
        times.use_first(_valid_time_entries(times))
        problems.append(str(exc))
    return "; ".join(problems) or None


def _valid_offset_entries(index: OffsetIndex, log_size: int) -> int:
    """How many leading entries of an offset index are in order and point into the ``.log``
    (the first damaged entry ends them)."""
    previous: tuple[int, int] | None = None
    for n in range(index.entries):
        entry = index.entry(n)
        if entry.position >= log_size or (previous is not None and (
                entry.offset <= previous[0] or entry.position < previous[1])):
            return n
        previous = entry.offset, entry.position
    return index.entries


def _valid_time_entries(index: TimeIndex) -> int:
    """How many leading entries of a time index have timestamps increasing from >= 0 and
    offsets that never decrease."""
    previous_timestamp, previous_offset = -1, index.base_offset
    for n in range(index.entries):
        timestamp, offset = index.entry(n)
        if timestamp <= previous_timestamp or offset < previous_offset:
            return n
        previous_timestamp, previous_offset = timestamp, offset
    return index.entries
