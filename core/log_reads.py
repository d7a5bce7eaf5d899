"""The read side of a Log: fetches with isolation caps, offsets by timestamp, plugin index
lookups; below the local log start offset, reads go to the remote tier when one is attached.
"""

from __future__ import annotations

from typing import Any

from tierlog.errors import OffsetOutOfRangeError, PluginError
from tierlog.fetch import FetchDataInfo, check_isolation
from tierlog.index.aborted_txns import collect_aborted_txns
from tierlog.records.file_records import TimestampAndOffset
from tierlog.segment import LogSegment

#: Kafka's special timestamps for offset lookups (ListOffsets).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3


class LogReads:
    """Mixin of :class:`tierlog.log.Log`: everything that reads. Reads take the log's lock only
    to snapshot the segments and offsets, then read without it."""

    remote: Any

    # -- reading ---------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int = 1 << 20,
        *,
        isolation: str = "log_end",
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Read batches from ``offset``: at most ``max_bytes`` (but at least one whole batch
        when ``min_one_message``), capped by the isolation level: ``log_end`` (everything
        appended), ``read_uncommitted`` (the high watermark) or ``read_committed`` (the last
        stable offset, with the aborted transactions of the range). Offsets below the local
        log start offset are read from the remote tier when the log is tiered."""
        check_isolation(isolation)
        with self._lock:
            self._check_open()
            start, leo = self._log_start_offset, self._next_offset
            if isolation == "log_end":
                upper = leo
            elif isolation == "read_uncommitted":
                upper = self._high_watermark
            else:
                upper = self.last_stable_offset
            if max_offset is not None:
                upper = min(upper, max_offset)
            segments = self.segments.values(offset)
            local_start = self.local_log_start_offset
        if offset < start or offset > leo:
            raise OffsetOutOfRangeError(
                f"{self.directory.name}: offset {offset} is out of range "
                f"[{start}, {leo}] (log start offset, log end offset)"
            )
        if offset >= upper:
            return FetchDataInfo.empty(offset, upper, isolation)
        if self.remote is not None and offset < local_start:
            # The local segments go along: markers of remote transactions may be in them.
            return self.remote.read(offset, max_bytes, isolation, upper, min_one_message,
                                    segments)
        for i, segment in enumerate(segments):
            if segment.base_offset >= upper:
                break
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else leo
            max_position = None
            if upper < next_base:
                max_position = self._position_of_upper_bound(segment, upper)
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

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The earliest offset whose record timestamp is >= ``timestamp`` (None if none)."""
        found = self.fetch_offset_by_timestamp(timestamp)
        return None if found is None else found.offset

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for one partition, including -2 (earliest), -1 (latest) and
        -3 (the record with the max timestamp)."""
        with self._lock:
            self._check_open()
            segments = self.segments.values()
            start = self._log_start_offset
            leo = self._next_offset
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, start)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, leo)
        if timestamp == MAX_TIMESTAMP:
            best = max(segments, key=lambda s: s.max_timestamp_so_far)
            if best.max_timestamp_so_far < 0:
                return None
            return TimestampAndOffset(best.max_timestamp_so_far, best.offset_of_max_timestamp_so_far)
        if self.remote is not None:
            found = self.remote.fetch_offset_by_timestamp(timestamp, start)
            if found is not None:
                return found
        for segment in segments:
            if segment.max_timestamp_so_far < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, start)
            if found is not None:
                return found
        return None

    def lookup_index(self, name: str, key: Any) -> Any:
        """Ask the plugin index type ``name`` of each segment, newest first, for ``key``;
        the first answer that is not None wins (None if no segment knows the key)."""
        with self._lock:
            self._check_open()
            segments = self.segments.values()
        if segments and name not in segments[-1].extra_indexes:
            raise PluginError(
                f"{self.directory.name} has no {name!r} index (index types of this log: "
                f"{', '.join(sorted(segments[-1].extra_indexes)) or 'none from plugins'})"
            )
        for segment in reversed(segments):
            found = segment.extra_indexes[name].lookup(key)
            if found is not None:
                return found
        return None

    def lookup_key(self, key: bytes) -> int | None:
        """The latest offset of ``key`` (through a plugin's ``key`` index, e.g. the
        tierlog-key-index plugin on compacted topics), or None; never below the log start."""
        found = self.lookup_index("key", key)
        return found if found is not None and found >= self._log_start_offset else None
