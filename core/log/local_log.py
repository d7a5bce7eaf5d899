"""LocalLog: the local segments of one partition directory (Kafka's ``LocalLog``).

What it owns: the directory, the :class:`~tierlog.log.segments.LogSegments`, the log end offset
(``next_offset``, moved only here and by its armed appender, its own hot path), the recovery
point, the last flush time and the active segment's armed hot-path appender; it opens, appends to, rolls, reads, flushes, truncates,
replaces (the cleaner's swap) and removes segments, deletes removed ones later through the
scheduler, and closes them. What it does not own: the log start offset, high watermark, producer state,
leader epochs, the remote tier and lifecycle events; those are the owning
:class:`tierlog.log.log.Log`'s, which passes hooks (``before_add``, ``on_removed``) where its
state must change between two local steps.

Thread-safety: none of its own. The owning Log's lock guards every mutation; reads walk a
snapshot of the segment list (``segments.values()``) taken under that lock. The only code
that runs on another thread, a scheduled delete of removed segments, takes that lock itself.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from tierlog.common import filenames
from tierlog.common.atomic import fsync_dir
from tierlog.common.scheduler import Scheduler
from tierlog.config import LogConfig
from tierlog.errors import RecordBatchTooLargeError
from tierlog.index.aborted_txns import collect_aborted_txns
from tierlog.index.index_types import DEFAULT_INDEX_TYPES, SegmentIndexTypes
from tierlog.log import segment_read_only
from tierlog.log.fetch_info import FetchDataInfo
from tierlog.log.segment import AppendedBatch, LogSegment
from tierlog.log.segment_appender import PlainAppendCounts, PlainAppenderType, Written
from tierlog.log.segments import LogSegments
from tierlog.records.batch import RecordBatch
from tierlog.records.file_records import TimestampAndOffset

log = logging.getLogger(__name__)

__all__ = ["LocalLog"]

#: ``LocalLog.append_plain``: (data, leader epoch) -> what was written, or None.
PlainAppend = Callable[[bytes | bytearray | memoryview, int | None], Written | None]


def _none_armed(data: bytes | bytearray | memoryview, leader_epoch: int | None) -> None:
    """``LocalLog.append_plain`` while no appender is armed: nothing written."""


class LocalLog:
    """The segments on disk of one log and the offsets that describe only them."""

    __slots__ = (
        "_index_types",
        "_lock",
        "_rng",
        "_scheduler",
        "_time_ms",
        "append_plain",
        "config",
        "directory",
        "last_flush_ms",
        "next_offset",
        "pending_deletes",
        "plain_appender",
        "read_only",
        "recovery_point",
        "segments",
    )

    def __init__(self, directory: Path, config: LogConfig, *, time_ms: Callable[[], int],
                 rng: random.Random, scheduler: Scheduler | None, lock: threading.RLock,
                 index_types: SegmentIndexTypes = DEFAULT_INDEX_TYPES,
                 read_only: bool = False) -> None:
        self.directory = directory
        #: Opened read-only: segments open without writing, nothing here changes a file.
        self.read_only = read_only
        self.config = config
        #: Empty until :meth:`loaded` hands over what the LogLoader found.
        self.segments = LogSegments()
        #: The log end offset: the offset the next appended record gets.
        self.next_offset = 0
        #: Every offset below it is fsynced (recovery re-validates from its segment on).
        self.recovery_point = 0
        self.last_flush_ms = time_ms()
        #: Segments renamed ``.deleted`` whose scheduled delete has not run yet.
        self.pending_deletes: list[LogSegment] = []
        #: The active segment's hot-path appender, armed after a general append (may since
        #: have been disarmed by the segment: it then writes nothing and returns None).
        self.plain_appender: PlainAppenderType | None = None
        #: The producer hot path, ``append_plain(data, leader_epoch)``: the armed appender's
        #: own ``append`` (one C call, no Python frame of this class in between), which writes
        #: one plain batch at the log end, moves the end past it and counts it, returning
        #: (size, last offset, max timestamp, record count, leader epoch); None when nothing
        #: was written (none armed, or the batch is not plain: the general path's to judge).
        self.append_plain: PlainAppend = _none_armed
        self._time_ms = time_ms
        self._rng = rng
        self._scheduler = scheduler
        #: Which type opens each index of a new segment (the registry's, resolved by the Log).
        self._index_types = index_types
        #: The owning Log's lock, taken here only by the scheduled delete (another thread).
        self._lock = lock

    def loaded(self, segments: LogSegments, next_offset: int, recovery_point: int) -> None:
        """Take over the segments and offsets the LogLoader recovered; the active segment's
        indexes get their full size back (loading trims them)."""
        self.segments = segments
        self.next_offset = next_offset
        self.recovery_point = recovery_point
        if self.read_only:
            return
        index_bytes = self.config["segment.index.bytes"]
        segments.active.offset_index.resize(index_bytes)
        segments.active.time_index.resize(index_bytes)

    @property
    def name(self) -> str:
        """The partition directory's name, ``<topic>-<partition>`` (for messages)."""
        return self.directory.name

    def open_segment(self, base_offset: int, suffix: str = "") -> LogSegment:
        """Open (creating) the segment files at ``base_offset`` with this log's settings, not
        yet part of the log: a roll adds it; the cleaner fills a ``.cleaned`` one and swaps it
        in (:mod:`tierlog.cleaner.swap`). A read-only log opens an existing segment's files
        read-only and creates none (tierlog.log.segment_read_only)."""
        config = self.config
        if self.read_only:
            return segment_read_only.open_read_only(
                self.directory, base_offset, index_interval_bytes=config["index.interval.bytes"],
                max_index_size=config["segment.index.bytes"], time_ms=self._time_ms)
        jitter = config["segment.jitter.ms"]
        return LogSegment.open(
            self.directory, base_offset,
            index_interval_bytes=config["index.interval.bytes"],
            max_index_size=config["segment.index.bytes"],
            rolling_jitter_ms=self._rng.randrange(jitter) if jitter > 0 else 0,
            time_ms=self._time_ms,
            preallocate_bytes=config["segment.bytes"] if config["preallocate"] else 0,
            suffix=suffix,
            index_types=self._index_types,
            config=config,
        )

    # -- appending -----------------------------------------------------------------------

    def append(self, pieces: Sequence[bytes | bytearray | memoryview],
               batches: Sequence[AppendedBatch], views: Sequence[RecordBatch],
               next_offset: int) -> None:
        """Write planned batches (offsets assigned, above the log end) to the active segment
        in one vectored write; the log end offset becomes ``next_offset``."""
        self.segments.active.append(pieces, batches, views)
        self.next_offset = next_offset

    def arm_plain_appends(self, max_segment_bytes: int, max_segment_ms: int,
                          max_batch_bytes: int, check_records: bool,
                          counts: PlainAppendCounts) -> None:
        """Arm the active segment's hot-path appender (see ``LogSegment.arm_plain_appends``):
        :attr:`append_plain` appends at this log's end, moves it, and counts in ``counts``."""
        appender = self.segments.active.arm_plain_appends(
            max_segment_bytes, max_segment_ms, max_batch_bytes, check_records, self, counts)
        self.plain_appender = appender
        self.append_plain = _none_armed if appender is None else appender.append

    def disarm_plain_appends(self) -> None:
        """Let go of the hot path (the next append takes the general path, which re-arms)."""
        self.segments.active.disarm_plain_appends()
        self.plain_appender = None
        self.append_plain = _none_armed

    # -- rolling and flushing ------------------------------------------------------------

    def roll(self, new_base: int,
             before_add: Callable[[int], None] | None = None) -> LogSegment:
        """Start a new active segment at ``new_base`` (at least the log end offset) and
        return it; an empty active segment already there is returned as it is.

        The new segment's files come first: on a full disk that raises OSError (its index
        space is reserved up front) before anything else changes. Then the old active
        segment is trimmed and ``before_add(new_base)`` runs (the owner's snapshot); if
        either raises, the new files are deleted and the segment list is unchanged."""
        active = self.segments.active
        if active.size == 0 and active.base_offset == new_base:
            return active  # nothing to roll: an empty segment at the same offset
        new_base = max(new_base, self.next_offset)
        if new_base in self.segments:
            raise RecordBatchTooLargeError(
                f"{self.name}: cannot roll to offset {new_base}: segment exists"
            )
        segment = self.open_segment(new_base)
        try:
            active.on_becoming_inactive()
            if before_add is not None:
                before_add(new_base)
        except BaseException:
            segment.delete()
            raise
        self.segments.add(segment)
        log.info("%s: rolled new segment at offset %d", self.name, new_base)
        return segment

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to_offset`` (default and at most:
        the log end offset) and the directory, then move the recovery point there."""
        next_offset = self.next_offset
        target = next_offset if up_to_offset is None else min(up_to_offset, next_offset)
        if target <= self.recovery_point:
            return
        for segment in self.segments.values(self.recovery_point, target):
            segment.flush()
        fsync_dir(self.directory)
        self.recovery_point = target
        self.last_flush_ms = self._time_ms()

    # -- reading -------------------------------------------------------------------------

    @staticmethod
    def read(segments: Sequence[LogSegment], end_offset: int, offset: int, max_bytes: int,
             isolation: str, upper: int, min_one_message: bool) -> FetchDataInfo:
        """Read from a snapshot of the segments (``segments`` from the one holding
        ``offset`` on, ``end_offset`` the log end when it was taken): at most ``max_bytes``
        (at least one whole batch when ``min_one_message``) of batches below ``upper``, with
        the aborted transactions of the range for ``read_committed``."""
        for i, segment in enumerate(segments):
            if segment.base_offset >= upper:
                break
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else end_offset
            max_position = None
            if upper < next_base:
                max_position = LocalLog._position_of_upper_bound(segment, upper)
            result = segment.read(offset, max_bytes, max_position, min_one_message)
            if result is None:
                continue
            _, data, incomplete = result
            aborted = None
            if isolation == "read_committed":
                aborted = tuple(collect_aborted_txns(segments[i:], offset, upper))
            return FetchDataInfo(offset, upper, data, isolation, incomplete, aborted)
        return FetchDataInfo.empty(offset, upper, isolation)

    @staticmethod
    def _position_of_upper_bound(segment: LogSegment, upper: int) -> int | None:
        """The file position a read capped at ``upper`` stops at: the start of the batch holding
        ``upper``, or its end when that batch also holds offsets below ``upper`` (a cap chosen
        by the caller; the high watermark and LSO always fall on batch boundaries)."""
        cap = segment.translate_offset(upper)
        if cap is None:
            return None
        header = segment.log.read_header(cap.position)
        if header is not None and header.base_offset < upper:
            return cap.position + cap.size
        return cap.position

    @staticmethod
    def max_timestamp(segments: Sequence[LogSegment]) -> TimestampAndOffset | None:
        """The record with the largest timestamp in a snapshot of the segments (the first of
        equals), or None when no segment holds a timestamp."""
        best = max(segments, key=lambda s: s.max_timestamp_so_far)
        if best.max_timestamp_so_far < 0:
            return None
        return TimestampAndOffset(best.max_timestamp_so_far, best.offset_of_max_timestamp_so_far)

    @staticmethod
    def find_offset_by_timestamp(segments: Sequence[LogSegment], timestamp: int,
                                 start_offset: int) -> TimestampAndOffset | None:
        """The first record at or after ``start_offset`` whose timestamp is >= ``timestamp``,
        in a snapshot of the segments (None if none)."""
        for segment in segments:
            if segment.max_timestamp_so_far < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, start_offset)
            if found is not None:
                return found
        return None

    # -- truncation and removal ----------------------------------------------------------

    def truncate_to(self, target_offset: int,
                    on_removed: Callable[[Sequence[LogSegment], str], None] | None = None) -> int:
        """Remove every batch at or above ``target_offset``, which must be at or above the
        first segment's base offset: whole segments go (:meth:`remove_segments`), the
        segment holding it is cut. The log end offset becomes the offset after the last
        batch kept, the recovery point at most that. Returns the bytes cut from the segment."""
        doomed = [s for s in self.segments if s.base_offset >= target_offset]
        if doomed and doomed[0] is self.segments.first:
            doomed = doomed[1:]
        self.remove_segments(doomed, "truncation", on_removed)
        active = self.segments.active
        removed = active.truncate_to(target_offset)
        index_bytes = self.config["segment.index.bytes"]
        active.offset_index.resize(index_bytes)
        active.time_index.resize(index_bytes)
        self.next_offset = active.read_next_offset()
        self.recovery_point = min(self.recovery_point, self.next_offset)
        return removed

    def truncate_fully(self, new_offset: int,
                       on_removed: Callable[[Sequence[LogSegment], str], None] | None = None) -> None:
        """Remove every segment and start again, empty, at ``new_offset`` (the log end
        offset and the recovery point)."""
        self.remove_segments(self.segments.values(), "full truncation", on_removed)
        self.segments.add(self.open_segment(new_offset))
        self.next_offset = new_offset
        self.recovery_point = new_offset

    def deletable_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool],
        high_watermark: int, highest_offset_in_remote: int | None,
    ) -> list[LogSegment]:
        """Kafka's ``deletableSegments``: from the oldest segment on, those for which
        ``predicate(segment, next_segment)`` holds and that lie wholly below the high
        watermark and, when ``highest_offset_in_remote`` is given (a tiered log), at or below
        it; an empty active segment never. Stops at the first that does not qualify.
        A tiered log passes the last offset it no longer needs locally
        (``offsets.last_offset_off_local``: the tier's end, or below the log start)."""
        segments = self.segments.values()
        deletable: list[LogSegment] = []
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self.next_offset
            if nxt is None and segment.size == 0:
                break
            if high_watermark < upper:
                break
            if highest_offset_in_remote is not None and not (
                upper > 0 and upper - 1 <= highest_offset_in_remote
            ):
                break
            if not predicate(segment, nxt):
                break
            deletable.append(segment)
        return deletable

    def remove_segments(self, doomed: Sequence[LogSegment], reason: str,
                        on_removed: Callable[[Sequence[LogSegment], str], None] | None = None,
                        ) -> None:
        """Take segments out of the log and rename their files to ``.deleted``; then
        ``on_removed(doomed, reason)`` runs (the owner drops what refers to them) and the files go
        after ``file.delete.delay.ms`` (:meth:`delete_segments_later`)."""
        if not doomed:
            return
        for segment in doomed:
            self.segments.remove(segment.base_offset)
            segment.change_file_suffixes("", filenames.DELETED_SUFFIX)
            log.info("%s: scheduled segment %d for deletion (%s)", self.name,
                     segment.base_offset, reason)
        if on_removed is not None:
            on_removed(doomed, reason)
        self.delete_segments_later(doomed)

    def replace_segments(self, cleaned: LogSegment, old_segments: Sequence[LogSegment],
                         on_swap: Callable[[Path], None] | None = None,
                         on_deleted: Callable[[Path], None] | None = None,
                         on_final: Callable[[Path], None] | None = None) -> None:
        """Steps 1-3 of the cleaner's crash-safe swap (:func:`tierlog.cleaner.swap.
        replace_segments`, which checks first and deletes the old files after): the flushed
        ``.cleaned`` segment's files become ``.swap`` (``on_swap(path)`` after each rename),
        it joins the segment list in place of ``old_segments``, whose files become
        ``.deleted`` in offset order (``on_deleted``), and its ``.swap`` files get their final
        names (``on_final``); the directory is fsynced after the first and the last step."""
        cleaned.change_file_suffixes(filenames.CLEANED_SUFFIX, filenames.SWAP_SUFFIX, on_swap)
        fsync_dir(self.directory)
        self.segments.add(cleaned)
        for segment in sorted(old_segments, key=lambda s: s.base_offset):
            if segment.base_offset != cleaned.base_offset:
                self.segments.remove(segment.base_offset)
            segment.change_file_suffixes("", filenames.DELETED_SUFFIX, on_deleted)
        cleaned.change_file_suffixes(filenames.SWAP_SUFFIX, "", on_final)
        fsync_dir(self.directory)

    def delete_segments_later(self, doomed: Sequence[LogSegment]) -> None:
        """Close and delete segments already taken out of the log (their files renamed
        ``.deleted``) after ``file.delete.delay.ms`` through the scheduler, so readers
        holding a slice of them finish first; at once without a scheduler. Segments still
        waiting when the log closes keep their ``.deleted`` files for the loader."""
        if self._scheduler is None:
            for segment in doomed:
                segment.close()
                segment.delete()
            return
        self.pending_deletes.extend(doomed)
        self._scheduler.schedule(
            f"delete-segments-{self.name}",
            lambda: self._delete_now(doomed), delay_ms=self.config["file.delete.delay.ms"],
        )

    def _delete_now(self, doomed: Sequence[LogSegment]) -> None:
        """The scheduled delete, on the scheduler's thread: under the owning Log's lock."""
        with self._lock:
            for segment in doomed:
                if segment in self.pending_deletes:
                    self.pending_deletes.remove(segment)
                segment.close()
                segment.delete()

    def close(self) -> None:
        """Close every segment, and those awaiting a scheduled delete (their ``.deleted``
        files stay for the loader)."""
        for segment in self.segments:
            segment.close()
        for segment in self.pending_deletes:
            segment.close()
        self.pending_deletes.clear()
