"""What removes data from a :class:`~tierlog.log.log.Log`: truncating its end (a follower),
restarting it empty at an offset, moving its log start offset up (DeleteRecords) and deleting
its old segments (retention).

Each removal keeps the partition's state in step under the log's lock: the local segments
(through ``log.local``), the log start offset, high watermark, producer state and leader epoch
cache, and posts SegmentDeleted for every segment removed (delivered after the lock is
released). It owns no state of its own: it changes the Log it serves, whose removal methods
delegate here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tierlog.errors import OffsetOutOfRangeError
from tierlog.events import SegmentDeleted
from tierlog.log.loader import rebuild_producer_state
from tierlog.log.segment import LogSegment

if TYPE_CHECKING:
    from tierlog.log.log import Log

logger = logging.getLogger(__name__)

__all__ = ["LogRemovals", "last_offset_off_local"]


def last_offset_off_local(highest_offset_in_remote: int, log_start_offset: int) -> int:
    """The last offset a tiered log's local segments no longer hold for the remote tier:
    one the tier holds (copied), or one below the log start offset (deleted records: never
    copied, as Kafka copies from the local log start, and removable locally uncopied, as
    Kafka's ``deletableSegments`` allows once the log start passed a segment). The one rule
    of both the RemoteLogManager's copy candidates (it copies only segments above this) and
    local retention (it removes only segments at or below this)."""
    return max(highest_offset_in_remote, log_start_offset - 1)


class LogRemovals:
    """Removals from one Log (thread-safe as the Log is: each runs under its lock)."""

    __slots__ = ("_log",)

    def __init__(self, log: Log) -> None:
        self._log = log

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch holding an offset >= ``target_offset`` (a follower truncating to
        its leader). Segments, indexes, producer state, the epoch cache, the high watermark
        and the recovery point stay consistent. Returns False when there was nothing to do."""
        log = self._log
        if target_offset < 0:
            raise ValueError(
                f"cannot truncate {log.directory.name} to negative offset {target_offset}")
        try:
            return self._truncate_to(target_offset)
        finally:
            log._deliver_events()

    def _truncate_to(self, target_offset: int) -> bool:
        log = self._log
        with log._lock:
            log._check_writable()
            local = log.local
            if target_offset >= local.next_offset:
                # A leader may have assigned an epoch at the log end and written nothing in it.
                log.leader_epoch_cache.truncate_from_end(local.next_offset)
                return False
            first = local.segments.first
            if first is None or target_offset < first.base_offset:
                self._truncate_fully(target_offset)
                return True
            removed = local.truncate_to(target_offset, self._on_segments_removed)
            leo = local.next_offset
            log._known_epoch = None
            # Kafka: truncating below the log start offset moves the log start down with it.
            log._log_start_offset = min(log._log_start_offset, leo)
            log.leader_epoch_cache.truncate_from_end(leo)
            # Replays from the newest valid snapshot (Kafka's rebuild after a truncation).
            rebuild_producer_state(log.producer_state, local.segments, log._log_start_offset,
                                   leo, log._time_ms())
            if log._high_watermark > leo:
                log._set_high_watermark(leo)
            logger.info("%s: truncated to offset %d (%d bytes from the active segment)",
                        log.directory.name, leo, removed)
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and restart the log, empty, at ``new_offset``."""
        log = self._log
        if new_offset < 0:
            raise ValueError(
                f"cannot restart {log.directory.name} at negative offset {new_offset}")
        with log._lock:
            log._check_writable()
            self._truncate_fully(new_offset)
        log._deliver_events()

    def _truncate_fully(self, new_offset: int) -> None:
        log = self._log
        log.local.truncate_fully(new_offset, self._on_segments_removed)
        log._log_start_offset = new_offset
        log.producer_state.truncate_fully_and_start_at(new_offset)
        log.leader_epoch_cache.clear_and_flush()
        log._known_epoch = None
        log._set_high_watermark(new_offset)
        logger.info("%s: truncated fully; the log now starts at offset %d",
                    log.directory.name, new_offset)

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start offset up to ``offset`` (at most the high
        watermark). Reads below it then raise OffsetOutOfRangeError; retention deletes the
        segments that fall wholly below it. Returns the new log start offset."""
        log = self._log
        with log._lock:
            log._check_writable()
            if offset > log._high_watermark:
                raise OffsetOutOfRangeError(
                    f"{log.directory.name}: cannot delete records before offset {offset}: it is "
                    f"above the high watermark {log._high_watermark}"
                )
            self.maybe_increment_log_start_offset(offset)
            return log._log_start_offset

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset (never lowers it); updates the epoch cache and producer
        state. Returns True when it moved."""
        log = self._log
        with log._lock:
            if offset <= log._log_start_offset:
                return False
            log._check_writable()
            log._log_start_offset = offset
            log.leader_epoch_cache.truncate_from_start(offset)
            log.producer_state.on_log_start_offset_incremented(offset)
            if log._high_watermark < offset:
                log._set_high_watermark(offset)
            logger.info("%s: log start offset is now %d", log.directory.name, offset)
            return True

    def _on_segments_removed(self, doomed: Sequence[LogSegment], reason: str) -> None:
        """What the Log drops when the local log removes segments (before their files go):
        it posts SegmentDeleted for each, and deletes the producer snapshots below the first
        remaining segment but the one a replay from it starts from (Kafka deletes the
        snapshots of deleted segments; below the first segment nothing can be replayed
        locally, and a tiered log's older data is only in the tier). Those above the log end
        go when producer state is rebuilt."""
        log = self._log
        for segment in doomed:
            log._events.post("tierlog_segment_deleted", SegmentDeleted(
                log.topic, log.partition, log.topic_id, segment.base_offset, segment.size,
                reason))
        first = log.local.segments.first
        if first is not None:
            log.producer_state.delete_snapshots_before(first.base_offset, keep_floor=True)

    def delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str
    ) -> list[tuple[int, int]]:
        """Kafka's ``deleteOldSegments``: from the oldest segment on, delete while
        ``predicate(segment, next_segment)`` holds and the segment is wholly below the high
        watermark (and, when tiered, already copied to the remote tier). An empty active
        segment stays; if every segment goes, the log rolls first so one remains. Untiered,
        the log start offset moves to the first remaining segment; tiered, only the local log
        start offset moves. Returns (base offset, size) of each deleted segment."""
        log = self._log
        try:
            return self._delete_old_segments(predicate, reason)
        finally:
            log._deliver_events()

    def _delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str
    ) -> list[tuple[int, int]]:
        log = self._log
        with log._lock:
            log._check_writable()
            local = log.local
            tiered = log.remote_storage_enabled
            deletable = local.deletable_segments(
                predicate, log._high_watermark,
                last_offset_off_local(log._highest_offset_in_remote, log._log_start_offset)
                if tiered else None)
            if not deletable:
                return []
            if len(deletable) == len(local.segments):
                new_segment = log._roll(local.next_offset)
                if deletable[-1] is new_segment:
                    deletable.pop()
            deleted = [(s.base_offset, s.size) for s in deletable]
            local.remove_segments(deletable, reason, self._on_segments_removed)
            first = local.segments.first
            if not tiered and first is not None:  # a roll above keeps one segment
                self.maybe_increment_log_start_offset(first.base_offset)
            return deleted
