"""Build v2 record batches (data and transaction-marker control batches) as bytes.

Records are encoded by the record codec; this module adds compression and the 61-byte header.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from crc32c import crc32c

from tierlog.common.clock import system_time_ms
from tierlog.records._codec import encode_columns, encode_records
from tierlog.records.batch import (
    CONTROL_MASK,
    CREATE_TIME,
    CURRENT_MAGIC,
    DELETE_HORIZON_MASK,
    HEADER_CRC_COVERED,
    HEADER_PREFIX,
    LOG_APPEND_TIME,
    MIN_BATCH_LENGTH,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)
from tierlog.records.columns import RecordColumns
from tierlog.records.compression import NONE, codec_id, compress
from tierlog.records.control import ABORT, COMMIT, encode_control_key, encode_control_value
from tierlog.records.record import Record


def build_batch(
    records: Sequence[Record],
    *,
    compression: int | str = NONE,
    base_offset: int = 0,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    partition_leader_epoch: int = -1,
    now_ms: int | None = None,
    compression_level: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """One v2 batch holding ``records`` (offset deltas 0..n-1 from ``base_offset``).

    A record without a timestamp gets ``now_ms`` (default: the wall clock). baseTimestamp
    is the first record's timestamp, or ``delete_horizon_ms`` when given (attribute bit 6).
    maxTimestamp is the largest record timestamp, or ``now_ms`` for LogAppendTime.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(
            f"timestamp_type must be {CREATE_TIME} (CreateTime) or {LOG_APPEND_TIME} "
            f"(LogAppendTime), got {timestamp_type!r}"
        )
    codec = codec_id(compression)
    now = system_time_ms() if now_ms is None else now_ms
    attributes = codec
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if delete_horizon_ms is None:
        first = records[0].timestamp
        base_timestamp = now if first is None else first
    else:
        base_timestamp = delete_horizon_ms
        attributes |= DELETE_HORIZON_MASK
    body, max_timestamp = encode_records(records, base_timestamp, now)
    if timestamp_type == LOG_APPEND_TIME:
        max_timestamp = now
    if codec != NONE:
        body = compress(codec, body, compression_level)
    return _assemble(
        base_offset, partition_leader_epoch, attributes, len(records), base_timestamp,
        max_timestamp, producer_id, producer_epoch, base_sequence, body,
    )


def build_batch_from_columns(
    columns: RecordColumns,
    start: int,
    end: int,
    *,
    compression: int | str = NONE,
    base_offset: int = 0,
    compression_level: int | None = None,
) -> tuple[bytes, int]:
    """(one v2 batch of rows ``start..end-1`` of Arrow columns, its max timestamp): the
    bytes ``build_batch`` makes of the same records with CreateTime and no producer,
    encoded in bulk (encode_columns) instead of through one Record per row."""
    if end <= start:
        raise ValueError("a record batch needs at least one record")
    codec = codec_id(compression)
    stamps = memoryview(columns.timestamps).cast("B").cast("q")
    base_timestamp = stamps[columns.timestamp_offset + start]
    body, max_timestamp = encode_columns(columns, start, end, base_timestamp)
    if codec != NONE:
        body = compress(codec, body, compression_level)
    data = _assemble(base_offset, -1, codec, end - start, base_timestamp, max_timestamp, -1, -1,
                     NO_SEQUENCE, body)
    return data, max_timestamp


def build_control_batch(
    control_type: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    timestamp: int | None = None,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker: one ABORT or COMMIT control record in a transactional control batch."""
    if control_type not in (ABORT, COMMIT):
        raise ValueError(
            f"control_type must be ABORT ({ABORT}) or COMMIT ({COMMIT}), got {control_type!r}"
        )
    ts = system_time_ms() if timestamp is None else timestamp
    marker = Record(
        key=encode_control_key(control_type),
        value=encode_control_value(coordinator_epoch),
        timestamp=ts,
    )
    body, max_timestamp = encode_records((marker,), ts, ts)
    return _assemble(
        base_offset, partition_leader_epoch, TRANSACTIONAL_MASK | CONTROL_MASK, 1, ts,
        max_timestamp, producer_id, producer_epoch, NO_SEQUENCE, body,
    )


def _assemble(
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    body: bytes,
) -> bytes:
    """Header + body in one join; the CRC runs over the covered header bytes, then the body."""
    try:
        covered = HEADER_CRC_COVERED.pack(
            attributes, count - 1, base_timestamp, max_timestamp, producer_id, producer_epoch,
            base_sequence, count,
        )
        crc = crc32c(body, crc32c(covered))
        prefix = HEADER_PREFIX.pack(
            base_offset, MIN_BATCH_LENGTH + len(body), partition_leader_epoch, CURRENT_MAGIC, crc
        )
    except struct.error as e:
        raise ValueError(
            f"batch header field out of range (base_offset={base_offset}, "
            f"partition_leader_epoch={partition_leader_epoch}, producer_id={producer_id}, "
            f"producer_epoch={producer_epoch}, base_sequence={base_sequence}, "
            f"base_timestamp={base_timestamp}): {e}"
        ) from e
    return b"".join((prefix, covered, body))


