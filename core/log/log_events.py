"""PartitionEvents: the lifecycle events of one partition's log, queued and delivered.

A segment rolled or deleted is posted (a frozen event naming the partition) while the log's
lock is held, and handed to plugins only once that lock is released, so a slow plugin never
blocks appends or reads (:class:`tierlog.events.EventQueue` does the delivery).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tierlog.events import EventDelivery, EventQueue, SegmentDeleted, SegmentRolled
from tierlog.log.segment import LogSegment

__all__ = ["PartitionEvents"]


class PartitionEvents:
    """The event queue of one partition (post under the log's lock; deliver after it)."""

    __slots__ = ("_lock", "_queue", "partition", "topic", "topic_id")

    def __init__(self, delivery: EventDelivery, lock: threading.RLock, topic: str,
                 partition: int, topic_id: str) -> None:
        self._queue = EventQueue(delivery)
        self._lock = lock
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id

    def rolled(self, old: LogSegment, new: LogSegment) -> None:
        """``old`` stopped being the active segment; ``new`` is."""
        self._queue.post("tierlog_segment_rolled", SegmentRolled(
            self.topic, self.partition, self.topic_id, old.base_offset, new.base_offset,
            old.size, old.max_timestamp_so_far))

    def deleted(self, doomed: Sequence[LogSegment], reason: str) -> None:
        """``doomed`` left the log for ``reason``."""
        for segment in doomed:
            self._queue.post("tierlog_segment_deleted", SegmentDeleted(
                self.topic, self.partition, self.topic_id, segment.base_offset, segment.size,
                reason))

    def deliver(self) -> None:
        """Hand the queued events to plugins, outside the log's lock: a caller that still
        holds the lock (re-entrantly) leaves them for the outermost release."""
        if self._queue.pending and not self._lock._is_owned():  # type: ignore[attr-defined]
            self._queue.deliver()
