"""The read side of a :class:`~tierlog.log.log.Log`: fetch, ListOffsets and plugin-index lookups.

Each read takes one consistent view of the log's segments and offsets under its lock and then
reads without it: from the local segments, or from the remote tier below the local log start
offset when the log is tiered. It changes nothing, so it owns no state of its own: it reads
the Log it serves (the composition root, which delegates its read methods here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tierlog.errors import OffsetOutOfRangeError, PluginError
from tierlog.log.fetch_info import FetchDataInfo, check_isolation
from tierlog.log.local_log import LocalLog
from tierlog.records.file_records import TimestampAndOffset

if TYPE_CHECKING:
    from tierlog.log.log import Log

#: Kafka's special timestamps for offset lookups (ListOffsets).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "LogReads"]


class LogReads:
    """Reads of one Log (thread-safe as the Log is: the view is taken under its lock)."""

    __slots__ = ("_log",)

    def __init__(self, log: Log) -> None:
        self._log = log

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
        log = self._log
        check_isolation(isolation)
        with log.lock:
            log._check_open()
            start, leo = log.log_start_offset, log.local.next_offset
            if isolation == "log_end":
                upper = leo
            elif isolation == "read_uncommitted":
                upper = log.high_watermark
            else:
                upper = log.last_stable_offset
            if max_offset is not None:
                upper = min(upper, max_offset)
            segments = log.local.segments.values(offset)
            local_start = log.local_log_start_offset
        if offset < start or offset > leo:
            raise OffsetOutOfRangeError(
                f"{log.directory.name}: offset {offset} is out of range "
                f"[{start}, {leo}] (log start offset, log end offset)"
            )
        if offset >= upper:
            return FetchDataInfo.empty(offset, upper, isolation)
        if log.remote is not None and offset < local_start:
            # The local segments go along: markers of remote transactions may be in them.
            return log.remote.read(offset, max_bytes, isolation, upper, min_one_message,
                                    segments)
        return LocalLog.read(segments, leo, offset, max_bytes, isolation, upper,
                             min_one_message)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The earliest offset whose record timestamp is >= ``timestamp`` (None if none)."""
        found = self.fetch_offset_by_timestamp(timestamp)
        return None if found is None else found.offset

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for one partition, including -2 (earliest), -1 (latest) and
        -3 (the record with the max timestamp)."""
        log = self._log
        with log.lock:
            log._check_open()
            segments = log.local.segments.values()
            start = log.log_start_offset
            leo = log.local.next_offset
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(-1, start)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, leo)
        if timestamp == MAX_TIMESTAMP:
            return LocalLog.max_timestamp(segments)
        if log.remote is not None:
            found = log.remote.fetch_offset_by_timestamp(timestamp, start)
            if found is not None:
                return found
        return LocalLog.find_offset_by_timestamp(segments, timestamp, start)

    def lookup_index(self, name: str, key: Any) -> Any:
        """Ask the plugin index type ``name`` of each segment, newest first, for ``key``;
        the first answer that is not None wins (None if no segment knows the key). On a
        tiered log, an index type that is ``uploaded_to_remote`` is then asked through the
        tier's copies of the segments no longer held locally."""
        log = self._log
        with log.lock:
            log._check_open()
            segments = log.local.segments.values()
            remote, local_start = log.remote, log.local_log_start_offset
        index_type = next((t for t in log._index_types.extras if t.name == name), None)
        if index_type is None:
            raise PluginError(
                f"{log.directory.name} has no {name!r} index (index types of this log: "
                f"{', '.join(t.name for t in log._index_types.extras) or 'none from plugins'})"
            )
        for segment in reversed(segments):
            found = segment.extra_indexes[name].lookup(key)
            if found is not None:
                return found
        if remote is not None and index_type.uploaded_to_remote:
            return remote.lookup_index(index_type, key, local_start)
        return None

    def lookup_key(self, key: bytes) -> int | None:
        """The latest offset of ``key`` (through a plugin's ``key`` index, e.g. the
        tierlog-key-index plugin on compacted topics), or None; never below the log start."""
        log = self._log
        found = self.lookup_index("key", key)
        return found if found is not None and found >= log.log_start_offset else None
