"""PlainAppender: the active segment's producer hot path, one call per plain batch.

While a segment is *armed* (:meth:`tierlog.log.segment.LogSegment.arm_plain_appends`), nothing but
its appender changes it: the appender writes each plain producer batch
(:mod:`tierlog.records.plain_batch_write`) and feeds the sparse offset and time indexes where
:class:`tierlog.index.sparse.SparseIndexRule` places entries, as :meth:`LogSegment.append`
does. Any other change to the segment disarms it first, and a disarmed appender writes nothing
(``append`` returns None, sending the Log down its general path, which arms a new one).
An append also does what it means to the log around the segment, so that the producer's hot
path is one call: the batch's offsets start at the log end (:class:`PlainAppendEnd`, the
LocalLog that armed it), which the append moves past the batch, and the batch is counted in
the log's counters (:class:`PlainAppendCounts`, its LogStats).

The C accelerator (``tierlog.log._segment_appender.PlainAppender``) does the whole append in one
call: it keeps a copy of the segment's tail state, writes index entries straight into the indexes'
memory maps, and sets every attribute an append changes at once, so that readers see exactly
what :class:`PlainAppenderPy` (which calls the objects' own methods) leaves. What both twins
may read and write is one explicit contract: the protocols below (:class:`PlainAppendTarget`,
the segment; :class:`PlainAppendFile`, :class:`PlainAppendOffsetIndex`,
:class:`PlainAppendTimeIndex`, its parts; :class:`PlainAppendEnd` and
:class:`PlainAppendCounts`), whose settable attributes are public and listed in
:data:`APPEND_WRITES`; no twin touches a private attribute. The tests prove both twins leave
identical files and attributes and change nothing else. Not thread-safe: the Log's lock
serialises appends.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Mapping
from typing import Protocol

from tierlog.common.int_bounds import INT32_MAX
from tierlog.index import TimestampOffset
from tierlog.index.sparse import OFFSET_AND_TIME_ENTRY, SparseIndexRule
from tierlog.records._accelerator import accelerated
from tierlog.records.plain_batch_write import PlainBatchRules

__all__ = ["APPEND_WRITES", "PlainAppendCounts", "PlainAppendEnd", "PlainAppendFile",
           "PlainAppendOffsetIndex", "PlainAppendTarget", "PlainAppendTimeIndex", "PlainAppender",
           "PlainAppenderPy", "PlainAppenderType", "Written"]

#: What ``append`` returns: ``(size, last_offset, max_timestamp, record_count, leader_epoch)``.
Written = tuple[int, int, int, int, int]


class PlainAppendFile(Protocol):
    """The segment's ``.log`` as an append sees it (:class:`tierlog.records.FileRecords`)."""

    #: Valid bytes, where the next batch goes; an append sets it past the batch it wrote.
    size: int

    def fileno(self) -> int:
        """The open descriptor; LogClosedError once closed (arming fails then)."""

    def append_plain_batch(self, data: bytes | bytearray | memoryview, base_offset: int,
                           leader_epoch: int | None, rules: PlainBatchRules) -> Written | None:
        """Write one plain batch at ``size`` and advance ``size`` (the Python twin's write)."""


class PlainAppendOffsetIndex(Protocol):
    """The offset index as an append sees it (:class:`tierlog.index.OffsetIndex`)."""

    #: Entries in the file, and the offset of the last one: an index entry sets both.
    entries: int
    last_offset: int

    @property
    def mapping(self) -> mmap.mmap:
        """The file's map, which the C twin writes entries into (its buffer held while armed)."""

    def append(self, offset: int, position: int) -> None:
        """Add ``offset -> position`` (the Python twin's entry)."""


class PlainAppendTimeIndex(Protocol):
    """The time index as an append sees it (:class:`tierlog.index.TimeIndex`)."""

    #: Entries in the file, and the last one: an index entry with a new max timestamp sets both.
    entries: int
    last_entry: TimestampOffset

    @property
    def mapping(self) -> mmap.mmap:
        """The file's map, which the C twin writes entries into (its buffer held while armed)."""

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add ``(timestamp, offset)`` when the timestamp is above the last entry's."""


class PlainAppendTarget(Protocol):
    """The segment an appender is armed on (:class:`tierlog.log.segment.LogSegment`): the one
    contract of what a plain append reads and writes. Its parts and limits are read-only to
    the appender; the settable attributes are its tail state."""

    @property
    def log(self) -> PlainAppendFile: ...

    @property
    def offset_index(self) -> PlainAppendOffsetIndex: ...

    @property
    def time_index(self) -> PlainAppendTimeIndex: ...

    @property
    def base_offset(self) -> int: ...

    @property
    def index_interval_bytes(self) -> int: ...

    #: Bytes since the last offset-index entry: reset by an index entry, grown by every batch.
    bytes_since_last_index_entry: int
    #: The max timestamp so far and its offset (loaded before arming, so never None then).
    max_timestamp_and_offset: TimestampOffset | None


