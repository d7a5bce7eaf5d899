"""LogSegment: one ``.log`` file with its offset, time and transaction indexes.

Appends whole batches and feeds the sparse indexes; translates offsets and timestamps to
file positions; rebuilds its indexes by re-reading its batches (recovery).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from tierlog.common import filenames
from tierlog.common.clock import system_time_ms
from tierlog.common.int_bounds import INT32_MAX, INT64_MAX
from tierlog.config import LogConfig
from tierlog.errors import CorruptRecordError
from tierlog.index import (
    AbortedTxn,
    OffsetIndex,
    TimeIndex,
    TimestampOffset,
    TransactionIndex,
    TxnIndexSearchResult,
)
from tierlog.index.index_types import (
    DEFAULT_INDEX_TYPES,
    SegmentIndex,
    SegmentIndexType,
    SegmentIndexTypes,
)
from tierlog.index.sparse import OFFSET_AND_TIME_ENTRY, SparseIndexRule
from tierlog.log import segment_appender
from tierlog.log.segment_recovery import (
    RecoveryResult,
    SegmentDamage,
    in_flight_tail,
    scan_segment,
)
from tierlog.records.batch import RecordBatch
from tierlog.records.file_records import (
    FileRecords,
    FileSlice,
    LogOffsetPosition,
    TimestampAndOffset,
)

log = logging.getLogger(__name__)

IndexT = TypeVar("IndexT", OffsetIndex, TimeIndex)


class _Closable(Protocol):
    """A file of a segment being opened (closed again if the segment cannot open whole)."""

    def close(self) -> None: ...


class _Renamable(Protocol):
    """A file of a segment that moves with its ``.log`` (rename_to)."""

    @property
    def path(self) -> Path: ...

    def rename_to(self, path: Path) -> None: ...


@dataclass(frozen=True, slots=True)
class AppendedBatch:
    """What a segment needs to know of each batch it appends, parsed once by the Log."""

    last_offset: int
    max_timestamp: int
    size: int


class LogSegment:
    """A segment: ``<base>.log``, ``<base>.index``, ``<base>.timeindex``, ``<base>.txnindex``.

    The offset index maps a batch's last offset to its start position every
    ``index.interval.bytes`` of data; the time index records the largest timestamp seen so
    far at the same points. Not thread-safe: the owning Log serialises writers.

    The plain appender's contract (:class:`tierlog.log.segment_appender.PlainAppendTarget`): the
    segment's tail state, ``bytes_since_last_index_entry`` and ``max_timestamp_and_offset``,
    changes only through this class's methods or, while armed (:meth:`arm_plain_appends`),
    the appender, which also sets ``log.size``, ``offset_index.entries``/``last_offset`` and
    ``time_index.entries``/``last_entry``; every other change disarms it first, all under the
    owning Log's lock.
    """

    def __init__(
        self,
        log_file: FileRecords,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        txn_index: TransactionIndex,
        base_offset: int,
        index_interval_bytes: int,
        rolling_jitter_ms: int,
        time_ms: Callable[[], int],
        extra_indexes: dict[str, SegmentIndex] | None = None,
        missing_extra_indexes: bool = False,
        index_types: SegmentIndexTypes = DEFAULT_INDEX_TYPES,
        read_only: bool = False,
    ) -> None:
        self.log = log_file
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.rolling_jitter_ms = rolling_jitter_ms
        self._time_ms = time_ms
        self.created_ms = time_ms()
        #: Bytes appended since the last offset-index entry (one is due once it passes
        #: ``index_interval_bytes``).
        self.bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        #: The largest timestamp so far and its offset; None until loaded from the time index.
        self.max_timestamp_and_offset: TimestampOffset | None = None
        #: The producer hot path while armed (arm_plain_appends); every other change disarms it.
        self._plain_appender: segment_appender.PlainAppenderType | None = None
        #: Index types contributed by plugins, by name (fed on append, rebuilt on recovery).
        self.extra_indexes: dict[str, SegmentIndex] = extra_indexes or {}
        #: True when a plugin index file was absent at open, so its data must be rebuilt.
        self.missing_extra_indexes = missing_extra_indexes
        #: The index types this segment was opened with (which travel to the remote tier).
        self.index_types = index_types
        #: Opened read-only (tierlog.log.segment_read_only): its files are never written.
        self.read_only = read_only
        #: Invalid bytes a read-only open found and left (reads stop before them).
        self.damage: SegmentDamage | None = None
        #: A read-only segment recovery would re-validate, not scanned yet: the first read
        #: scans it (:meth:`check_read_only`).
        self.unchecked = False

    # -- construction ----------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        rolling_jitter_ms: int = 0,
        time_ms: Callable[[], int] | None = None,
        preallocate_bytes: int = 0,
        suffix: str = "",
        extra_index_types: Sequence[SegmentIndexType] = (),
        config: LogConfig | None = None,
        index_types: SegmentIndexTypes | None = None,
    ) -> LogSegment:
        """Open or create the files of the segment at ``base_offset`` in ``directory``.

        ``index_types`` (:func:`tierlog.index.index_types.resolve_index_types`) says which type
        opens each index, built-in roles included (opened with ``config``, the defaults when
        not given); without it the built-ins plus ``extra_index_types``."""
        if config is None:
            config = LogConfig()
        if index_types is None:
            index_types = (DEFAULT_INDEX_TYPES if not extra_index_types
                           else SegmentIndexTypes(extras=tuple(extra_index_types)))
        extra_index_types = index_types.extras
        clock = time_ms or system_time_ms
        prefix = filenames.filename_prefix_from_offset(base_offset)
        paths = [filenames.log_file(directory, base_offset, suffix),
                 filenames.offset_index_file(directory, base_offset, suffix),
                 filenames.time_index_file(directory, base_offset, suffix),
                 filenames.transaction_index_file(directory, base_offset, suffix),
                 *(directory / f"{prefix}{t.suffix}{suffix}" for t in extra_index_types)]
        # A segment that cannot be opened whole (a full disk) leaves none of its new files.
        new_paths = [p for p in paths if not p.exists()]
        opened: list[_Closable] = []
        try:
            log_file = FileRecords.open(paths[0], preallocate_bytes=preallocate_bytes)
            opened.append(log_file)
            extras: dict[str, SegmentIndex] = {}
            for index_type, path in zip(extra_index_types, paths[4:], strict=True):
                extras[index_type.name] = index_type.open(path, base_offset, config)
                opened.append(extras[index_type.name])
            offset_index = index_types.open_role("offset", paths[1], base_offset, config,
                                                 max_index_size)
            opened.append(offset_index)
            time_index = index_types.open_role("time", paths[2], base_offset, config,
                                               max_index_size)
            opened.append(time_index)
            txn_index = index_types.open_role("transaction", paths[3], base_offset, config,
                                              max_index_size)
        except BaseException:
            for file in opened:
                with contextlib.suppress(Exception):
                    file.close()
            for path in new_paths:
                path.unlink(missing_ok=True)
            raise
        missing = any(p in new_paths for p in paths[4:])
        return cls(
            log_file,
            offset_index,
            time_index,
            txn_index,
            base_offset,
            index_interval_bytes,
            rolling_jitter_ms,
            clock,
            extras,
            missing and log_file.size_in_bytes() > 0,
            index_types,
        )

    def check_read_only(self, *, last: bool) -> SegmentDamage | None:
        """Scan a read-only segment as recovery would (header, CRC, offsets of every batch),
        changing nothing. Invalid bytes at the very end of the ``last`` segment are a write
        in flight: they are left out of its readable size. Any others are damage: kept in
        :attr:`damage` (reads stop before it), logged and returned."""
        self.unchecked = False
        result = scan_segment(self.log, self.base_offset, self.index_interval_bytes).result
        if result.error is None:
            return None
        if last and in_flight_tail(self.log, result.valid_bytes):
            log.info("%s: the %d bytes from position %d are a write in flight: not read",
                     self.path, self.size - result.valid_bytes, result.valid_bytes)
            self.log.size = result.valid_bytes
            return None
        self.damage = SegmentDamage(
            self.path.parent.name, self.path, result.valid_bytes,
            result.next_offset if result.batches else self.base_offset, result.error)
        log.warning("%s", self.damage.error())
        return self.damage

    def load_max_timestamp(self) -> None:
        """Find the segment's max timestamp from its last indexed batch on (a segment still
        being written has no final time index entry); the time index's last entry when the
        ``.log`` cannot be read there."""
        try:
            self.max_timestamp_and_offset = self._read_largest_timestamp()
        except CorruptRecordError:
            self.max_timestamp_and_offset = self.time_index.last_entry

    # -- facts -----------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.log.size_in_bytes()

    @property
    def path(self) -> Path:
        return self.log.path

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_ts_and_offset().timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._max_ts_and_offset().offset

    def _max_ts_and_offset(self) -> TimestampOffset:
        if self.max_timestamp_and_offset is None:
            # Loaded from disk: the time index's last entry is the segment's max timestamp.
            self.max_timestamp_and_offset = self.time_index.last_entry
        return self.max_timestamp_and_offset

    @property
    def largest_timestamp(self) -> int:
        """The segment's max timestamp, or its file's mtime when it holds no timestamps."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log.path).st_mtime * 1000)

    # -- appending -------------------------------------------------------------------

    def append(self, pieces: Sequence[bytes | bytearray | memoryview],
               batches: Sequence[AppendedBatch],
               views: Sequence[RecordBatch] = ()) -> None:
        """Write the batches (as ``pieces`` for one vectored write) and feed the indexes.

        The offsets must already be assigned and greater than anything in the segment.
        ``views`` are the same batches, one view each, for plugin indexes (required when the
        segment has any; ``base_offset`` of a view may still be the producer's value).
        """
        self.disarm_plain_appends()
        position = self.log.size_in_bytes()
        if self.extra_indexes:
            self._feed_extra_indexes(position, batches, views)
        # Index space first: a full disk fails the append before anything is written.
        self.offset_index.reserve(len(batches))
        self.time_index.reserve(len(batches))
        self.log.append_pieces(pieces)
        max_ts = self._max_ts_and_offset()
        rule = SparseIndexRule(self.index_interval_bytes, self.bytes_since_last_index_entry,
                               self.time_index.last_entry.timestamp)
        for batch in batches:
            if batch.max_timestamp > max_ts.timestamp:
                max_ts = TimestampOffset(batch.max_timestamp, batch.last_offset)
            due = rule.add(batch.size, max_ts.timestamp)
            if due:
                self.offset_index.append(batch.last_offset, position)
                if due == OFFSET_AND_TIME_ENTRY:
                    self.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
            position += batch.size
        self.bytes_since_last_index_entry = rule.since
        self.max_timestamp_and_offset = max_ts

    def arm_plain_appends(self, max_segment_bytes: int, max_segment_ms: int,
                          max_batch_bytes: int, check_records: bool,
                          end: segment_appender.PlainAppendEnd,
                          counts: segment_appender.PlainAppendCounts,
                          ) -> segment_appender.PlainAppenderType | None:
        """Hand the producer's hot path a :class:`~tierlog.log.segment_appender.PlainAppender` that
        appends plain batches until something else changes the segment (which disarms it),
        each at the log end of ``end`` (which it moves) and counted in ``counts``.

        Turns the roll rule (:meth:`should_roll`) into limits a batch is compared with, so the
        hot path checks four numbers instead: end position <= ``segment.bytes``, last offset
        within the relative range, max timestamp before the age limit (from the first batch's
        timestamp plus ``segment.ms`` minus the jitter), size <= ``max_batch_bytes``;
        ``check_records`` also has its records checked. None (not armed) while the segment is
        empty, has no timestamp to age from, or has a full index: then every append asks
        should_roll.
        """
        self.disarm_plain_appends()
        offset_index, time_index = self.offset_index, self.time_index
        # Entries either index can still take before it is full (is_full) within its
        # reserved disk space: each index entry of a plain append adds at most one to each.
        with contextlib.suppress(OSError):  # a full disk: the general path's append says so
            offset_index.reserve()
            time_index.reserve()
        room = min(offset_index.reserved_entries - offset_index.entries,
                   time_index.max_entries - 1 - time_index.entries,
                   time_index.reserved_entries - time_index.entries)
        first_ts = self.rolling_timestamp()  # -1 for an empty segment
        if first_ts < 0 or room <= 0:
            return None
        self._max_ts_and_offset()  # loaded, so the appender can take it over
        rules = (
            max_segment_bytes,
            self.base_offset + INT32_MAX,
            min(first_ts + max_segment_ms - self.rolling_jitter_ms, INT64_MAX),
            max_batch_bytes,
            check_records,
        )
        appender = self._plain_appender = segment_appender.PlainAppender(self, rules, room, end,
                                                                         counts)
        return appender

    def disarm_plain_appends(self) -> None:
        """Stop the hot path's appender (if armed) before anything else changes the segment."""
        appender = self._plain_appender
        if appender is not None:
            self._plain_appender = None
            appender.disarm()

    def _feed_extra_indexes(self, position: int, batches: Sequence[AppendedBatch],
                            views: Sequence[RecordBatch]) -> None:
        for batch, view in zip(batches, views, strict=True):
            self._feed_extra_batch(view, batch.last_offset - view.last_offset_delta, position)
            position += batch.size

    def _feed_extra_batch(self, view: RecordBatch, base_offset: int, position: int) -> None:
        """Feed one batch written at ``position`` to every plugin index: appends (the Log's
        and the cleaner's) and rebuilds all come through here."""
        for index in self.extra_indexes.values():
            index.on_append(view, base_offset, position)

    def remote_extra_index_files(self) -> dict[str, Path]:
        """``{suffix: path}`` of the plugin indexes whose type is ``uploaded_to_remote``,
        flushed first so the file holds every entry (a copy to the remote tier uploads them
        with the segment); an index with no file (nothing to say) is left out."""
        files: dict[str, Path] = {}
        for index_type in self.index_types.extras:
            index = self.extra_indexes.get(index_type.name)
            if index is None or not index_type.uploaded_to_remote:
                continue
            index.flush()
            if index.path.exists():
                files[index_type.suffix] = index.path
        return files

    def rebuild_extra_indexes(self) -> None:
        """Reset the plugin indexes and feed them every batch of the segment again."""
        if not self.extra_indexes:
            return
        for index in self.extra_indexes.values():
            index.reset()
        for position, batch in self.log.batches_from(0):
            self._feed_extra_batch(batch, batch.base_offset, position)
        self.missing_extra_indexes = False

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        self.txn_index.append(txn)

    # -- rolling ---------------------------------------------------------------------

    def rolling_timestamp(self) -> int:
        """The first batch's max timestamp, from which segment.ms is measured (Kafka); -1
        while the segment is empty."""
        ts = self._rolling_based_timestamp
        if ts is None:
            header = self.log.read_header(0)
            if header is None:
                return -1
            ts = self._rolling_based_timestamp = header.max_timestamp
        return ts

    def should_roll(self, messages_size: int, max_timestamp: int, max_offset: int,
                    max_segment_bytes: int, max_segment_ms: int,
                    time_ms: Callable[[], int]) -> bool:
        """Kafka's roll rule for an append of ``messages_size`` bytes whose largest timestamp
        and offset are given: the segment would pass ``segment.bytes``, an index is full, the
        offset leaves the 4-byte relative range, or the segment is older than ``segment.ms``
        minus its jitter (measured from its first batch's timestamp, or from its creation by
        ``time_ms()`` when it has none). Cheap enough for the append hot path."""
        size = self.size
        if (size > max_segment_bytes - messages_size
                or not self.can_convert_to_relative_offset(max_offset)
                or self.offset_index.is_full() or self.time_index.is_full()):
            return True
        if size == 0:
            return False
        first_ts = self.rolling_timestamp()
        waited = max_timestamp - first_ts if first_ts >= 0 else time_ms() - self.created_ms
        return waited > max_segment_ms - self.rolling_jitter_ms

    def on_becoming_inactive(self) -> None:
        """Called when a newer segment takes over: final time index entry, then trim files."""
        self.disarm_plain_appends()
        max_ts = self._max_ts_and_offset()
        if max_ts.timestamp >= 0:
            self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    # -- reading ---------------------------------------------------------------------

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """Position and size of the batch holding ``offset``: index lookup, then a short scan."""
        mapping = self.offset_index.lookup(offset)
        return self.log.search_for_offset_with_size(offset, max(mapping.position, starting_position))

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> tuple[LogOffsetPosition, FileSlice, bool] | None:
        """The slice starting at the batch holding ``start_offset``.

        Returns (start position info, slice, first_entry_incomplete) or None when the
        offset is beyond this segment. ``min_one_message`` lets the first batch exceed
        ``max_size`` (as Kafka does, so a consumer can always make progress).
        """
        if max_size < 0:
            raise ValueError(f"invalid max_size {max_size} for segment {self.path}")
        if self.unchecked:
            self.check_read_only(last=False)
        damage = self.damage
        try:
            start = self.translate_offset(start_offset)
        except CorruptRecordError as exc:
            if damage is None:
                raise
            raise damage.error() from exc
        end = self.size if max_position is None else min(max_position, self.size)
        if damage is not None:  # a read from before it stops there; one from past it reads
            if start is None or start.position == damage.position:
                raise damage.error()
            if start.position < damage.position:
                end = min(end, damage.position)
        if start is None:
            return None
        adjusted = max(max_size, start.size) if min_one_message else max_size
        fetch_size = max(0, min(end - start.position, adjusted))
        return start, self.log.slice(start.position, fetch_size), adjusted < start.size

    def read_next_offset(self) -> int:
        """The offset after the last batch of this segment (the base offset if empty)."""
        start = self.offset_index.lookup(self.offset_index.last_offset).position
        next_offset = self.log.next_offset(start)
        return self.base_offset if next_offset is None else next_offset

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int = 0
    ) -> TimestampAndOffset | None:
        """The first record at or after ``timestamp`` (and ``starting_offset``) in this segment."""
        ts_offset = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(ts_offset.offset, starting_offset)).position
        return self.log.search_for_timestamp(timestamp, position, starting_offset)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    # -- recovery and truncation -------------------------------------------------------

    def rebuild_indexes(
        self,
        on_batch: Callable[[RecordBatch], None] | None = None,
        on_epoch: Callable[[int, int], None] | None = None,
    ) -> RecoveryResult:
        """Re-read every batch (header sanity, CRC, increasing offsets), rebuild the offset
        and time indexes, empty the transaction index, and truncate the ``.log`` at the
        first invalid byte (Kafka's ``LogSegment.recover``). The scan and its callbacks are
        :func:`tierlog.log.segment_recovery.scan_segment`'s; the segment applies what it found
        to its own files and state."""
        self.disarm_plain_appends()
        self.txn_index.reset()
        scan = scan_segment(self.log, self.base_offset, self.index_interval_bytes,
                            on_batch, on_epoch)
        self.offset_index = self._rewrite_index(self.offset_index, scan.offset_entries, "ii")
        self.time_index = self._rewrite_index(self.time_index, scan.time_entries, "qi")
        self.max_timestamp_and_offset = TimestampOffset(scan.max_timestamp,
                                                         scan.offset_of_max_timestamp)
        self.bytes_since_last_index_entry = scan.bytes_since_last_entry
        self._rolling_based_timestamp = None
        result = scan.result
        result.truncated_bytes = self.log.truncate_to(result.valid_bytes)
        self.rebuild_extra_indexes()
        return result

    def _rewrite_index(self, index: IndexT, fields: list[int], entry_format: str) -> IndexT:
        """Replace an index file with ``fields`` (flat, big-endian ``entry_format`` entries)
        in one write and map it again, trimmed to its entries (the Log grows the active
        segment's index back)."""
        path, max_size = index.path, index.max_index_size
        index.delete_if_exists()
        count = len(fields) // len(entry_format)
        data = struct.pack(">" + entry_format * count, *fields) if count else b""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
        finally:
            os.close(fd)
        rebuilt = type(index)(path, self.base_offset, max_size)
        rebuilt.trim_to_valid_size()
        return rebuilt

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``; returns bytes removed.

        Kafka truncates at batch granularity: the batch containing ``offset`` goes entirely.
        """
        self.disarm_plain_appends()
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if mapping is None:
            return 0
        # The batch holding `offset` starts at mapping.position: cut there.
        removed = self.log.truncate_to(mapping.position)
        if self.size == 0:
            self.created_ms = self._time_ms()
            self._rolling_based_timestamp = None
        self.max_timestamp_and_offset = self._read_largest_timestamp()
        self.bytes_since_last_index_entry = self._bytes_since_index_end()
        self.rebuild_extra_indexes()
        return removed

    def _read_largest_timestamp(self) -> TimestampOffset:
        """The time index's last entry, or a larger max timestamp among the batches after
        the position it indexes (the time index is sparse; Kafka's readLargestTimestamp)."""
        last = self.time_index.last_entry
        position = self.offset_index.lookup(last.offset).position
        later = self.log.largest_timestamp_after(position)
        if later.timestamp > last.timestamp:
            return TimestampOffset(later.timestamp, later.offset)
        return last

    def _bytes_since_index_end(self) -> int:
        last = self.offset_index.lookup(self.offset_index.last_offset)
        return self.size - last.position if self.offset_index.entries else self.size

    # -- files -----------------------------------------------------------------------

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()
        for index in self.extra_indexes.values():
            index.flush()

    def close(self) -> None:
        """Trim and close every file (the final time index entry is written first; a
        read-only segment's files are only closed)."""
        self.disarm_plain_appends()
        if self.read_only:
            self.offset_index.close()
            self.time_index.close()
            self.log.close()
            return
        max_ts = self.max_timestamp_and_offset
        if max_ts is not None and max_ts.timestamp >= 0:
            self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        for index in self.extra_indexes.values():
            index.close()
        self.log.close()

    def delete(self) -> None:
        """Delete every file of the segment (missing files are fine)."""
        self.disarm_plain_appends()
        self.offset_index.delete_if_exists()
        self.time_index.delete_if_exists()
        self.txn_index.delete_if_exists()
        for index in self.extra_indexes.values():
            index.delete_if_exists()
        self.log.delete_if_exists()

    def change_file_suffixes(
        self, old_suffix: str, new_suffix: str,
        on_renamed: Callable[[Path], None] | None = None,
    ) -> None:
        """Rename every file of the segment from ``<name><old_suffix>`` to
        ``<name><new_suffix>``: the ``.log`` first, then the offset, time and transaction
        indexes, then the plugin indexes. The one place that knows a segment's files: the
        cleaner's swap (``.cleaned`` -> ``.swap`` -> final, old ones ``.deleted``) and
        retention both rename through it, so a plugin index always moves with its ``.log``.

        ``on_renamed(new path)`` is called after each file that was renamed on disk (the
        swap reports each step; a file not written yet only has its path changed). Raises
        ValueError, renaming nothing, when a file's name does not end with ``old_suffix``.
        """
        items: list[_Renamable] = [self.log, self.offset_index, self.time_index,
                                   self.txn_index]
        extras = list(self.extra_indexes.values())
        targets = [_with_suffix_replaced(item.path, old_suffix, new_suffix)
                   for item in (*items, *extras)]
        for item, target in zip(items, targets[:len(items)], strict=True):
            if item.path.exists():
                item.rename_to(target)
                if on_renamed is not None:
                    on_renamed(target)
        for index, target in zip(extras, targets[len(items):], strict=True):
            # A plugin index may live only in memory so far; it renames itself.
            index.rename_to(target)
            if on_renamed is not None and target.exists():
                on_renamed(target)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.path})"


def _with_suffix_replaced(path: Path, old_suffix: str, new_suffix: str) -> Path:
    """``<name><old_suffix>`` -> ``<name><new_suffix>`` (old may be empty: append)."""
    if old_suffix and not path.name.endswith(old_suffix):
        raise ValueError(f"{path} does not end with {old_suffix!r}")
    stem = path.name[: len(path.name) - len(old_suffix)] if old_suffix else path.name
    return path.with_name(stem + new_suffix)
