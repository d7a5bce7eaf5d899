"""The column builder that decodes record batches of one topic-partition straight into
``pyarrow.RecordBatch`` objects of Spark's Kafka source schema (``tierlog.records.arrow.schema``).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

import pyarrow as pa

from tierlog.records.arrow.codec import ACCELERATED, COLUMNS, OFFSET_COLUMNS, decode_batch
from tierlog.records.arrow.schema import HEADER_TYPE, HEADERS_TYPE, TIMESTAMP_TYPE, schema

if TYPE_CHECKING:
    from typing_extensions import Buffer

_MS_TYPE = pa.timestamp("ms", tz="UTC")

#: A built RecordBatch's binary data stays below this (Arrow's binary offsets are int32); one
#: Kafka batch (at most 64 MiB decompressed) always fits after it.
MAX_DATA_BYTES = 1 << 30

(KEY_VALID, KEY_OFFS, KEY_DATA, VAL_VALID, VAL_OFFS, VAL_DATA, OFFSET, TIMESTAMP, TS_TYPE,
 HDR_VALID, HDR_OFFS, HK_OFFS, HK_DATA, HV_VALID, HV_OFFS, HV_DATA) = range(len(COLUMNS))


class ColumnBuilder:
    """Decodes the records of batches of one topic-partition into Arrow buffers (C or pure
    Python, see ``tierlog.records.arrow.codec``) and builds RecordBatches of ``schema(include_headers)`` from
    them without per-row Python work. Not thread-safe."""

    def __init__(self, topic: str, partition: int, include_headers: bool = True) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = schema(include_headers)
        self._sizes = [0] * len(COLUMNS)
        self._clear()

    def _clear(self) -> None:
        # Fresh buffers: the Arrow arrays of the last build keep the old ones. The C decoder
        # fills buffers from Arrow's memory pool, sized as the last build's: the pool reuses
        # the memory of RecordBatches already dropped (no page faults, no growth copies).
        if ACCELERATED:
            self.columns = [pa.allocate_buffer(max(size, 4), resizable=True)
                            for size in self._sizes]
            for c in OFFSET_COLUMNS:
                with memoryview(self.columns[c]) as view, view.cast("B") as raw:
                    raw[:4] = b"\0\0\0\0"
        else:
            self.columns = [bytearray(4) if c in OFFSET_COLUMNS else bytearray()
                            for c in range(len(COLUMNS))]
        self.used = array("q", (4 if c in OFFSET_COLUMNS else 0 for c in range(len(COLUMNS))))
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    @property
    def data_bytes(self) -> int:
        """Bytes of key, value and header data added since the last build."""
        used = self.used
        return used[KEY_DATA] + used[VAL_DATA] + used[HK_DATA] + used[HV_DATA]

    def add(self, data: Buffer, position: int, end: int, count: int, base_offset: int,
            base_timestamp: int, timestamp_type: int, log_append_time: int | None,
            start_offset: int, end_offset: int, min_timestamp: int) -> int:
        """Decode the ``count`` records of one batch's uncompressed records section
        ``data[position:end]`` and add those with an offset in ``[start_offset, end_offset)``
        stamped at or after ``min_timestamp`` (every record carries ``log_append_time`` when it
        is not None); returns how many were added. CorruptRecordError names the record and
        byte of bad framing; nothing of the batch is then added."""
        added: int = decode_batch(self.columns, self.used, data, position, end, count,
                                  base_offset, base_timestamp, timestamp_type, log_append_time,
                                  start_offset, end_offset, min_timestamp, self.include_headers)
        self.rows += added
        return added

    def build(self) -> pa.RecordBatch:
        """A RecordBatch of everything added since the last build; the builder is emptied."""
        n = self.rows
        buf = self._buffer
        columns = [
            _binary(pa.binary(), n, buf(KEY_VALID), buf(KEY_OFFS), buf(KEY_DATA)),
            _binary(pa.binary(), n, buf(VAL_VALID), buf(VAL_OFFS), buf(VAL_DATA)),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.Array.from_buffers(pa.int64(), n, [None, buf(OFFSET)]),
            pa.Array.from_buffers(_MS_TYPE, n, [None, buf(TIMESTAMP)]).cast(TIMESTAMP_TYPE),
            pa.Array.from_buffers(pa.int32(), n, [None, buf(TS_TYPE)]),
        ]
        if self.include_headers:
            entries = self.used[HK_OFFS] // 4 - 1
            header = pa.Array.from_buffers(HEADER_TYPE, entries, [None], children=[
                _binary(pa.string(), entries, None, buf(HK_OFFS), buf(HK_DATA)),
                _binary(pa.binary(), entries, buf(HV_VALID), buf(HV_OFFS), buf(HV_DATA)),
            ])
            columns.append(pa.Array.from_buffers(
                HEADERS_TYPE, n, [_validity(buf(HDR_VALID)), buf(HDR_OFFS)], children=[header]))
        self._sizes = list(self.used)
        self._clear()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _buffer(self, column: int) -> pa.Buffer:
        """The used part of a column buffer, as an Arrow buffer over the same memory."""
        return pa.py_buffer(self.columns[column])[:self.used[column]]


def _binary(type_: pa.DataType, n: int, valid: pa.Buffer | None, offsets: pa.Buffer,
            data: pa.Buffer) -> pa.Array:
    """A binary or string array of ``n`` rows from its buffers (no validity: no nulls)."""
    return pa.Array.from_buffers(type_, n, [_validity(valid), offsets, data])


def _validity(bitmap: pa.Buffer | None) -> pa.Buffer | None:
    """A validity bitmap, or None for an empty one (no rows)."""
    return None if bitmap is None or bitmap.size == 0 else bitmap
