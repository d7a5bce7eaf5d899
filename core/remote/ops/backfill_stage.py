"""The task side of a backfill: records of one topic-partition -> v2 batches -> staged
segment chunks in the tier, under ``<partition dir>/_staging/<job id>/<task attempt>/``.

A chunk is a segment built by the engine's own parts (``records.builder``'s
``build_batch_from_columns``, which encodes a batch's rows from Arrow columns in bulk, and a
``LogSegment`` with its offset, time and transaction indexes) at the PROVISIONAL base offset
0: the indexes hold offsets relative to the segment's base, so they stay valid at whatever
base offset the job's commit assigns, and the commit only rewrites each batch's baseOffset
and partitionLeaderEpoch (outside the CRC, see docs/formats.md). Nothing staged is visible
to readers; the commit (tierlog.remote.ops.backfill_commit) turns chunks into segments.
"""

from __future__ import annotations

import bisect
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tierlog.common.int_bounds import INT32_MAX
from tierlog.log.segment import AppendedBatch, LogSegment
from tierlog.records.batch import set_base_offset
from tierlog.records.builder import build_batch_from_columns
from tierlog.records.columns import Buffer, RecordColumns
from tierlog.remote.api import IndexType, TopicIdPartition
from tierlog.remote.tier.layout import SEGMENT_SUFFIX, staged_chunk_key
from tierlog.remote.tier.object_store import RemoteTier

log = logging.getLogger(__name__)

#: The suffixes of a staged chunk's objects, in upload order (data first).
CHUNK_SUFFIXES: tuple[str, ...] = (SEGMENT_SUFFIX, IndexType.OFFSET.suffix,
                                   IndexType.TIMESTAMP.suffix, IndexType.TRANSACTION.suffix)
DEFAULT_SEGMENT_BYTES = 1 << 30
DEFAULT_BATCH_BYTES = 16384  # Kafka's producer batch.size
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024
#: What a record adds to a batch beyond its key and value, for cutting batches.
_RECORD_OVERHEAD = 24
_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
#: The rows a StagedPartitionWriter takes: key (nullable), value, headers (nullable; a null
#: list is none), timestamp (epoch milliseconds, set).
ROW_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()),
                        ("headers", _HEADER_TYPE), ("timestamp", pa.int64())])


def batch_ends(rows: pa.Table, limit: int) -> list[int]:
    """Where full batches of ``rows`` end (exclusive): a batch takes rows until their sizes
    (key and value lengths plus a record's overhead) reach ``limit``, as a producer's
    ``batch.size`` cuts; rows after the last end wait for more. One home of the cut rule."""
    sizes = pc.add(pc.add(pc.fill_null(pc.binary_length(rows.column("value")), 0),
                          pc.fill_null(pc.binary_length(rows.column("key")), 0)),
                   _RECORD_OVERHEAD)
    totals = pc.cumulative_sum(pc.cast(sizes, pa.int64())).combine_chunks()
    cumulative = memoryview(totals.buffers()[1]).cast("q")[totals.offset:
                                                          totals.offset + len(totals)]
    ends: list[int] = []
    before = 0
    n = len(cumulative)
    while True:
        i = bisect.bisect_left(cumulative, before + limit, lo=ends[-1] if ends else 0)
        if i >= n:
            return ends
        ends.append(i + 1)
        before = cumulative[i]


def _binary_buffers(array: pa.Array) -> tuple[Buffer, Buffer, Buffer, int]:
    valid, offsets, data = array.buffers()[:3]
    return (valid if array.null_count else None), offsets, data, array.offset


def record_columns(rows: pa.Table) -> RecordColumns:
    """The buffers of one-chunk rows of :data:`ROW_SCHEMA`, for encoding in bulk."""
    key = rows.column("key").chunk(0)
    value = rows.column("value").chunk(0)
    stamps = rows.column("timestamp").chunk(0)
    headers = rows.column("headers").chunk(0)
    if key.null_count == len(key):
        key_parts: tuple[Buffer, Buffer, Buffer, int] = (None, None, None, 0)
    else:
        key_parts = _binary_buffers(key)
    header_parts: tuple[Any, ...] = (None, None, 0) + (None, None, None, 0) * 2
    if headers.null_count < len(headers):
        header_key, header_value = headers.values.flatten()
        header_parts = ((headers.buffers()[0] if headers.null_count else None),
                        headers.buffers()[1], headers.offset,
                        *_binary_buffers(header_key), *_binary_buffers(header_value))
    return RecordColumns(*key_parts, *_binary_buffers(value), stamps.buffers()[1],
                         stamps.offset, *header_parts)


@dataclass(frozen=True, slots=True)
class StagedChunk:
    """One staged segment chunk (picklable): where it is and what the commit needs."""

    topic_id: str
    topic: str
    partition: int
    job_id: str
    attempt: str
    index: int
    """The chunk's place among its task's chunks of this partition."""
    records: int
    size_in_bytes: int
    max_timestamp: int
    max_timestamp_offset: int
    """Offset of the max timestamp, relative to the chunk's first record."""

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.topic, self.partition)

    def object_key(self, suffix: str) -> str:
        return staged_chunk_key(self.topic_id_partition, self.job_id, self.attempt,
                                self.index, suffix)


