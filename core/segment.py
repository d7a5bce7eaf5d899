"""LogSegment: one ``.log`` file with its offset, time and transaction indexes.

Appends whole batches and feeds the sparse indexes; translates offsets and timestamps to
file positions; rebuilds its indexes by re-reading its batches (recovery).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tierlog import filenames
from tierlog.errors import CorruptRecordError
from tierlog.index import (
    AbortedTxn,
    OffsetIndex,
    TimeIndex,
    TimestampOffset,
    TransactionIndex,
    TxnIndexSearchResult,
)
from tierlog.records.file_records import (
    FileRecords,
    FileSlice,
    LogOffsetPosition,
    TimestampAndOffset,
)

log = logging.getLogger(__name__)

INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class AppendedBatch:
    """What a segment needs to know of each batch it appends, parsed once by the Log."""

    last_offset: int
    max_timestamp: int
    size: int


@dataclass(frozen=True, slots=True)
class RollParams:
    """The inputs of the roll decision for one append (Kafka's RollParams)."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now_ms: int


@dataclass(slots=True)
class RecoveryResult:
    """What recovering one segment found."""

    valid_bytes: int = 0
    truncated_bytes: int = 0
    batches: int = 0
    error: str | None = None
    batch_headers: list = field(default_factory=list)


class LogSegment:
    """A segment: ``<base>.log``, ``<base>.index``, ``<base>.timeindex``, ``<base>.txnindex``.

    The offset index maps a batch's last offset to its start position every
    ``index.interval.bytes`` of data; the time index records the largest timestamp seen so
    far at the same points. Not thread-safe: the owning Log serialises writers.
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
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        self._max_timestamp_and_offset: TimestampOffset | None = None

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
    ) -> LogSegment:
        """Open or create the files of the segment at ``base_offset`` in ``directory``."""
        clock = time_ms or (lambda: int(time.time() * 1000))
        log_file = FileRecords.open(
            filenames.log_file(directory, base_offset, suffix), preallocate_bytes=preallocate_bytes
        )
        return cls(
            log_file,
            OffsetIndex(filenames.offset_index_file(directory, base_offset, suffix), base_offset,
                        max_index_size),
            TimeIndex(filenames.time_index_file(directory, base_offset, suffix), base_offset,
                      max_index_size),
            TransactionIndex(filenames.transaction_index_file(directory, base_offset, suffix),
                             base_offset),
            base_offset,
            index_interval_bytes,
            rolling_jitter_ms,
            clock,
        )

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
        if self._max_timestamp_and_offset is None:
            # Loaded from disk: the time index's last entry is the segment's max timestamp.
            self._max_timestamp_and_offset = self.time_index.last_entry
        return self._max_timestamp_and_offset

    @property
    def largest_timestamp(self) -> int:
        """The segment's max timestamp, or its file's mtime when it holds no timestamps."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return int(os.stat(self.log.path).st_mtime * 1000)

    # -- appending -------------------------------------------------------------------

    def append(self, pieces: Sequence[bytes | memoryview], batches: Sequence[AppendedBatch]) -> None:
        """Write the batches (as ``pieces`` for one vectored write) and feed the indexes.

        The offsets must already be assigned and greater than anything in the segment.
        """
        position = self.log.size_in_bytes()
        self.log.append_pieces(pieces)
        max_ts = self._max_ts_and_offset()
        interval = self.index_interval_bytes
        since = self._bytes_since_last_index_entry
        for batch in batches:
            if batch.max_timestamp > max_ts.timestamp:
                max_ts = TimestampOffset(batch.max_timestamp, batch.last_offset)
            if since > interval:
                self.offset_index.append(batch.last_offset, position)
                self.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
                since = 0
            position += batch.size
            since += batch.size
        self._bytes_since_last_index_entry = since
        self._max_timestamp_and_offset = max_ts

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        self.txn_index.append(txn)

    # -- rolling ---------------------------------------------------------------------

    def _rolling_timestamp(self) -> int | None:
        """The first batch's max timestamp: segment.ms is measured from it (Kafka)."""
        if self._rolling_based_timestamp is None:
            header = self.log.read_header(0)
            if header is not None:
                self._rolling_based_timestamp = header.max_timestamp
        return self._rolling_based_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        ts = self._rolling_timestamp()
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def should_roll(self, params: RollParams) -> bool:
        """Kafka's roll rule: size, age, a full index, or an offset beyond 2^31 of the base."""
        size = self.size
        reached_roll_ms = (
            self.time_waited_for_roll(params.now_ms, params.max_timestamp_in_messages)
            > params.max_segment_ms - self.rolling_jitter_ms
        )
        return (
            size > params.max_segment_bytes - params.messages_size
            or (size > 0 and reached_roll_ms)
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.can_convert_to_relative_offset(params.max_offset_in_messages)
        )

    def on_becoming_inactive(self) -> None:
        """Called when a newer segment takes over: final time index entry, then trim files."""
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
        start = self.translate_offset(start_offset)
        if start is None:
            return None
        end = self.size if max_position is None else min(max_position, self.size)
        adjusted = max(max_size, start.size) if min_one_message else max_size
        fetch_size = max(0, min(end - start.position, adjusted))
        return start, self.log.slice(start.position, fetch_size), adjusted < start.size

    def read_next_offset(self) -> int:
        """The offset after the last batch of this segment (the base offset if empty)."""
        last = None
        start = self.offset_index.lookup(self.offset_index.last_offset).position
        for _, header in self.log.headers_from(start):
            last = header
        return last.next_offset if last is not None else self.base_offset

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

    def rebuild_indexes(self, on_batch: Callable | None = None) -> RecoveryResult:
        """Re-read every batch (header checks and CRC), rebuild the offset and time indexes,
        and truncate the ``.log`` at the first invalid byte.

        ``on_batch(batch)`` lets the caller rebuild state that depends on the data
        (producer state, the transaction index). Returns what was found.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._max_timestamp_and_offset = TimestampOffset(-1, self.base_offset)
        self._bytes_since_last_index_entry = 0
        result = RecoveryResult()
        valid = 0
        max_ts = self._max_timestamp_and_offset
        since = 0
        try:
            for position, batch in self.log.batches_from(0):
                batch.ensure_valid()
                if batch.base_offset < self.base_offset:
                    raise CorruptRecordError(
                        f"batch at position {position} has offset {batch.base_offset}, below "
                        f"the segment's base offset {self.base_offset}"
                    )
                if batch.max_timestamp > max_ts.timestamp:
                    max_ts = TimestampOffset(batch.max_timestamp, batch.last_offset)
                if since > self.index_interval_bytes:
                    self.offset_index.append(batch.last_offset, position)
                    self.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
                    since = 0
                size = batch.size_in_bytes
                since += size
                valid = position + size
                result.batches += 1
                if on_batch is not None:
                    on_batch(batch)
        except CorruptRecordError as exc:  # includes TruncatedBatchError
            result.error = str(exc)
            log.warning("%s: invalid data at byte %d: %s", self.path, valid, exc)
        self._max_timestamp_and_offset = max_ts
        self._bytes_since_last_index_entry = since
        if max_ts.timestamp >= 0:
            self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
        result.valid_bytes = valid
        result.truncated_bytes = self.log.truncate_to(valid)
        return result

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``; returns bytes removed.

        Kafka truncates at batch granularity: the batch containing ``offset`` goes entirely.
        """
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if mapping is None:
            return 0
        # The batch holding `offset` starts at mapping.position: cut there.
        removed = self.log.truncate_to(mapping.position)
        self._rolling_based_timestamp = None if mapping.position == 0 else self._rolling_based_timestamp
        self._max_timestamp_and_offset = None
        if self.time_index.entries == 0:
            self._max_timestamp_and_offset = TimestampOffset(-1, self.base_offset)
        self._bytes_since_last_index_entry = self._bytes_since_index_end()
        return removed

    def _bytes_since_index_end(self) -> int:
        last = self.offset_index.lookup(self.offset_index.last_offset)
        return self.size - last.position if self.offset_index.entries else self.size

    # -- files -----------------------------------------------------------------------

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Trim and close every file (the final time index entry is written first)."""
        max_ts = self._max_timestamp_and_offset
        if max_ts is not None and max_ts.timestamp >= 0:
            self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self.log.close()

    def delete(self) -> None:
        """Delete every file of the segment (missing files are fine)."""
        self.offset_index.delete_if_exists()
        self.time_index.delete_if_exists()
        self.txn_index.delete_if_exists()
        self.log.delete_if_exists()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename all files from ``<name><old_suffix>`` to ``<name><new_suffix>``."""
        for item in (self.log, self.offset_index, self.time_index, self.txn_index):
            path = item.path
            name = path.name[: len(path.name) - len(old_suffix)] if old_suffix else path.name
            if old_suffix and not path.name.endswith(old_suffix):
                raise ValueError(f"{path} does not end with {old_suffix!r}")
            if path.exists():
                item.rename_to(path.with_name(name + new_suffix))

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.path})"
