"""Rewriting a batch the cleaner keeps part of (the output side of Kafka's ``MemoryRecords.filterTo``).

Kept records keep their offsets; the batch keeps its codec, producer fields, flags and last offset.
"""

from __future__ import annotations

from collections.abc import Sequence

from crc32c import crc32c
from tierlog.records import Record, RecordBatch, compress
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
_NULL = b"\x01"  # zigzag(-1): a null key, value or header value
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
        base_timestamp = retained[0].timestamp
    else:
        base_timestamp = delete_horizon_ms
        attributes |= DELETE_HORIZON_MASK
    body, max_timestamp = _encode(retained, batch.base_offset, base_timestamp)
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


def _encode(records: Sequence[Record], base_offset: int, base_timestamp: int) -> tuple[bytes, int]:
    """The records section with each record's own offset delta; (bytes, max timestamp)."""
    out: list[bytes] = []
    max_timestamp = NO_TIMESTAMP
    for record in records:
        timestamp = record.timestamp
        max_timestamp = max(max_timestamp, timestamp)
        parts = [b"\x00", _varint(timestamp - base_timestamp), _varint(record.offset - base_offset)]
        _append_bytes(parts, record.key)
        _append_bytes(parts, record.value)
        headers = record.headers
        parts.append(_varint(len(headers)))
        for name, value in headers:
            _append_bytes(parts, name.encode("utf-8"))
            _append_bytes(parts, value)
        encoded = b"".join(parts)
        out.append(_varint(len(encoded)))
        out.append(encoded)
    return b"".join(out), max_timestamp


def _append_bytes(parts: list[bytes], value: bytes | None) -> None:
    if value is None:
        parts.append(_NULL)
    else:
        parts.append(_varint(len(value)))
        parts.append(value)


def _varint(value: int) -> bytes:
    """Zigzag varint (protobuf style) of a value that fits int64."""
    raw = (value << 1) ^ (value >> 63)
    if raw < 0x80:
        return _SMALL[raw]
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


_SMALL = tuple(bytes((i,)) for i in range(0x80))
