"""Integrity checks of bytes fetched from the remote tier: every batch must pass its CRC, and
batch offsets must agree with the segment's metadata and offset index (the base offset lies
outside the CRC, so only continuity can catch damage there)."""

from __future__ import annotations

import struct

from tierlog.errors import CorruptRecordError
from tierlog.records import iter_batches
from tierlog.records.batch import HEADER_SIZE, LOG_OVERHEAD, ByteBuffer

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
#: Where lastOffsetDelta sits in a v2 batch header.
_LAST_OFFSET_DELTA_AT = 23


def validate_fetched_batches(data: ByteBuffer) -> None:
    """Raise CorruptRecordError (TruncatedBatchError for a cut batch) unless ``data`` is whole
    v2 batches that all pass their CRC-32C and count checks.

    Fetched ranges must therefore end on a batch boundary. baseOffset and the leader epoch lie
    outside the CRC (Kafka's design): ``check_batch_offsets`` covers the offsets.
    """
    for batch in iter_batches(data, strict=True):
        batch.ensure_valid()


def check_batch_offsets(
    data: ByteBuffer,
    source: str,
    *,
    first_offset: int,
    last_offset: int,
    anchor: int | None = None,
    position: int = 0,
) -> None:
    """Raise CorruptRecordError naming ``source`` unless the batches of ``data`` (read from
    byte ``position`` of a segment) have strictly increasing offsets inside the segment's
    ``[first_offset, last_offset]``, and the first one ends at ``anchor`` when given (the
    offset index's entry for the batch at ``position``).

    Every batch whose 61-byte header is in ``data`` is checked, a trailing one whose body is
    cut off included: a reader fetches the next batch's header to check the last batch it
    returns against it. Gaps (compacted segments) are allowed; overlaps are not.
    """
    view = memoryview(data)
    at, previous = 0, None
    while at + HEADER_SIZE <= len(view):
        base, length = _OFFSET_AND_LENGTH.unpack_from(view, at)
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(view, at + _LAST_OFFSET_DELTA_AT)
        last = base + delta
        where = f"{source}: batch at position {position + at} (offsets {base}..{last})"
        if length + LOG_OVERHEAD < HEADER_SIZE or delta < 0:
            raise CorruptRecordError(f"{where} has a malformed header")
        if previous is None and anchor is not None and last != anchor:
            raise CorruptRecordError(
                f"{where} does not end at offset {anchor} as the segment's offset index says")
        if previous is not None and base <= previous:
            raise CorruptRecordError(
                f"{where} does not follow the previous batch, which ends at offset {previous}")
        if base < first_offset or last > last_offset:
            raise CorruptRecordError(
                f"{where} lies outside the segment's offsets {first_offset}..{last_offset}")
        previous = last
        at += length + LOG_OVERHEAD