class PlainAppendEnd(Protocol):
    """The log whose active segment is armed (:class:`tierlog.log.local_log.LocalLog`), as its
    appender sees it: the appender is the LocalLog's hot path, and moves its end as
    :meth:`LocalLog.append <tierlog.log.local_log.LocalLog.append>` does."""

    #: The log end offset: the batch's offsets start here; an append sets it past the batch.
    next_offset: int


class PlainAppendCounts(Protocol):
    """The log's append counters (:class:`tierlog.common.stats.LogStats`)."""

    #: Bytes and records appended: an append adds its batch's size and record count.
    append_bytes: int
    append_messages: int


#: Every attribute an append may set, by the object that holds it: the segment ("") and its
#: parts, the log's end and its counters. The contract both twins keep, and nothing else
#: (tests/log/test_segment_appender.py).
APPEND_WRITES: Mapping[str, tuple[str, ...]] = {
    "": ("bytes_since_last_index_entry", "max_timestamp_and_offset"),
    "log": ("size",),
    "offset_index": ("entries", "last_offset"),
    "time_index": ("entries", "last_entry"),
    "end": ("next_offset",),
    "counts": ("append_bytes", "append_messages"),
}


class PlainAppenderType(Protocol):
    """What both twins offer."""

    @property
    def armed(self) -> bool:
        """False once disarmed, by the segment or by filling the indexes' room."""

    def append(self, data: bytes | bytearray | memoryview,
               leader_epoch: int | None) -> Written | None:
        """Write one plain batch with offsets from the log end (``end.next_offset``), feed the
        indexes, move the end past the batch and count it; None (nothing written, nothing
        changed) when disarmed or the batch is not plain, intact and within the rules. A failed
        write raises OSError with the file cut back to where it was."""

    def disarm(self) -> None:
        """Write nothing more (idempotent); the C twin lets go of the index mappings."""


class PlainAppenderPy:
    """The pure-Python twin: the reference for what one plain append does to a segment.

    ``rules`` are the limits that stand in for the roll rule (see ``arm_plain_appends``);
    ``index_room`` is how many index entries both indexes can still take: after the last of
    them, the appender disarms itself so that the next append asks the roll rule again.
    ``end`` is the log whose end an append starts at and moves, ``counts`` its counters.
    """

    __slots__ = ("_counts", "_end", "_index_rule", "_room", "_rules", "_segment", "armed")

    def __init__(self, segment: PlainAppendTarget, rules: PlainBatchRules, index_room: int,
                 end: PlainAppendEnd, counts: PlainAppendCounts) -> None:
        if index_room <= 0:
            raise ValueError(f"index room {index_room} leaves no append to arm for")
        # Read on every append: a wrong object fails here instead (AttributeError).
        _ = end.next_offset, counts.append_bytes, counts.append_messages
        segment.log.fileno()  # raises LogClosedError when the file is closed
        # Index entries hold positions and relative offsets as int32: the rules must keep them so.
        if rules[0] > INT32_MAX or rules[1] - segment.base_offset > INT32_MAX:
            raise ValueError("rules allow positions or offsets past the 4-byte index fields of "
                             f"the segment at base offset {segment.base_offset}")
        self._segment = segment
        self._end = end
        self._counts = counts
        self._rules = rules
        # Nothing else changes the segment's tail while armed: the rule's copy stays true.
        self._index_rule = SparseIndexRule(segment.index_interval_bytes,
                                           segment.bytes_since_last_index_entry,
                                           segment.time_index.last_entry.timestamp)
        self._room = index_room
        self.armed = True

    def append(self, data: bytes | bytearray | memoryview,
               leader_epoch: int | None) -> Written | None:
        if not self.armed:
            return None
        segment, end = self._segment, self._end
        log_file = segment.log
        position = log_file.size
        written = log_file.append_plain_batch(data, end.next_offset, leader_epoch, self._rules)
        if written is None:
            return None
        size, last_offset, max_timestamp, record_count, _ = written
        max_ts = segment.max_timestamp_and_offset
        assert max_ts is not None  # loaded by arm_plain_appends
        if max_timestamp > max_ts.timestamp:
            max_ts = segment.max_timestamp_and_offset = TimestampOffset(max_timestamp,
                                                                        last_offset)
        rule = self._index_rule
        due = rule.add(size, max_ts.timestamp)
        if due:
            segment.offset_index.append(last_offset, position)
            if due == OFFSET_AND_TIME_ENTRY:
                segment.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
            self._room -= 1
            if not self._room:  # an index may be full: the roll rule decides next
                self.armed = False
        segment.bytes_since_last_index_entry = rule.since
        end.next_offset = last_offset + 1
        counts = self._counts
        counts.append_bytes += size
        counts.append_messages += record_count
        return written

    def disarm(self) -> None:
        self.armed = False


_found = accelerated("tierlog.log._segment_appender", "PlainAppender")
#: The C type when it is built (and TIERLOG_PURE_PYTHON is not 1), else the Python twin.
PlainAppender: Callable[
    [PlainAppendTarget, PlainBatchRules, int, PlainAppendEnd, PlainAppendCounts],
    PlainAppenderType] = _found[0] if _found else PlainAppenderPy
