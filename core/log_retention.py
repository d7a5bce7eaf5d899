"""The destructive side of a Log: truncation, the log start offset, and deleting old segments
(retention) with Kafka's rules, renaming them ``.deleted`` before they go.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from tierlog import filenames
from tierlog.errors import OffsetOutOfRangeError
from tierlog.events import EventQueue, SegmentDeleted
from tierlog.segment import LogSegment

log = logging.getLogger(__name__)


class LogRetention:
    """Mixin of :class:`tierlog.log.Log`: truncation and segment deletion, under the log's lock."""

    _events: EventQueue
    _deliver_events: Callable[[], None]

    # -- truncation and the log start offset -------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch holding an offset >= ``target_offset`` (a follower truncating to
        its leader). Segments, indexes, producer state, the epoch cache, the high watermark
        and the recovery point stay consistent. Returns False when there was nothing to do."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate {self.directory.name} to negative offset {target_offset}")
        try:
            return self._truncate_to(target_offset)
        finally:
            self._deliver_events()

    def _truncate_to(self, target_offset: int) -> bool:
        with self._lock:
            self._check_open()
            if target_offset >= self._next_offset:
                # A leader may have assigned an epoch at the log end and written nothing in it.
                self.leader_epoch_cache.truncate_from_end(self._next_offset)
                return False
            first = self.segments.first
            if first is None or target_offset < first.base_offset:
                self._truncate_fully(target_offset)
                return True
            doomed = [s for s in self.segments if s.base_offset >= target_offset]
            if doomed and doomed[0] is self.segments.first:
                doomed = doomed[1:]
            self._remove_segments(doomed, "truncation")
            active = self.segments.active
            removed = active.truncate_to(target_offset)
            active.offset_index.resize(self._config["segment.index.bytes"])
            active.time_index.resize(self._config["segment.index.bytes"])
            self._next_offset = active.read_next_offset()
            self._after_truncation()
            log.info("%s: truncated to offset %d (%d bytes from the active segment)",
                     self.directory.name, self._next_offset, removed)
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and restart the log, empty, at ``new_offset``."""
        if new_offset < 0:
            raise ValueError(f"cannot restart {self.directory.name} at negative offset {new_offset}")
        with self._lock:
            self._check_open()
            self._truncate_fully(new_offset)
        self._deliver_events()

    def _truncate_fully(self, new_offset: int) -> None:
        self._remove_segments(self.segments.values(), "full truncation")
        self.segments.add(self.open_segment(new_offset))
        self._next_offset = new_offset
        self._log_start_offset = new_offset
        self.producer_state.truncate_fully_and_start_at(new_offset)
        self.leader_epoch_cache.clear_and_flush()
        self._known_epoch = None
        self._recovery_point = new_offset
        self._set_high_watermark(new_offset)
        log.info("%s: truncated fully; the log now starts at offset %d",
                 self.directory.name, new_offset)

    def _after_truncation(self) -> None:
        leo = self._next_offset
        self._known_epoch = None
        # Kafka: truncating below the log start offset moves the log start down with it.
        self._log_start_offset = min(self._log_start_offset, leo)
        self.leader_epoch_cache.truncate_from_end(leo)
        self._rebuild_producer_state()
        self._recovery_point = min(self._recovery_point, leo)
        if self._high_watermark > leo:
            self._set_high_watermark(leo)

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start offset up to ``offset`` (at most the high
        watermark). Reads below it then raise OffsetOutOfRangeError; retention deletes the
        segments that fall wholly below it. Returns the new log start offset."""
        with self._lock:
            self._check_open()
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"{self.directory.name}: cannot delete records before offset {offset}: it is "
                    f"above the high watermark {self._high_watermark}"
                )
            self.maybe_increment_log_start_offset(offset)
            return self._log_start_offset

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset (never lowers it); updates the epoch cache and producer
        state. Returns True when it moved."""
        with self._lock:
            if offset <= self._log_start_offset:
                return False
            self._log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self.producer_state.on_log_start_offset_incremented(offset)
            if self._high_watermark < offset:
                self._set_high_watermark(offset)
            log.info("%s: log start offset is now %d", self.directory.name, offset)
            return True

    def _remove_segments(self, doomed: Sequence[LogSegment], reason: str) -> None:
        """Take segments out of the log, rename their files to ``.deleted`` and remove them
        after ``file.delete.delay.ms`` (at once without a scheduler), so readers holding a
        slice of them finish first."""
        if not doomed:
            return
        for segment in doomed:
            self.segments.remove(segment.base_offset)
            segment.change_file_suffixes("", filenames.DELETED_SUFFIX)
            log.info("%s: scheduled segment %d for deletion (%s)", self.directory.name,
                     segment.base_offset, reason)
            self._events.post("tierlog_segment_deleted", SegmentDeleted(
                self.topic, self.partition, self.topic_id, segment.base_offset, segment.size,
                reason))
        first = self.segments.first
        if first is not None:
            # Kafka deletes the snapshots of deleted segments, but keeps the one a replay from
            # the first segment starts from: below it nothing can be replayed locally (a tiered
            # log's older data is only in the tier). Those above the log end go when producer
            # state is rebuilt.
            self.producer_state.delete_snapshots_before(first.base_offset, keep_floor=True)
        self.delete_segments_later(doomed)

    def delete_segments_later(self, doomed: Sequence[LogSegment]) -> None:
        """Close and delete segments already taken out of the log (their files renamed
        ``.deleted``) after ``file.delete.delay.ms`` through the log's scheduler, so readers
        holding a slice of them finish first; at once without a scheduler. Segments still
        waiting when the log closes keep their ``.deleted`` files for the loader."""
        if self._scheduler is None:
            for segment in doomed:
                segment.close()
                segment.delete()
            return
        self._pending_deletes.extend(doomed)
        self._scheduler.schedule(
            f"delete-segments-{self.directory.name}",
            lambda: self._delete_now(doomed), delay_ms=self._config["file.delete.delay.ms"],
        )

    def _delete_now(self, doomed: Sequence[LogSegment]) -> None:
        with self._lock:
            for segment in doomed:
                if segment in self._pending_deletes:
                    self._pending_deletes.remove(segment)
                segment.close()
                segment.delete()

    def delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str
    ) -> list[tuple[int, int]]:
        """Kafka's ``deleteOldSegments``: from the oldest segment on, delete while
        ``predicate(segment, next_segment)`` holds and the segment is wholly below the high
        watermark (and, when tiered, already copied to the remote tier). An empty active
        segment stays; if every segment goes, the log rolls first so one remains. Untiered,
        the log start offset moves to the first remaining segment; tiered, only the local log
        start offset moves. Returns (base offset, size) of each deleted segment."""
        try:
            return self._delete_old_segments(predicate, reason)
        finally:
            self._deliver_events()

    def _delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str
    ) -> list[tuple[int, int]]:
        with self._lock:
            self._check_open()
            segments = self.segments.values()
            deletable: list[LogSegment] = []
            for i, segment in enumerate(segments):
                nxt = segments[i + 1] if i + 1 < len(segments) else None
                upper = nxt.base_offset if nxt is not None else self._next_offset
                if nxt is None and segment.size == 0:
                    break
                if self._high_watermark < upper:
                    break
                if self.remote_storage_enabled and not (
                    upper > 0 and upper - 1 <= self._highest_offset_in_remote
                ):
                    break
                if not predicate(segment, nxt):
                    break
                deletable.append(segment)
            if not deletable:
                return []
            if len(deletable) == len(segments):
                new_segment = self._roll(self._next_offset)
                if deletable[-1] is new_segment:
                    deletable.pop()
            deleted = [(s.base_offset, s.size) for s in deletable]
            self._remove_segments(deletable, reason)
            if not self.remote_storage_enabled:
                self.maybe_increment_log_start_offset(self.segments.first.base_offset)
            return deleted
