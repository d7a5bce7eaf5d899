"""The read side of a :class:`~tierlog.log.log.Log`: fetch, ListOffsets and plugin-index lookups.

A read works on a :class:`LogView`, a frozen copy of the log's segment list and offsets that
the Log takes under its lock (``Log.view``), and then reads without the lock: from the local
segments, or from the remote tier below the local log start offset when the log is tiered.
It changes nothing and holds nothing: these are functions of the view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tierlog.errors import OffsetOutOfRangeError, PluginError
from tierlog.index.index_types import SegmentIndexType
from tierlog.log.fetch_info import FetchDataInfo
from tierlog.log.local_log import LocalLog
from tierlog.log.segment import LogSegment
from tierlog.log.tier_reads import TierReads
from tierlog.records.file_records import TimestampAndOffset

#: Kafka's special timestamps for offset lookups (ListOffsets).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "LogView",
           "fetch_offset_by_timestamp", "lookup_index", "read"]


@dataclass(frozen=True, slots=True)
class LogView:
    """One consistent view of a log, taken under its lock: what every read works on."""

    #: The partition directory's name, ``<topic>-<partition>`` (for messages).
    name: str
    #: The local segments (from the one holding the read's offset when the view was taken
    #: for a fetch).
    segments: Sequence[LogSegment]
    log_start_offset: int
    local_log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    #: The remote tier's reader of a tiered log once attached, else None.
    remote: TierReads | None

    def upper(self, isolation: str) -> int:
        """The exclusive end of what ``isolation`` may read."""
        if isolation == "log_end":
            return self.log_end_offset
        if isolation == "read_uncommitted":
            return self.high_watermark
        return self.last_stable_offset


def read(view: LogView, offset: int, max_bytes: int, *, isolation: str,
         max_offset: int | None, min_one_message: bool) -> FetchDataInfo:
    """Read batches from ``offset``: at most ``max_bytes`` (but at least one whole batch
    when ``min_one_message``), capped by the isolation level: ``log_end`` (everything
    appended), ``read_uncommitted`` (the high watermark) or ``read_committed`` (the last
    stable offset, with the aborted transactions of the range). Offsets below the local
    log start offset are read from the remote tier when the log is tiered."""
    upper = view.upper(isolation)
    if max_offset is not None:
        upper = min(upper, max_offset)
    start, leo = view.log_start_offset, view.log_end_offset
    if offset < start or offset > leo:
        raise OffsetOutOfRangeError(
            f"{view.name}: offset {offset} is out of range "
            f"[{start}, {leo}] (log start offset, log end offset)"
        )
    if offset >= upper:
        return FetchDataInfo.empty(offset, upper, isolation)
    if view.remote is not None and offset < view.local_log_start_offset:
        # The local segments go along: markers of remote transactions may be in them.
        return view.remote.read(offset, max_bytes, isolation, upper, min_one_message,
                                view.segments)
    return LocalLog.read(view.segments, leo, offset, max_bytes, isolation, upper,
                         min_one_message)


def fetch_offset_by_timestamp(view: LogView, timestamp: int) -> TimestampAndOffset | None:
    """Kafka's ListOffsets for one partition, including -2 (earliest), -1 (latest) and
    -3 (the record with the max timestamp)."""
    start = view.log_start_offset
    if timestamp == EARLIEST_TIMESTAMP:
        return TimestampAndOffset(-1, start)
    if timestamp == LATEST_TIMESTAMP:
        return TimestampAndOffset(-1, view.log_end_offset)
    if timestamp == MAX_TIMESTAMP:
        return LocalLog.max_timestamp(view.segments)
    if view.remote is not None:
        found = view.remote.fetch_offset_by_timestamp(timestamp, start)
        if found is not None:
            return found
    return LocalLog.find_offset_by_timestamp(view.segments, timestamp, start)


def lookup_index(view: LogView, extras: Sequence[SegmentIndexType], name: str,
                 key: Any) -> Any:  # noqa: ANN401 - a plugin index's key and answer are its own types
    """Ask the plugin index type ``name`` (one of ``extras``, the log's plugin index types)
    of each segment, newest first, for ``key``; the first answer that is not None wins (None
    if no segment knows the key). On a tiered log, an index type that is
    ``uploaded_to_remote`` is then asked through the tier's copies of the segments no longer
    held locally."""
    index_type = next((t for t in extras if t.name == name), None)
    if index_type is None:
        raise PluginError(
            f"{view.name} has no {name!r} index (index types of this log: "
            f"{', '.join(t.name for t in extras) or 'none from plugins'})"
        )
    for segment in reversed(view.segments):
        found = segment.extra_indexes[name].lookup(key)
        if found is not None:
            return found
    if view.remote is not None and index_type.uploaded_to_remote:
        return view.remote.lookup_index(index_type, key, view.local_log_start_offset)
    return None
