"""The ``compact`` cleanup policy: Kafka's log cleaner (``Cleaner``, ``LogCleaner``) for one log at
a time.

Maps the latest offset of each key in the dirty range, rewrites closed segments in groups
keeping only what the map and the transaction, tombstone and producer rules keep, and swaps.
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tierlog.cleaner.cleanable import LogToClean, group_segments_by_size
from tierlog.cleaner.cleaner_checkpoint import CleanerCheckpoints
from tierlog.cleaner.offset_map import (
    DEFAULT_HASH_ALGORITHM,
    DEFAULT_LOAD_FACTOR,
    DEFAULT_MAX_MEMORY,
    OffsetMap,
)
from tierlog.cleaner.rewrite import empty_batch, rewrite_batch
from tierlog.cleaner.swap import SwapHook, open_cleaned_segment, replace_segments
from tierlog.cleaner.txn_metadata import CleanedTransactionMetadata
from tierlog.contracts.cleanup_policy import CleanupResult
from tierlog.errors import LogCleaningAbortedError, LogClosedError
from tierlog.index import AbortedTxn
from tierlog.index.aborted_txns import collect_aborted_txns
from tierlog.log.segment import AppendedBatch
from tierlog.records import Record, RecordBatch

if TYPE_CHECKING:
    from tierlog.log.log import Log
    from tierlog.log.segment import LogSegment

log = logging.getLogger(__name__)

#: Bytes of kept batches gathered before one write to the cleaned segment.
WRITE_CHUNK_BYTES = 1 << 20
#: Batches gathered before one write: a vectored write takes at most IOV_MAX (1024) pieces.
WRITE_CHUNK_BATCHES = 512


@dataclass(slots=True)
class CompactionResult(CleanupResult):
    """A compaction run: the common counts plus the dirty range it looked at."""

    dirty_ratio: float = 0.0
    """Dirty bytes over all bytes below the first uncleanable offset, before cleaning."""
    first_dirty_offset: int = -1
    """Where the dirty range started (the cleaner checkpoint)."""
    end_offset: int = -1
    """The new cleaner checkpoint: the first offset this run did not clean (-1 if none ran)."""


class _LastRecord(NamedTuple):
    """Kafka's ``LastRecord``: an active producer's last data offset (-1: none) and epoch."""

    last_data_offset: int
    producer_epoch: int


class _Retention(Enum):
    """Kafka's ``BatchRetention``: what to do with a batch whose records all go."""

    DELETE = 1
    DELETE_EMPTY = 2
    RETAIN_EMPTY = 3


@dataclass(slots=True)
class _Pass:
    """What the cleaning of one log carries from segment to segment."""

    offset_map: OffsetMap
    now_ms: int
    delete_retention_ms: int
    txn: CleanedTransactionMetadata
    last_records: dict[int, _LastRecord]
    result: CompactionResult
    #: Each segment read so far (the offset map's and the cleaned ones) with its size then.
    read_sizes: dict[LogSegment, int]


