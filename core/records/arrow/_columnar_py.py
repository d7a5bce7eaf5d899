"""The pure-Python twin of the C ``_columnar`` decoder: one batch's records appended to the
column buffers of :mod:`tierlog.records.arrow.codec` (see ``COLUMNS`` there).

It decodes through the records codec's pure-Python twin (``tierlog.records._codec_py``, the
home of the record framing rules in Python), so both twins judge the same bytes the same way;
this one is the fallback when the C extension is missing or ``TIERLOG_PURE_PYTHON=1``.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from tierlog.common.int_bounds import INT32_MAX, INT64_MAX, INT64_MIN
from tierlog.errors import CorruptRecordError
from tierlog.records._codec_py import decode_records

if TYPE_CHECKING:
    from array import array

    from typing_extensions import Buffer

#: Arrow's binary columns hold int32 offsets.
_MAX_DATA_BYTES = INT32_MAX
(KEY_VALID, KEY_OFFS, KEY_DATA, VAL_VALID, VAL_OFFS, VAL_DATA, OFFSET, TIMESTAMP, TS_TYPE,
 HDR_VALID, HDR_OFFS, HK_OFFS, HK_DATA, HV_VALID, HV_OFFS, HV_DATA) = range(16)


def _set_bit(bitmap: bytearray, row: int, valid: bool) -> None:
    byte, mask = row >> 3, 1 << (row & 7)
    if byte >= len(bitmap):
        bitmap.append(0)
    bitmap[byte] = bitmap[byte] | mask if valid else bitmap[byte] & ~mask


def _put_binary(columns: list[bytearray], valid: int | None, offs: int, data: int, row: int,
                value: bytes | None) -> None:
    if value is not None:
        if len(columns[data]) + len(value) > _MAX_DATA_BYTES:
            raise OverflowError("an Arrow column's data passes 2 GiB")
        columns[data] += value
    if valid is not None:
        _set_bit(columns[valid], row, value is not None)
    columns[offs] += struct.pack("=i", len(columns[data]))


def decode_batch(columns: list[bytearray], used: array[int], data: Buffer, position: int, end: int,
                 count: int, base_offset: int, base_timestamp: int, timestamp_type: int,
                 log_append_time: int | None, start_offset: int, end_offset: int,
                 min_timestamp: int, include_headers: bool) -> int:
    """Append the records of ``data[position:end]`` whose offset is in ``[start_offset,
    end_offset)`` and timestamp at or after ``min_timestamp`` to ``columns``; returns how many.
    ``used`` (16 int64s) holds each buffer's used length. CorruptRecordError on bad framing,
    with nothing appended."""
    records = decode_records(data, position, end, count, base_offset, base_timestamp)
    kept = []
    for i, record in enumerate(records):
        if not INT64_MIN <= record.offset <= INT64_MAX:
            raise CorruptRecordError(f"record {i}: offset does not fit int64")
        timestamp = record.timestamp if log_append_time is None else log_append_time
        if not INT64_MIN <= timestamp <= INT64_MAX:  # type: ignore[operator]
            raise CorruptRecordError(f"record {i}: timestamp does not fit int64")
        if start_offset <= record.offset < end_offset and timestamp >= min_timestamp:  # type: ignore[operator]
            kept.append((record, timestamp))
    for column, length in zip(columns, used, strict=True):
        del column[length:]
    row = used[OFFSET] // 8
    for record, timestamp in kept:
        _put_binary(columns, KEY_VALID, KEY_OFFS, KEY_DATA, row, record.key)
        _put_binary(columns, VAL_VALID, VAL_OFFS, VAL_DATA, row, record.value)
        columns[OFFSET] += struct.pack("=q", record.offset)
        columns[TIMESTAMP] += struct.pack("=q", timestamp)
        columns[TS_TYPE] += struct.pack("=i", timestamp_type)
        if include_headers:
            for key, value in record.headers:
                _put_binary(columns, None, HK_OFFS, HK_DATA, 0, key.encode())
                entry = len(columns[HV_OFFS]) // 4 - 1
                _put_binary(columns, HV_VALID, HV_OFFS, HV_DATA, entry, value)
            _set_bit(columns[HDR_VALID], row, bool(record.headers))
            columns[HDR_OFFS] += struct.pack("=i", len(columns[HK_OFFS]) // 4 - 1)
        row += 1
    for c, column in enumerate(columns):
        used[c] = len(column)
    return len(kept)
