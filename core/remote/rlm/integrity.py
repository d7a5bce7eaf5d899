"""Integrity checks of bytes fetched from the remote tier: every batch must pass its CRC, and
batch offsets must agree with the segment's metadata and offset index (the base offset lies
outside the CRC, so only continuity can catch damage there)."""

from __future__ import annotations

from collections.abc import Iterator

from tierlog.errors import CorruptRecordError
from tierlog.records import iter_batches
from tierlog.records.batch import BatchOrigin, ByteBuffer, walk_headers


def validate_fetched_batches(data: ByteBuffer, origin: BatchOrigin | None = None) -> None:
    """Raise CorruptRecordError (TruncatedBatchError for a cut batch) unless ``data`` is whole
    v2 batches that all pass their CRC-32C and count checks; the error names ``origin``.

    Fetched ranges must therefore end on a batch boundary. baseOffset and the leader epoch lie
    outside the CRC (Kafka's design): ``check_batch_offsets`` covers the offsets.
    """
    for batch in iter_batches(data, strict=True, origin=origin):
        batch.ensure_valid()


def check_batch_offsets(
    data: ByteBuffer,
    source: str | BatchOrigin,
    *,
    first_offset: int,
    last_offset: int,
    anchor: int | None = None,
    position: int = 0,
) -> None:
    """Raise CorruptRecordError naming ``source`` (an object key, or an origin naming its
    topic-partition too) unless the batches of ``data`` (read from byte ``position`` of a
    segment) have strictly increasing offsets inside the segment's ``[first_offset,
    last_offset]``, and the first one ends at ``anchor`` when given (the offset index's entry
    for the batch at ``position``).

    Every batch whose 61-byte header is in ``data`` is checked, a trailing one whose body is
    cut off included: a reader fetches the next batch's header to check the last batch it
    returns against it. Gaps (compacted segments) are allowed; overlaps are not. Headers are
    walked with :func:`~tierlog.records.batch.walk_headers` (whose header rule raises too).
    """
    origin = source if isinstance(source, BatchOrigin) else BatchOrigin(source)
    origin = origin._replace(shift=position)
    previous = None
    for at, header in _walk_named(data, origin):
        base, delta = header[0], header[6]
        last = base + delta
        problem = None
        if delta < 0:
            problem = "a negative lastOffsetDelta"
        elif previous is None and anchor is not None and last != anchor:
            problem = f"the batch does not end at offset {anchor} as the segment's offset index says"
        elif previous is not None and base <= previous:
            problem = (f"the batch does not follow the previous batch, which ends at offset "
                       f"{previous}")
        elif base < first_offset or last > last_offset:
            problem = f"the batch lies outside the segment's offsets {first_offset}..{last_offset}"
        if problem is not None:
            raise origin.locate(CorruptRecordError(
                f"offsets {base}..{last}: {problem}", offset=base, position=at, check="offsets"))
        previous = last


def _walk_named(data: ByteBuffer, origin: BatchOrigin
                ) -> Iterator[tuple[int, tuple[int, ...]]]:
    """:func:`walk_headers` of ``data``, its errors naming ``origin`` (the positions in them
    move from the read's to the segment's)."""
    try:
        yield from walk_headers(data)
    except CorruptRecordError as exc:
        raise origin.locate(exc) from exc
