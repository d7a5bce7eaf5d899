"""Integrity checks of bytes fetched from the remote tier: every batch must pass its CRC."""

from __future__ import annotations

from tierlog.records import iter_batches
from tierlog.records.batch import ByteBuffer


def validate_fetched_batches(data: ByteBuffer) -> None:
    """Raise CorruptRecordError (TruncatedBatchError for a cut batch) unless ``data`` is whole
    v2 batches that all pass their CRC-32C and count checks.

    Fetched ranges must therefore end on a batch boundary. baseOffset and the leader epoch lie
    outside the CRC (Kafka's design), so damage there is not detected here.
    """
    for batch in iter_batches(data, strict=True):
        batch.ensure_valid()