class Cleaner:
    """Cleans compacted logs: ``clean_log`` runs one cleaning of one log (Kafka's
    ``LogCleaner`` thread body with ``Cleaner.doClean``), keeping the first dirty offset of each
    log in its log dir's ``cleaner-offset-checkpoint``.

    Each run builds its own OffsetMap, capped at ``dedupe_buffer_size`` bytes (Kafka's
    ``log.cleaner.dedupe.buffer.size``) and filled to ``load_factor``. ``swap_hook`` is called
    after each step of every segment swap (see ``tierlog.cleaner.swap``).

    Thread-safe: different logs may be cleaned concurrently; a second concurrent run on the same
    log is skipped. A run reads segment data without the log's lock (segments below the active
    one are immutable) and takes the lock only to copy the segment list and offsets and to swap
    segments, so appends and reads continue meanwhile.
    """

    def __init__(
        self,
        *,
        dedupe_buffer_size: int = DEFAULT_MAX_MEMORY,
        load_factor: float = DEFAULT_LOAD_FACTOR,
        hash_algorithm: str = DEFAULT_HASH_ALGORITHM,
        checkpoints: CleanerCheckpoints | None = None,
        swap_hook: SwapHook | None = None,
    ) -> None:
        self.dedupe_buffer_size = dedupe_buffer_size
        self.load_factor = load_factor
        self.hash_algorithm = hash_algorithm
        self.checkpoints = checkpoints or CleanerCheckpoints()
        self.swap_hook = swap_hook
        # Fail on a bad size or algorithm now rather than at the first clean.
        self._new_offset_map()
        self._lock = threading.Lock()
        self._in_progress: set[Path] = set()

    def log_to_clean(self, target: Log, now_ms: int) -> LogToClean:
        """The cleanable range and dirty ratio of ``target`` now."""
        return LogToClean.of(target, self.checkpoints.read(target), now_ms)

    def clean_log(self, target: Log, now_ms: int, force: bool = False) -> CompactionResult:
        """Clean ``target`` if its dirty ratio exceeds ``min.cleanable.dirty.ratio`` or its
        dirty data is older than ``max.compaction.lag.ms``; with ``force``, clean whatever is
        below the first uncleanable offset (even with no dirty data: tombstones and markers
        past their delete horizon then go). ``now_ms`` is the time tombstone horizons are
        set from and compared with."""
        result = CompactionResult("compact")
        directory = Path(target.directory)
        with self._lock:
            if directory in self._in_progress:
                result.skipped = "the log is already being cleaned"
                return result
            self._in_progress.add(directory)
        try:
            self._clean_log(target, now_ms, force, result)
        except (LogCleaningAbortedError, LogClosedError) as e:
            log.info("%s: cleaning abandoned: %s", directory.name, e)
            result.skipped = str(e)
        finally:
            with self._lock:
                self._in_progress.discard(directory)
        return result

    # -- one run ---------------------------------------------------------------------

    def _clean_log(self, target: Log, now_ms: int, force: bool, result: CompactionResult) -> None:
        to_clean = self.log_to_clean(target, now_ms)
        if to_clean.force_update_checkpoint:
            self.checkpoints.update(target, to_clean.first_dirty_offset)
        result.dirty_ratio = to_clean.cleanable_ratio
        result.first_dirty_offset = to_clean.first_dirty_offset
        min_ratio = target.config["min.cleanable.dirty.ratio"]
        if to_clean.total_bytes == 0:
            result.skipped = "no closed segments to clean"
            return
        if not force and not to_clean.should_clean(min_ratio):
            result.skipped = (f"dirty ratio {to_clean.cleanable_ratio:.3f} is not above "
                              f"min.cleanable.dirty.ratio {min_ratio} and no dirty data is "
                              f"older than max.compaction.lag.ms")
            return
        offset_map = self._new_offset_map()
        segments = to_clean.segments
        mapped = self._build_offset_map(target, segments, to_clean.first_dirty_offset,
                                        to_clean.first_uncleanable_offset, offset_map)
        if force and offset_map.latest_offset < to_clean.first_dirty_offset:
            offset_map.update_latest_offset(to_clean.first_uncleanable_offset - 1)
        end_offset = offset_map.latest_offset + 1
        config = target.config
        groups = group_segments_by_size(
            [s for s in segments if s.base_offset < end_offset], config["segment.bytes"],
            config["segment.index.bytes"], to_clean.first_uncleanable_offset,
        )
        run = _Pass(offset_map, now_ms, config["delete.retention.ms"],
                    CleanedTransactionMetadata(), {}, result, mapped)
        for group in groups:
            run.last_records = _last_records_of_active_producers(target)
            self._clean_segments(target, segments, group, run)
        result.end_offset = max(end_offset, to_clean.first_dirty_offset)
        self.checkpoints.update(target, result.end_offset)
        result.reasons.append(
            f"cleaned {result.segments_cleaned} segments into {len(groups)} up to offset "
            f"{result.end_offset} (dirty ratio {result.dirty_ratio:.3f}): "
            f"{result.records_kept} records kept, {result.records_removed} removed, "
            f"{result.bytes_before} -> {result.bytes_after} bytes"
        )
        log.info("%s: %s", target.directory.name, result.reasons[-1])

    def _new_offset_map(self) -> OffsetMap:
        return OffsetMap(self.dedupe_buffer_size, load_factor=self.load_factor,
                         hash_algorithm=self.hash_algorithm)

    # -- the offset map --------------------------------------------------------------

    def _build_offset_map(
        self, target: Log, segments: Sequence[LogSegment], start: int, end: int,
        offset_map: OffsetMap,
    ) -> dict[LogSegment, int]:
        """Map each key of the dirty range ``[start, end)`` to its latest offset (aborted
        transactions excluded); stops early, part-way through a segment, when the map is full.
        Returns the segments read, with their sizes."""
        dirty = [s for s in _from_floor(segments, start) if s.base_offset < end]
        txn = CleanedTransactionMetadata()
        txn.add_aborted_transactions(_collect_aborted(segments, start, end))
        mapped: dict[LogSegment, int] = {}
        for i, segment in enumerate(dirty):
            mapped[segment] = segment.size
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            if self._map_segment(segment, offset_map, start, next_start, txn):
                log.debug("%s: offset map full at offset %d", target.directory.name,
                          offset_map.latest_offset)
                break
        return mapped

    @staticmethod
    def _map_segment(
        segment: LogSegment, offset_map: OffsetMap, start: int, next_start: int,
        txn: CleanedTransactionMetadata,
    ) -> bool:
        """Add one segment's keys at or after ``start``; True when the map filled up."""
        position = segment.offset_index.lookup(start).position
        put = offset_map.put
        for _, batch in segment.log.batches_from(position):
            if batch.is_control:
                txn.on_control_batch_read(batch)
            elif not txn.on_batch_read(batch):
                for record in batch.records():
                    if record.key is not None and record.offset >= start:
                        if offset_map.is_full:
                            return True
                        put(record.key, record.offset)
            if batch.last_offset >= start:
                offset_map.update_latest_offset(batch.last_offset)
        # An offset gap (records removed by an earlier clean) ends at the next segment.
        offset_map.update_latest_offset(next_start - 1)
        return False

    # -- cleaning --------------------------------------------------------------------

    def _clean_segments(
        self, target: Log, segments: Sequence[LogSegment], group: Sequence[LogSegment],
        run: _Pass,
    ) -> None:
        """Clean ``group`` into one ``.cleaned`` segment at its first base offset and swap it in."""
        cleaned = open_cleaned_segment(target, group[0].base_offset)
        run.txn.cleaned_index = cleaned.txn_index
        try:
            for i, segment in enumerate(group):
                last = i == len(group) - 1
                upper = segment.read_next_offset() if last else group[i + 1].base_offset
                run.txn.add_aborted_transactions(
                    _collect_aborted(segments, segment.base_offset, upper))
                self._clean_into(segment, cleaned, run, last)
            cleaned.on_becoming_inactive()
            cleaned.flush()
            _copy_mtime(group[-1], cleaned)
        except Exception:
            # Only errors clean up: a crash (or a BaseException) leaves the .cleaned files to
            # the loader, which deletes them.
            cleaned.close()
            cleaned.delete()
            raise
        size_after = cleaned.size
        replace_segments(target, cleaned, group, self.swap_hook, read_sizes=run.read_sizes)
        run.result.segments_cleaned += len(group)
        run.result.bytes_before += sum(run.read_sizes.pop(s) for s in group)
        run.result.bytes_after += size_after

    def _clean_into(
        self, source: LogSegment, dest: LogSegment, run: _Pass, group_end: bool
    ) -> None:
        """Copy what ``source`` keeps into ``dest``, batch by batch, in write chunks, through
        ``LogSegment.append`` as the Log's appends: the indexes, plugin ones included, are
        fed the kept batches."""
        size = run.read_sizes.setdefault(source, source.size)
        pieces: list[bytes | memoryview] = []
        appended: list[AppendedBatch] = []
        views: list[RecordBatch] = []
        pending = 0
        for position, batch in source.log.batches_from(0, size):
            last_of_group = group_end and position + batch.size_in_bytes == size
            kept = self._filter_batch(batch, run, last_of_group)
            if kept is None:
                continue
            view = RecordBatch(kept, 0)
            pieces.append(kept)
            appended.append(AppendedBatch(view.last_offset, view.max_timestamp, len(kept)))
            views.append(view)
            pending += len(kept)
            if pending >= WRITE_CHUNK_BYTES or len(pieces) >= WRITE_CHUNK_BATCHES:
                dest.append(pieces, appended, views)
                pieces, appended, views, pending = [], [], [], 0
        if pieces:
            dest.append(pieces, appended, views)

    def _filter_batch(
        self, batch: RecordBatch, run: _Pass, last_of_group: bool
    ) -> bytes | memoryview | None:
        """What a batch becomes: itself, a rewrite with the records kept, an empty header,
        or nothing (Kafka's cleaner filter with ``MemoryRecords.filterTo``)."""
        result = run.result
        if batch.is_control:
            can_discard = run.txn.on_control_batch_read(batch)
            horizon = batch.delete_horizon_ms
            discard_records = can_discard and horizon is not None and horizon <= run.now_ms
        else:
            can_discard = run.txn.on_batch_read(batch)
            discard_records = can_discard
        if (batch.producer_id >= 0 and self._is_last_of_producer(batch, run)) or last_of_group:
            # A producer's last batch keeps its sequence and epoch for producer state; the
            # group's last batch keeps the cleaned segment's next offset equal to the old
            # one's (Kafka keeps the cleaning round's last batch for the same reason).
            retention = _Retention.RETAIN_EMPTY
        elif discard_records:
            retention = _Retention.DELETE
        else:
            retention = _Retention.DELETE_EMPTY
        if retention is _Retention.DELETE:
            result.records_removed += batch.record_count
            return None
        records = batch.records()
        retained = []
        has_tombstone = False
        if not discard_records:
            for record in records:
                if batch.is_control or self._should_retain(batch, record, run):
                    retained.append(record)
                    has_tombstone = has_tombstone or record.value is None
        result.records_kept += len(retained)
        result.records_removed += len(records) - len(retained)
        if retained:
            needs_horizon = ((has_tombstone or (can_discard and batch.is_control))
                             and batch.delete_horizon_ms is None)
            if len(retained) == len(records) and not needs_horizon:
                return batch.view()
            horizon = run.now_ms + run.delete_retention_ms if needs_horizon else batch.delete_horizon_ms
            return rewrite_batch(batch, retained, horizon)
        if retention is _Retention.RETAIN_EMPTY:
            return empty_batch(batch)
        return None

    @staticmethod
    def _is_last_of_producer(batch: RecordBatch, run: _Pass) -> bool:
        last = run.last_records.get(batch.producer_id)
        if last is None:
            return False
        if last.last_data_offset >= 0:
            return batch.last_offset == last.last_data_offset
        return batch.is_control and batch.producer_epoch == last.producer_epoch

    @staticmethod
    def _should_retain(batch: RecordBatch, record: Record, run: _Pass) -> bool:
        """Kafka's ``shouldRetainRecord``: past the mapped range, or the latest for its key
        and either a value or a tombstone before its batch's delete horizon."""
        offset = record.offset
        offset_map = run.offset_map
        if offset > offset_map.latest_offset:
            return True
        key = record.key
        if key is None:
            return False  # a keyless record has no place in a compacted log
        if offset < offset_map.get(key):
            return False
        if record.value is not None:
            return True
        horizon = batch.delete_horizon_ms
        return horizon is None or run.now_ms < horizon


