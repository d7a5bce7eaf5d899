"""The Arrow schema of Spark's Kafka source, and the column builder that turns decoded
records into ``pyarrow.RecordBatch`` objects of that schema.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from tierlog.records import Record

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_MS_TYPE = pa.timestamp("ms", tz="UTC")

#: Spark's Kafka source schema (with headers), as Arrow: binary (not large_binary), int32
#: partition and timestampType, microsecond UTC timestamps, headers null when a record has none.
SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
    pa.field("headers", HEADERS_TYPE),
])


class ColumnBuilder:
    """Accumulates records of one topic-partition column by column (plain lists, no per-row
    objects) and builds a RecordBatch of ``SCHEMA`` from them. Not thread-safe."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._clear()

    def _clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[Sequence[tuple[str, bytes | None]]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, records: Sequence[Record], timestamp_type: int) -> None:
        """Append decoded records (all from one batch, so one timestamp type)."""
        self.keys += [r.key for r in records]
        self.values += [r.value for r in records]
        self.offsets += [r.offset for r in records]
        self.timestamps += [r.timestamp for r in records]  # type: ignore[misc]
        self.headers += [r.headers for r in records]
        self.timestamp_types += [timestamp_type] * len(records)

    def build(self) -> pa.RecordBatch:
        """A RecordBatch of everything added since the last build; the builder is emptied."""
        n = len(self.offsets)
        columns = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.int64()).cast(_MS_TYPE).cast(TIMESTAMP_TYPE),
            pa.array(self.timestamp_types, pa.int32()),
            _headers_array(self.headers),
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def _headers_array(per_record: list[Sequence[tuple[str, bytes | None]]]) -> pa.Array:
    """``list<struct<key, value>>``, null for a record without headers (as Spark's source)."""
    lengths = list(map(len, per_record))
    flat = [header for headers in per_record for header in headers]
    if not flat:
        return pa.nulls(len(per_record), HEADERS_TYPE)
    entries = pa.StructArray.from_arrays(
        [pa.array([h[0] for h in flat], pa.string()), pa.array([h[1] for h in flat], pa.binary())],
        fields=list(HEADER_TYPE))
    offsets = pa.array([0, *itertools.accumulate(lengths)], pa.int32())
    empty = pc.equal(pa.array(lengths, pa.int32()), 0)
    return pa.ListArray.from_arrays(offsets, entries, type=HEADERS_TYPE, mask=empty)
