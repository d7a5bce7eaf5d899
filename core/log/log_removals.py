"""What removes data from a :class:`~tierlog.log.log.Log`: truncating its end (a follower),
restarting it empty at an offset, moving its log start offset up (DeleteRecords) and deleting
its old segments (retention).

Each removal keeps the partition's parts in step: the local segments (the LocalLog), the
offsets (:class:`~tierlog.log.offsets.LogOffsets`, which tells producer state and the epoch
cache), the producer snapshots, and SegmentDeleted for every segment removed (delivered after
the lock is released). It holds those parts, handed to it by the Log that owns them, never the
Log itself, and runs under that Log's lock (the Log checks it is writable first).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from tierlog.errors import OffsetOutOfRangeError
from tierlog.log.local_log import LocalLog
from tierlog.log.log_events import PartitionEvents
from tierlog.log.offsets import LogOffsets, last_offset_off_local
from tierlog.log.segment import LogSegment
from tierlog.producer.state import ProducerStateManager

logger = logging.getLogger(__name__)

__all__ = ["LogRemovals", "last_offset_off_local"]


class LogRemovals:
    """Removals from one log (under its lock; not thread-safe alone)."""

    __slots__ = ("_events", "_local", "_offsets", "_producers", "_roll", "_time_ms")

    def __init__(self, local: LocalLog, offsets: LogOffsets,
                 producer_state: ProducerStateManager, events: PartitionEvents,
                 roll: Callable[[int], LogSegment], time_ms: Callable[[], int]) -> None:
        self._local = local
        self._offsets = offsets
        self._producers = producer_state
        self._events = events
        #: Every roll of the log (``LogAppends.roll``): retention rolls before deleting all.
        self._roll = roll
        self._time_ms = time_ms

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch holding an offset >= ``target_offset`` (a follower truncating to
        its leader). Segments, indexes, producer state, the epoch cache, the high watermark
        and the recovery point stay consistent. Returns False when there was nothing to do."""
        local = self._local
        if target_offset >= local.next_offset:
            self._offsets.log_end_kept(local.next_offset)
            return False
        first = local.segments.first
        if first is None or target_offset < first.base_offset:
            self.truncate_fully(target_offset)
            return True
        removed = local.truncate_to(target_offset, self._on_segments_removed)
        leo = local.next_offset
        # Kafka: truncating below the log start offset moves the log start down with it;
        # producer state replays from the newest valid snapshot.
        self._offsets.truncated(leo, local.segments, self._time_ms())
        logger.info("%s: truncated to offset %d (%d bytes from the active segment)",
                    local.name, leo, removed)
        return True

    def truncate_fully(self, new_offset: int) -> None:
        """Delete every segment and restart the log, empty, at ``new_offset``."""
        self._local.truncate_fully(new_offset, self._on_segments_removed)
        self._offsets.restart_at(new_offset)
        logger.info("%s: truncated fully; the log now starts at offset %d",
                    self._local.name, new_offset)

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start offset up to ``offset`` (at most the high
        watermark). Reads below it then raise OffsetOutOfRangeError; retention deletes the
        segments that fall wholly below it. Returns the new log start offset."""
        high_watermark = self._offsets.high_watermark
        if offset > high_watermark:
            raise OffsetOutOfRangeError(
                f"{self._local.name}: cannot delete records before offset {offset}: it is "
                f"above the high watermark {high_watermark}"
            )
        self.increment_log_start_offset(offset)
        return self._offsets.log_start_offset

    def increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset to ``offset`` when above it (never lowers it); True
        when it moved."""
        if offset <= self._offsets.log_start_offset:
            return False
        self._offsets.advance_log_start(offset, self._local.next_offset)
        logger.info("%s: log start offset is now %d", self._local.name, offset)
        return True

    def _on_segments_removed(self, doomed: Sequence[LogSegment], reason: str) -> None:
        """What the log drops when the local log removes segments (before their files go):
        it posts SegmentDeleted for each, and deletes the producer snapshots below the first
        remaining segment but the one a replay from it starts from (Kafka deletes the
        snapshots of deleted segments; below the first segment nothing can be replayed
        locally, and a tiered log's older data is only in the tier). Those above the log end
        go when producer state is rebuilt."""
        self._events.deleted(doomed, reason)
        first = self._local.segments.first
        if first is not None:
            self._producers.delete_snapshots_before(first.base_offset, keep_floor=True)

    def delete_old_segments(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str,
        tiered: bool,
    ) -> list[tuple[int, int]]:
        """Kafka's ``deleteOldSegments``: from the oldest segment on, delete while
        ``predicate(segment, next_segment)`` holds and the segment is wholly below the high
        watermark (and, when ``tiered``, already copied to the remote tier). An empty active
        segment stays; if every segment goes, the log rolls first so one remains. Untiered,
        the log start offset moves to the first remaining segment; tiered, only the local log
        start offset moves. Returns (base offset, size) of each deleted segment."""
        local, offsets = self._local, self._offsets
        deletable = local.deletable_segments(
            predicate, offsets.high_watermark,
            offsets.last_offset_off_local() if tiered else None)
        if not deletable:
            return []
        if len(deletable) == len(local.segments):
            new_segment = self._roll(local.next_offset)
            if deletable[-1] is new_segment:
                deletable.pop()
        deleted = [(s.base_offset, s.size) for s in deletable]
        local.remove_segments(deletable, reason, self._on_segments_removed)
        first = local.segments.first
        if not tiered and first is not None:  # a roll above keeps one segment
            self.increment_log_start_offset(first.base_offset)
        return deleted