class CompactPolicy:
    """``cleanup.policy=compact``: clean the log when Kafka's log cleaner would (see Cleaner).

    Thread-safe as its Cleaner.
    """

    name = "compact"

    def __init__(self, cleaner: Cleaner | None = None) -> None:
        self.cleaner = cleaner or Cleaner()

    def clean(self, log: Log, now_ms: int) -> CompactionResult:
        return self.cleaner.clean_log(log, now_ms)


def _last_records_of_active_producers(target: Log) -> dict[int, _LastRecord]:
    """Kafka's ``lastRecordsOfActiveProducers``, copied under the log's lock."""
    with target.lock:
        return {
            pid: _LastRecord(entry.last_data_offset, entry.producer_epoch)
            for pid, entry in target.producer_state.active_producers.items()
        }


def _from_floor(segments: Sequence[LogSegment], offset: int) -> Sequence[LogSegment]:
    """The segments from the one holding ``offset`` (or the first) to the end."""
    floor = bisect_right([s.base_offset for s in segments], offset) - 1
    return segments[max(floor, 0):]


def _collect_aborted(segments: Sequence[LogSegment], start: int, upper: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[start, upper)``, from the transaction indexes of the
    segment holding ``start`` and of every later one until an entry's last stable offset
    reaches ``upper`` (Kafka's ``collectAbortedTransactions``)."""
    return collect_aborted_txns(_from_floor(segments, start), start, upper)


def _copy_mtime(source: LogSegment, dest: LogSegment) -> None:
    """Give the cleaned files the last replaced segment's mtime, as Kafka does: retention and
    the compaction lag of segments without timestamps go by it."""
    mtime = os.stat(source.path).st_mtime_ns
    for path in (dest.path, dest.offset_index.path, dest.time_index.path):
        os.utime(path, ns=(mtime, mtime))
