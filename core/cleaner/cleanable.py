"""LogToClean: a log's cleanable range and dirty ratio, and grouping segments for cleaning.

Kafka's ``LogToClean``, ``LogCleanerManager.cleanableOffsets`` and ``Cleaner.groupSegmentsBySize``.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tierlog.common.int_bounds import INT32_MAX

if TYPE_CHECKING:
    from tierlog.log.log import Log
    from tierlog.log.segment import LogSegment

log = logging.getLogger(__name__)

#: A segment without a first-batch timestamp never forces compaction by age.
_NO_TIMESTAMP = float("inf")


@dataclass(frozen=True, slots=True)
class LogToClean:
    """What a log offers the cleaner right now: the dirty range and its share of the log.

    ``first_dirty_offset`` is the cleaner checkpoint (reset to the log start offset when it is
    outside the log); ``first_uncleanable_offset`` is the base offset of the segment holding
    the first offset that may not be cleaned: the last stable offset, the active segment's
    base, or the first segment younger than ``min.compaction.lag.ms``. Clean bytes are those
    of the segments below the first dirty offset; cleanable bytes those from there to the
    first uncleanable offset. ``segments`` is the log's segment list when this was computed.
    """

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    #: The earliest dirty data is older than ``max.compaction.lag.ms``.
    need_compaction_now: bool
    #: The checkpoint was outside the log and must be rewritten.
    force_update_checkpoint: bool
    segments: tuple[LogSegment, ...]

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        """Dirty bytes over all bytes up to the first uncleanable offset (0 for an empty log)."""
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    def should_clean(self, min_cleanable_ratio: float) -> bool:
        """Kafka's choice: the dirty ratio exceeds ``min.cleanable.dirty.ratio``, or dirty data
        is overdue by ``max.compaction.lag.ms``."""
        if self.total_bytes <= 0:
            return False
        return ((self.need_compaction_now and self.cleanable_bytes > 0)
                or self.cleanable_ratio > min_cleanable_ratio)

    @classmethod
    def of(cls, target: Log, checkpoint: int | None, now_ms: int) -> LogToClean:
        """Compute the cleanable range of ``target`` from its cleaner checkpoint (None: none).

        Takes the log's lock only to copy its segment list and offsets.
        """
        with target.lock:
            segments = tuple(target.segments.values())
            log_start = target.log_start_offset
            log_end = target.log_end_offset
            last_stable = target.last_stable_offset
        config = target.config
        view = _Segments(segments)
        dirty = log_start if checkpoint is None else checkpoint
        force_update = not log_start <= dirty <= log_end
        if force_update:
            log.warning("%s: resetting the first dirty offset to the log start offset %d: "
                        "the checkpointed offset %d is outside the log [%d, %d]",
                        target.directory.name, log_start, dirty, log_start, log_end)
            dirty = log_start
        active = segments[-1]
        uncleanable = min(last_stable, active.base_offset)
        min_lag = max(config["min.compaction.lag.ms"], 0)
        if min_lag > 0:
            for segment in view.non_active_from(dirty):
                if segment.largest_timestamp > now_ms - min_lag:
                    uncleanable = min(uncleanable, segment.base_offset)
                    break
        uncleanable = max(dirty, uncleanable)
        later = view.non_active_from(uncleanable)
        first_uncleanable = later[0].base_offset if later else active.base_offset
        return cls(
            first_dirty_offset=dirty,
            first_uncleanable_offset=first_uncleanable,
            clean_bytes=sum(s.size for s in view.between(-1, dirty)),
            cleanable_bytes=sum(s.size for s in view.between(min(dirty, first_uncleanable),
                                                             first_uncleanable)),
            need_compaction_now=_compaction_delay(view, dirty, now_ms,
                                                  config["max.compaction.lag.ms"]) > 0,
            force_update_checkpoint=force_update,
            segments=segments,
        )


class _Segments:
    """Kafka's ``LogSegments`` range queries over a copied list of segments."""

    def __init__(self, segments: Sequence[LogSegment]) -> None:
        self.segments = segments
        self.bases = [s.base_offset for s in segments]

    def between(self, start: int, stop: int) -> Sequence[LogSegment]:
        """Segments holding offsets in ``[start, stop)``: from the floor of ``start`` to the
        last one whose base is below ``stop``."""
        if start >= stop:
            return ()
        lo = max(bisect_right(self.bases, start) - 1, 0)
        hi = bisect_right(self.bases, stop - 1)
        return self.segments[lo:hi]

    def non_active_from(self, start: int) -> Sequence[LogSegment]:
        return self.between(start, self.bases[-1])


def _compaction_delay(view: _Segments, first_dirty: int, now_ms: int, max_lag_ms: int) -> int:
    """How long past ``max.compaction.lag.ms`` the earliest dirty first batch is (0: not)."""
    earliest = min((_first_batch_timestamp(s) for s in view.non_active_from(first_dirty)),
                   default=_NO_TIMESTAMP)
    clean_until = now_ms - max(max_lag_ms, 0)
    return int(clean_until - earliest) if earliest < clean_until else 0


def _first_batch_timestamp(segment: LogSegment) -> float:
    header = segment.log.read_header(0)
    if header is None or header.max_timestamp <= 0:
        return _NO_TIMESTAMP
    return header.max_timestamp


def group_segments_by_size(
    segments: Sequence[LogSegment], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[LogSegment]]:
    """Split consecutive segments into groups, each cleaned into one segment: a group's log
    bytes stay within ``segment.bytes``, its offset and time index bytes each within
    ``segment.index.bytes``, and its offsets within 2^31 of its base (relative offsets are
    4 bytes). An empty segment never breaks a group on offsets (Kafka's rule)."""
    groups: list[list[LogSegment]] = []
    i, n = 0, len(segments)
    while i < n:
        group = [segments[i]]
        log_size = segments[i].size
        index_size = segments[i].offset_index.size_in_bytes
        time_index_size = segments[i].time_index.size_in_bytes
        i += 1
        while i < n:
            nxt = segments[i]
            # The next segment's last offset, bounded by what follows it (Kafka estimates it
            # this way rather than scanning the segment).
            last_offset = segments[i + 1].base_offset - 1 if i + 1 < n else first_uncleanable - 1
            if not (log_size + nxt.size <= max_size
                    and index_size + nxt.offset_index.size_in_bytes <= max_index_size
                    and time_index_size + nxt.time_index.size_in_bytes <= max_index_size
                    and (nxt.size == 0 or last_offset - group[0].base_offset <= INT32_MAX)):
                break
            group.append(nxt)
            log_size += nxt.size
            index_size += nxt.offset_index.size_in_bytes
            time_index_size += nxt.time_index.size_in_bytes
            i += 1
        groups.append(group)
    return groups