@dataclass(frozen=True, slots=True)
class StageSettings:
    """How a task stages: codec, batch and segment sizes (Kafka's producer and topic
    settings of the same meaning)."""

    compression: str = "none"
    batch_bytes: int = DEFAULT_BATCH_BYTES
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    max_index_size: int = DEFAULT_MAX_INDEX_SIZE


class StagedPartitionWriter:
    """Turns the rows (Arrow, :data:`ROW_SCHEMA`) of one topic-partition written by one task
    attempt into staged chunks: v2 batches cut by :func:`batch_ends` (``settings.compression``,
    no producer id, CreateTime from each row's timestamp, which the caller sets), cut into
    chunks at ``segment_bytes``.
    ``close`` uploads the last chunk and returns every chunk; ``discard`` drops local files.
    Not thread-safe (one per task and partition)."""

    def __init__(self, tier: RemoteTier, tip: TopicIdPartition, job_id: str, attempt: str,
                 settings: StageSettings, now_ms: int) -> None:
        self._tier = tier
        self._tip = tip
        self._job_id = job_id
        self._attempt = attempt
        self._settings = settings
        self._now_ms = now_ms
        self._scratch = Path(tempfile.mkdtemp(prefix="tierlog-backfill-"))
        self._pending: pa.Table | None = None
        self._segment: LogSegment | None = None
        self._next_offset = 0  # relative to the open chunk
        self._unwritten: list[bytearray] = []  # built batches not yet in the segment
        self._unwritten_batches: list[AppendedBatch] = []
        self._unwritten_bytes = 0
        self._chunks: list[StagedChunk] = []

    def append(self, rows: pa.Table) -> None:
        """Add rows of :data:`ROW_SCHEMA` (timestamps set); full batches are built as they
        fill, the rest waits for more rows or ``close``."""
        if self._pending is not None:
            rows = pa.concat_tables([self._pending, rows])
        self._pending = None
        n = rows.num_rows
        if n == 0:
            return
        rows = rows.combine_chunks()
        columns = record_columns(rows)
        ends = batch_ends(rows, self._settings.batch_bytes)
        start = 0
        for end in ends:
            self._stage_batch(columns, start, end)
            start = end
        self._write_unwritten()
        if start < n:
            self._pending = rows.slice(start)

    def close(self) -> list[StagedChunk]:
        """Build the last batch, upload the open chunk, and return every chunk staged."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending = pending.combine_chunks()
            self._stage_batch(record_columns(pending), 0, pending.num_rows)
        self._finish_chunk()
        shutil.rmtree(self._scratch, ignore_errors=True)
        return list(self._chunks)

    def discard(self) -> None:
        """Drop local files (a failed task; its staged objects go with the job's staging)."""
        self._pending = None
        self._unwritten, self._unwritten_batches, self._unwritten_bytes = [], [], 0
        if self._segment is not None:
            self._segment.close()
            self._segment = None
        shutil.rmtree(self._scratch, ignore_errors=True)

    def _stage_batch(self, columns: RecordColumns, start: int, end: int) -> None:
        count = end - start
        data, max_ts = build_batch_from_columns(columns, start, end,
                                                compression=self._settings.compression)
        segment = self._segment
        if segment is not None and (
                segment.size + self._unwritten_bytes + len(data) > self._settings.segment_bytes
                or self._next_offset + count - 1 > INT32_MAX):
            self._finish_chunk()
            segment = None
        if segment is None:
            directory = self._scratch / f"{len(self._chunks):06d}"
            directory.mkdir()
            self._segment = LogSegment.open(
                directory, 0, index_interval_bytes=self._settings.index_interval_bytes,
                max_index_size=self._settings.max_index_size)
            self._next_offset = 0
        buf = bytearray(data)
        base = self._next_offset
        set_base_offset(buf, 0, base)
        last = base + count - 1
        self._unwritten.append(buf)
        self._unwritten_batches.append(AppendedBatch(last, max_ts, len(buf)))
        self._unwritten_bytes += len(buf)
        self._next_offset = last + 1

    def _write_unwritten(self) -> None:
        """Append the batches built since the last write in one vectored write (one
        segment append per Arrow batch, not per record batch)."""
        if self._unwritten and self._segment is not None:
            self._segment.append(self._unwritten, self._unwritten_batches)
        self._unwritten, self._unwritten_batches, self._unwritten_bytes = [], [], 0

    def _finish_chunk(self) -> None:
        self._write_unwritten()
        segment, self._segment = self._segment, None
        if segment is None:
            return
        max_ts = segment.max_timestamp_and_offset
        size = segment.size
        segment.close()  # trims the indexes, writes the last time-index entry
        chunk = StagedChunk(
            self._tip.topic_id, self._tip.topic, self._tip.partition, self._job_id,
            self._attempt, len(self._chunks), self._next_offset, size,
            max_ts.timestamp if max_ts is not None else -1,
            max_ts.offset if max_ts is not None else 0)
        paths = (segment.log.path, segment.offset_index.path, segment.time_index.path,
                 segment.txn_index.path)
        for suffix, local in zip(CHUNK_SUFFIXES, paths, strict=True):
            if not local.exists():  # an empty transaction index is not created on disk
                local.touch()
            self._tier.put_file(local, self._tier.path(chunk.object_key(suffix)))
        shutil.rmtree(paths[0].parent, ignore_errors=True)
        self._chunks.append(chunk)
        log.debug("%s: staged chunk %d of job %s (%d records, %d bytes)", self._tip,
                  chunk.index, self._job_id, chunk.records, size)
