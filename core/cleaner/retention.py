"""The ``delete`` cleanup policy: Kafka's retention by time, by size and by log start offset.

Segments go oldest first and only while the rule holds; a segment that is not wholly below the
high watermark is kept, and if every segment goes the log first rolls, so one always remains.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from tierlog.contracts.cleanup_policy import CleanupResult

if TYPE_CHECKING:
    from tierlog.log.log import Log
    from tierlog.log.segment import LogSegment

log = logging.getLogger(__name__)

#: (segment, next segment or None) -> may this segment go?
Predicate = Callable[["LogSegment", "LogSegment | None"], bool]


class DeletePolicy:
    """``cleanup.policy=delete``: ``retention.ms``, ``retention.bytes`` and segments wholly below
    the log start offset. With tiered storage the local limits are ``local.retention.*`` and a
    segment may only go once the remote tier holds it (the log's ``highest_offset_in_remote``)."""

    name = "delete"

    def clean(self, log: Log, now_ms: int) -> CleanupResult:
        result = CleanupResult(self.name)
        self._delete(log, result, "log start offset breached", self._below_log_start(log))
        retention_bytes, retention_ms = _local_limits(log)
        if retention_bytes >= 0:
            self._delete(log, result, "retention.bytes breached", self._size_breached(log, retention_bytes))
        if retention_ms >= 0:
            self._delete(log, result, "retention.ms breached",
                         lambda seg, nxt: now_ms - seg.largest_timestamp > retention_ms)
        return result

    @staticmethod
    def _below_log_start(log: Log) -> Predicate:
        start = log.log_start_offset
        return lambda seg, nxt: nxt is not None and nxt.base_offset <= start

    @staticmethod
    def _size_breached(log: Log, retention_bytes: int) -> Predicate:
        excess = [log.size_in_bytes - retention_bytes]

        def predicate(seg: LogSegment, nxt: LogSegment | None) -> bool:
            if excess[0] - seg.size >= 0:
                excess[0] -= seg.size
                return True
            return False

        return predicate

    @staticmethod
    def _delete(log: Log, result: CleanupResult, reason: str, predicate: Predicate) -> None:
        deleted = log.delete_old_segments(predicate, reason)
        if deleted:
            result.segments_deleted += len(deleted)
            result.bytes_deleted += sum(size for _, size in deleted)
            result.reasons.append(f"{reason}: {len(deleted)} segments")


def _local_limits(log: Log) -> tuple[int, int]:
    """(bytes, ms) limits for local segments: ``local.retention.*`` when tiered (-2 = the
    ``retention.*`` value), else ``retention.*``."""
    config = log.config
    retention_bytes, retention_ms = config["retention.bytes"], config["retention.ms"]
    if config["remote.storage.enable"]:
        local_bytes, local_ms = config["local.retention.bytes"], config["local.retention.ms"]
        retention_bytes = retention_bytes if local_bytes == -2 else local_bytes
        retention_ms = retention_ms if local_ms == -2 else local_ms
    return retention_bytes, retention_ms
