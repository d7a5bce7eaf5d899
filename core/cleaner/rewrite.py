"""Rewriting a batch the cleaner keeps part of (the output side of Kafka's ``MemoryRecords.filterTo``).

Kept records keep their offsets; the batch keeps its codec, producer fields, flags and last offset.
"""

from __future__ import annotations

from collections.abc import Sequence

from crc32c import crc32c

from tierlog.records import Record, RecordBatch, compress
from tierlog.records._codec import encode_records
from tierlog.records.batch import (
    CONTROL_MASK,
    CURRENT_MAGIC,
    DELETE_HORIZON_MASK,
    HEADER_CRC_COVERED,
    HEADER_PREFIX,
    LOG_APPEND_TIME,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from tierlog.records.compression import NONE

#: baseTimestamp of a batch with no records (Kafka's NO_TIMESTAMP).
NO_TIMESTAMP = -1
#: Bits of the attributes a rewritten batch takes from the original.
_KEPT_ATTRIBUTES = TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK


def rewrite_batch(
    batch: RecordBatch, retained: Sequence[Record], delete_horizon_ms: int | None
) -> bytes:
    """A new batch holding ``retained`` (records of ``batch``, in order, not empty).

    As Kafka's ``buildRetainedRecordsInto``: the base offset, last offset delta, partition
    leader epoch, producer id/epoch, base sequence, codec, timestamp type and the
    transactional/control flags are the original's, so each record keeps its offset and the
    producer's last sequence is unchanged. baseTimestamp is ``delete_horizon_ms`` (attribute
    bit 6) when given, else the first kept record's timestamp; maxTimestamp is the largest
    kept timestamp (the original log append time for LogAppendTime batches).
    """
    if not retained:
        raise ValueError(f"rewrite of batch at offset {batch.base_offset} keeps no records")
    attributes = (batch.attributes & _KEPT_ATTRIBUTES) | batch.compression
    if delete_horizon_ms is None:
        first_timestamp = retained[0].timestamp
        assert first_timestamp is not None, "records decoded from a batch have timestamps"
        base_timestamp = first_timestamp
    else:
        base_timestamp = delete_horizon_ms
        attributes |= DELETE_HORIZON_MASK
    body, max_timestamp = encode_records(retained, base_timestamp, base_timestamp,
                                         base_offset=batch.base_offset)
    if batch.timestamp_type == LOG_APPEND_TIME:
        max_timestamp = batch.max_timestamp
    if batch.compression != NONE:
        body = compress(batch.compression, body)
    return _assemble(batch, attributes, len(retained), base_timestamp, max_timestamp, body)


def empty_batch(batch: RecordBatch) -> bytes:
    """A header-only copy of ``batch`` (Kafka's ``writeEmptyHeader``): the same offsets,
    producer fields and flags, no codec, no records, baseTimestamp -1 and the original
    maxTimestamp. It keeps a producer's last sequence, or a segment's last offset."""
    attributes = batch.attributes & _KEPT_ATTRIBUTES
    return _assemble(batch, attributes, 0, NO_TIMESTAMP, batch.max_timestamp, b"")


def _assemble(
    batch: RecordBatch, attributes: int, count: int, base_timestamp: int, max_timestamp: int,
    body: bytes,
) -> bytes:
    covered = HEADER_CRC_COVERED.pack(
        attributes, batch.last_offset_delta, base_timestamp, max_timestamp, batch.producer_id,
        batch.producer_epoch, batch.base_sequence, count,
    )
    crc = crc32c(body, crc32c(covered))
    prefix = HEADER_PREFIX.pack(
        batch.base_offset, MIN_BATCH_LENGTH + len(body), batch.partition_leader_epoch,
        CURRENT_MAGIC, crc,
    )
    return b"".join((prefix, covered, body))
