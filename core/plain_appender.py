"""PlainAppender: the active segment's producer hot path, one call per plain batch.

While a segment is *armed* (:meth:`tierlog.segment.LogSegment.arm_plain_appends`), nothing but
its appender changes it: the appender writes each plain producer batch
(:mod:`tierlog.records.plain_batch`) and feeds the sparse offset and time indexes exactly as
:meth:`LogSegment.append` would. Any other change to the segment disarms it first, and a
disarmed appender writes nothing (``append`` returns None, sending the Log down its general
path, which arms a new one).

The C accelerator (``tierlog._plain_appender.PlainAppender``) does the whole append in one call:
it keeps a copy of the segment's tail state, writes index entries straight into the indexes'
memory maps, and writes every change through to the Python objects at once, so that readers
see exactly what :class:`PlainAppenderPy` (which calls the objects' own methods) leaves. The
attributes it keeps current are ``FileRecords._size``, ``OffsetIndex._entries`` and
``_last_offset``, ``TimeIndex._entries`` and ``_last_entry``, and the segment's
``_bytes_since_last_index_entry`` and ``_max_timestamp_and_offset``. The tests prove both twins
leave identical files and attributes. Not thread-safe: the Log's lock serialises appends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from tierlog.index import TimestampOffset
from tierlog.index.base import INT32_MAX
from tierlog.records._accelerator import accelerated
from tierlog.records.plain_batch import PlainBatchRules

if TYPE_CHECKING:
    from tierlog.segment import LogSegment

__all__ = ["PlainAppender", "PlainAppenderPy", "PlainAppenderType"]

#: What ``append`` returns: ``(size, last_offset, max_timestamp, record_count, leader_epoch)``.
Written = tuple[int, int, int, int, int]


class PlainAppenderType(Protocol):
    """What both twins offer."""

    @property
    def armed(self) -> bool:
        """False once disarmed, by the segment or by filling the indexes' room."""

    def append(self, data: bytes | bytearray | memoryview, base_offset: int,
               leader_epoch: int | None) -> Written | None:
        """Write one plain batch with offsets from ``base_offset`` and feed the indexes; None
        (nothing written) when disarmed or the batch is not plain, intact and within the rules.
        A failed write raises OSError with the file cut back to where it was."""

    def disarm(self) -> None:
        """Write nothing more (idempotent); the C twin lets go of the index mappings."""


class PlainAppenderPy:
    """The pure-Python twin: the reference for what one plain append does to a segment.

    ``rules`` are the limits that stand in for the roll rule (see ``arm_plain_appends``);
    ``index_room`` is how many index entries both indexes can still take: after the last of
    them, the appender disarms itself so that the next append asks the roll rule again.
    """

    __slots__ = ("_room", "_rules", "_segment", "armed")

    def __init__(self, segment: LogSegment, rules: PlainBatchRules, index_room: int) -> None:
        if index_room <= 0:
            raise ValueError(f"index room {index_room} leaves no append to arm for")
        segment.log.fileno()  # raises LogClosedError when the file is closed
        # Index entries hold positions and relative offsets as int32: the rules must keep them so.
        if rules[0] > INT32_MAX or rules[1] - segment.base_offset > INT32_MAX:
            raise ValueError("rules allow positions or offsets past the 4-byte index fields of "
                             f"the segment at base offset {segment.base_offset}")
        self._segment = segment
        self._rules = rules
        self._room = index_room
        self.armed = True

    def append(self, data: bytes | bytearray | memoryview, base_offset: int,
               leader_epoch: int | None) -> Written | None:
        if not self.armed:
            return None
        segment = self._segment
        log_file = segment.log
        position = log_file.size_in_bytes()
        written = log_file.append_plain_batch(data, base_offset, leader_epoch, self._rules)
        if written is None:
            return None
        size, last_offset, max_timestamp, _, _ = written
        max_ts = segment._max_timestamp_and_offset
        assert max_ts is not None  # loaded by arm_plain_appends
        if max_timestamp > max_ts.timestamp:
            max_ts = segment._max_timestamp_and_offset = TimestampOffset(max_timestamp,
                                                                         last_offset)
        since = segment._bytes_since_last_index_entry
        if since > segment.index_interval_bytes:
            segment.offset_index.append(last_offset, position)
            # Adds the max timestamp when it is above the time index's last entry.
            segment.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
            self._room -= 1
            if not self._room:  # an index may be full: the roll rule decides next
                self.armed = False
            since = 0
        segment._bytes_since_last_index_entry = since + size
        return written

    def disarm(self) -> None:
        self.armed = False


_found = accelerated("tierlog._plain_appender", "PlainAppender")
#: The C type when it is built (and TIERLOG_PURE_PYTHON is not 1), else the Python twin.
PlainAppender: Callable[[LogSegment, PlainBatchRules, int], PlainAppenderType] = (
    _found[0] if _found else PlainAppenderPy)
