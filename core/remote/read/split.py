"""ReadSplit, the unit of work of a reader (one Spark task): a batch-aligned byte range of
one remote ``.log`` object, read with one ranged GET and decoded into Arrow record batches.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from tierlog.errors import CorruptRecordError, TruncatedBatchError
from tierlog.log.fetch_info import AbortedTracker
from tierlog.records import Record, iter_batches
from tierlog.records.arrow.builder import MAX_DATA_BYTES, ColumnBuilder
from tierlog.records.batch import HEADER_SIZE, LOG_APPEND_TIME, BatchOrigin, RecordBatch
from tierlog.records.compression import NONE, ZSTD, codec_name, decompress_into
from tierlog.remote.read.readable import open_tier
from tierlog.remote.rlm.integrity import check_batch_offsets
from tierlog.remote.tier.object_store import RemoteTier, RequestStats

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)
DEFAULT_BATCH_ROWS = 65_536
#: The column ``mark_aborted`` adds.
ABORTED_COLUMN = "aborted"
_INT64_MIN = -(1 << 63)


@dataclass(frozen=True, slots=True)
class ReadSplit:
    """Everything one task needs to read part of one remote segment; picklable, and it needs
    no state of the process that planned it (only the tier's URL and storage options).

    The byte range ``[byte_start, byte_end)`` of ``log_path`` starts and ends on batch
    boundaries. Records outside ``[start_offset, end_offset)`` are dropped, and so are
    control records and, under read_committed, records of ``aborted`` transactions.
    """

    url: str
    storage_options: Mapping[str, Any] = field(hash=False, repr=False)
    """The filesystem's options; kept out of the repr (they may hold credentials)."""
    topic: str
    partition: int
    log_path: str
    """Full path of the segment's ``.log`` object in the tier's filesystem."""
    byte_start: int
    byte_end: int
    start_offset: int
    end_offset: int
    """Exclusive."""
    isolation_level: str = READ_UNCOMMITTED
    aborted: tuple[tuple[int, int, int], ...] = ()
    """``(producer_id, first_offset, last_offset)`` of each aborted transaction that may
    touch the range (read_committed only)."""
    seek_timestamp: int | None = None
    """Skip records until the first one stamped at or after this (epoch ms): the split holds
    the first offset of a ``starting_timestamp``."""
    stop_timestamp: int | None = None
    """Stop at the first record stamped at or after this: the split holds the offset an
    ``ending_timestamp`` resolves to."""
    min_timestamp: int | None = None
    """Drop records stamped before this (a row filter, e.g. a pushed-down Spark filter)."""
    batch_rows: int = DEFAULT_BATCH_ROWS
    verify_crc: bool = True
    segment_first_offset: int = 0
    """The segment's first and last offsets (its metadata): every batch must lie inside."""
    segment_last_offset: int = (1 << 63) - 1
    anchor_offset: int | None = None
    """The last offset of the batch at ``byte_start`` by the segment's offset index (None at
    the segment's start): checks the first batch read."""
    fetch_end: int | None = None
    """Where the GET ends (default ``byte_end``): the next batch's header is fetched too, so
    the last batch returned is checked against it."""
    include_headers: bool = True
    """Decode the ``headers`` column (``SCHEMA``); False skips it (``SCHEMA_NO_HEADERS``)."""
    object_size: int | None = None
    """The object's size by the tier's metadata: a read finding fewer bytes, or a batch
    running past it, is damage reported with both sizes."""
    mark_aborted: bool = False
    """Keep the records of ``aborted`` transactions (read_uncommitted only) and add a boolean
    ``aborted`` column, true for their rows: Kafka's read_committed rule applied batch by batch,
    as a topic table's file records it (rows where it is false are read_committed's rows)."""

    def __post_init__(self) -> None:
        if self.mark_aborted and self.isolation_level != READ_UNCOMMITTED:
            raise ValueError("mark_aborted keeps the aborted rows: it needs read_uncommitted, "
                             f"not {self.isolation_level}")

    @property
    def size_in_bytes(self) -> int:
        """Bytes the split's one ranged GET reads."""
        return self.byte_end - self.byte_start


def _first_at_or_after(records: list[Record], timestamp: int) -> int | None:
    """Offset of the first record stamped at or after ``timestamp`` (Kafka's timestamp
    search: control and aborted records count too)."""
    return next((r.offset for r in records if r.timestamp >= timestamp),  # type: ignore[operator]
                None)


def read_split(split: ReadSplit, *, stats: RequestStats | None = None,
               tier: RemoteTier | None = None) -> Iterator[pa.RecordBatch]:
    """The split's records as RecordBatches of ``schema(split.include_headers)`` (plus
    ``aborted`` with ``mark_aborted``; about ``batch_rows`` rows each, cut between Kafka
    batches): one ranged GET, every codec decompressed (into one buffer kept across batches),
    control records skipped, CRCs checked. Records are decoded straight into Arrow buffers
    (``ColumnBuilder``); only per-batch decisions are taken here. ``tier``: an open tier to
    read through (the RemoteLogManager's own) instead of the one the split's URL opens."""
    if split.byte_end <= split.byte_start or split.end_offset <= split.start_offset:
        return
    tier, origin, data = _fetch(split, stats, tier)
    builder = ColumnBuilder(split.topic, split.partition, split.include_headers)
    scratch = bytearray()
    judge = (_AbortedBatches(split)
             if split.isolation_level == READ_COMMITTED or split.mark_aborted else None)
    # (rows, aborted) of each data batch added since the last build, with mark_aborted
    marks: list[tuple[int, bool]] | None = [] if split.mark_aborted else None
    start, end = split.start_offset, split.end_offset
    seek, stop, min_ts = split.seek_timestamp, split.stop_timestamp, split.min_timestamp
    for batch in _whole_batches(data, origin, split, tier):
        if batch.base_offset >= end:
            break
        if split.verify_crc:
            batch.ensure_valid()
        # Timestamps resolve to offsets as Kafka's offsetsForTimes does, over every record
        # from where the planner began the range (the time index says none before is late
        # enough); the offset bounds and row filters apply afterwards. Only the batch holding
        # such a boundary is decoded into Records.
        if stop is not None and (found := _reaching(batch, stop)) is not None:
            end, stop = found, None
            if batch.base_offset >= end:
                break
        if seek is not None:
            found = _reaching(batch, seek)
            if found is None:
                continue
            start, seek = max(start, found), None
        if batch.last_offset < start:
            continue
        aborted = judge is not None and judge.aborted(batch, start)
        if aborted and marks is None:
            continue
        if batch.is_control:
            continue
        added = _add_batch(builder, batch, data, scratch, start, end,
                           _INT64_MIN if min_ts is None else min_ts)
        if marks is not None and added:
            marks.append((added, aborted))
        if len(builder) >= split.batch_rows or builder.data_bytes >= MAX_DATA_BYTES:
            yield _build(builder, marks)
    if len(builder):
        yield _build(builder, marks)


def _build(builder: ColumnBuilder, marks: list[tuple[int, bool]] | None) -> pa.RecordBatch:
    """The builder's RecordBatch, with the ``aborted`` column of ``marks`` (then emptied)."""
    batch = builder.build()
    if marks is None:
        return batch
    flags = [pa.repeat(pa.scalar(aborted), sum(rows for rows, _ in run))  # one per flag run
             for aborted, run in itertools.groupby(marks, key=lambda mark: mark[1])]
    marks.clear()
    column = pa.concat_arrays(flags) if flags else pa.array([], pa.bool_())
    return batch.append_column(ABORTED_COLUMN, column)


def _fetch(split: ReadSplit, stats: RequestStats | None, tier: RemoteTier | None
           ) -> tuple[RemoteTier, BatchOrigin, memoryview]:
    """``(tier, origin, data)``: the split's bytes, with the next batch's header past them
    fetched and every batch's offsets checked (damage to a base offset, outside the CRC,
    would drop or renumber rows silently)."""
    if tier is None:
        tier = open_tier(split.url, split.storage_options, stats)
    origin = BatchOrigin(split.log_path, split.byte_start, split.topic, split.partition)
    fetch_end = max(split.byte_end, split.fetch_end or 0)
    try:
        fetched = tier.get_range(split.log_path, split.byte_start, fetch_end,
                                 split.object_size or fetch_end, pooled=True)
    except CorruptRecordError as e:  # a cut object: both sizes, the object named here
        raise origin.locate(e) from e
    check_batch_offsets(fetched, origin, first_offset=split.segment_first_offset,
                        last_offset=split.segment_last_offset, anchor=split.anchor_offset,
                        position=split.byte_start)
    return tier, origin, memoryview(fetched)[:split.byte_end - split.byte_start]


def _reaching(batch: RecordBatch, timestamp: int) -> int | None:
    """Offset of ``batch``'s first record stamped at or after ``timestamp`` (None: none is,
    known from its max timestamp without decoding when it is older)."""
    if batch.max_timestamp < timestamp:
        return None
    return _first_at_or_after(batch.records(verify_crc=False), timestamp)


class _AbortedBatches:
    """Kafka's read_committed rule over the batches a split reads, fed every batch read,
    control batches included (an ABORT marker ends its transaction's range)."""

    def __init__(self, split: ReadSplit) -> None:
        self.split = split
        self.tracker: AbortedTracker | None = None

    def aborted(self, batch: RecordBatch, start: int) -> bool:
        """Whether ``batch`` belongs to an aborted transaction. The tracker is built at the
        first batch read, from the transactions whose marker does not precede it."""
        if self.tracker is None:
            first = max(batch.base_offset, start)
            self.tracker = AbortedTracker((txn_first, pid) for pid, txn_first, last
                                          in self.split.aborted if last >= first)
        return self.tracker.skip(batch)


def _whole_batches(data: memoryview, origin: BatchOrigin, split: ReadSplit, tier: RemoteTier
                   ) -> Iterator[RecordBatch]:
    """The whole batches of ``data``; a batch cut by the end of the range is damage, and when
    the range ends where the metadata says the object ends, the error gives both sizes (one
    more request, a HEAD, to count the object's bytes)."""
    try:
        yield from iter_batches(data, strict=True, origin=origin)
    except TruncatedBatchError as e:
        size = split.object_size
        if size is None or split.byte_end < size:
            raise
        found = tier.size(split.log_path)
        raise TruncatedBatchError(
            f"{e.detail}; expected {size} bytes (the object's size in its metadata), found "
            f"{found}", topic=e.topic, partition=e.partition, file=e.file, offset=e.offset,
            position=e.position, check=e.check) from e


def _add_batch(builder: ColumnBuilder, batch: RecordBatch, data: memoryview, scratch: bytearray,
               start: int, end: int, min_ts: int) -> int:
    """Decompress (into ``scratch``) and decode one data batch's records into ``builder``,
    those in ``[start, end)`` stamped at or after ``min_ts``; returns how many were added.
    CorruptRecordError names the object, the batch and the check that failed (the CRC first,
    when it fails too)."""
    count = batch.record_count
    if count == 0:
        return 0
    codec = batch.compression
    if codec > ZSTD:
        batch.records()  # raises the CorruptRecordError that names the unknown codec
    position = batch.position + HEADER_SIZE
    section_end = batch.position + batch.size_in_bytes
    log_append_time = batch.max_timestamp if batch.timestamp_type == LOG_APPEND_TIME else None
    records: memoryview | bytearray
    try:
        if codec == NONE:
            records, records_start, records_end = data, position, section_end
        else:
            with data[position:section_end] as section:
                records_end = decompress_into(codec, section, scratch)
            records, records_start = scratch, 0
        return builder.add(records, records_start, records_end, count, batch.base_offset,
                           batch.base_timestamp, batch.timestamp_type, log_append_time, start,
                           end, min_ts)
    except CorruptRecordError as e:
        batch.ensure_valid()  # damage the CRC catches is reported as a CRC failure
        check = "record framing" if codec == NONE else f"record framing ({codec_name(codec)})"
        raise batch.locate(e, check) from e
