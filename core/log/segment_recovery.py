"""The recovery scan of one segment (Kafka's ``LogSegment.recover``): every batch of the
``.log`` re-read in big chunks (header rule, CRC, increasing offsets within the segment's
relative range), the sparse offset and time index entries rebuilt on the way (where
:class:`~tierlog.index.sparse.SparseIndexRule` places them) and the first invalid byte found. The
segment applies the result to its files (``LogSegment.rebuild_indexes``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from tierlog.common.int_bounds import INT32_MAX
from tierlog.errors import CorruptRecordError, LogDamagedError, TruncatedBatchError
from tierlog.index.sparse import OFFSET_AND_TIME_ENTRY, SparseIndexRule
from tierlog.records.batch import (
    ATTRIBUTES,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    RecordBatch,
    walk_headers,
)
from tierlog.records.file_records import FileRecords

log = logging.getLogger(__name__)

#: Bytes read per call by the recovery scan: big enough for few syscalls, small enough that
#: the CRC reads the chunk from the CPU cache right after the copy.
RECOVERY_CHUNK_BYTES = 1 << 20


@dataclass(slots=True)
class RecoveryResult:
    """What recovering one segment found."""

    valid_bytes: int = 0
    """Bytes of whole, valid batches kept."""
    truncated_bytes: int = 0
    """Bytes cut from the end of the ``.log`` (from the first invalid byte on)."""
    batches: int = 0
    next_offset: int = 0
    """The offset after the last valid batch (the base offset when none is left)."""
    error: str | None = None
    """Why the scan stopped early, if it did."""


@dataclass(frozen=True, slots=True)
class SegmentDamage:
    """Invalid bytes a read-only open found in a segment and left as they are (recovery would
    have cut them): reads of the segment stop before ``position`` and a read reaching it
    raises :meth:`error`."""

    partition: str
    """The partition directory's name, ``<topic>-<partition>``."""
    file: Path
    """The segment's ``.log`` file."""
    position: int
    """The first invalid byte: the start of the first batch that failed a check."""
    offset: int
    """The first offset that cannot be read (the one after the last valid batch)."""
    check: str
    """Which check failed there, as the recovery scan words it."""

    def error(self) -> LogDamagedError:
        """The one-line report of the damage, with what to run next."""
        return LogDamagedError(
            f"{self.partition}: segment {self.file} is damaged at position {self.position} "
            f"(offset {self.offset}): {self.check}; nothing was changed (a read never "
            f"truncates): check it with 'tierlog dump-log --verify {self.file}' and, for a "
            f"tiered topic, its remote copy with 'tierlog scrub --deep URL'")


def in_flight_tail(records: FileRecords, position: int) -> bool:
    """Whether the bytes of ``records`` from ``position`` to its end are what a writer leaves
    while it appends, not damage: fewer bytes than a batch needs, a batch header declaring more
    bytes than the file holds yet, or zeros (a preallocated segment's unwritten space)."""
    remaining = records.size_in_bytes() - position
    if remaining < LOG_OVERHEAD:
        return True
    head = records.read_bytes(position, min(remaining, HEADER_SIZE))
    if not any(head):
        return True
    declared = int.from_bytes(head[8:12], "big", signed=True) + LOG_OVERHEAD
    return declared > remaining


@dataclass(slots=True)
class SegmentScan:
    """What the scan rebuilt: the index entries (flat: relative offset, position, ... and
    timestamp, relative offset, ...), the segment's max timestamp and its offset, the bytes
    appended since the last offset-index entry, and the RecoveryResult."""

    offset_entries: list[int] = field(default_factory=list)
    time_entries: list[int] = field(default_factory=list)
    max_timestamp: int = -1
    offset_of_max_timestamp: int = 0
    bytes_since_last_entry: int = 0
    result: RecoveryResult = field(default_factory=RecoveryResult)


def scan_segment(
    records: FileRecords,
    base_offset: int,
    index_interval_bytes: int,
    on_batch: Callable[[RecordBatch], None] | None = None,
    on_epoch: Callable[[int, int], None] | None = None,
) -> SegmentScan:
    """Scan the ``.log`` of the segment at ``base_offset`` from its start.

    ``on_batch(batch)`` is called for each batch with a producer id (the caller rebuilds
    producer state and refills the transaction index); the view is only valid during the
    call. ``on_epoch(epoch, offset)`` is called when a batch carries a leader epoch above
    every earlier one. The file is read in big chunks into one reused buffer: recovery runs
    near the disk's read speed. Nothing is changed: the caller truncates at
    ``result.valid_bytes`` and writes the index entries.
    """
    offset_entries: list[int] = []  # relative offset, position, ...
    time_entries: list[int] = []  # timestamp, relative offset, ...
    result = RecoveryResult()
    best_ts, best_offset = -1, base_offset
    batches = 0
    rule = SparseIndexRule(index_interval_bytes)
    last_offset = base_offset - 1
    max_last = base_offset + INT32_MAX
    epoch_seen = -1
    size = records.size_in_bytes()
    buffer = bytearray(min(RECOVERY_CHUNK_BYTES, max(size, HEADER_SIZE)))
    view = memoryview(buffer)
    # Locals: this loop runs once per batch of every unflushed segment.
    crc, overhead = crc32c, LOG_OVERHEAD
    index_entries_due = rule.add
    crc_start = ATTRIBUTES
    file_pos = pos = 0
    try:
        while file_pos < size:
            got = records.read_into(buffer, file_pos)
            pos = 0
            # walk_headers applies the header rule (magic, batchLength) to each header,
            # so pos is the first byte not yet accepted wherever the walk stops or raises.
            for pos, (base, length, epoch, _magic, stored_crc, _attributes, delta, _base_ts,
                      max_ts, producer_id, _producer_epoch, _base_seq,
                      count) in walk_headers(buffer, 0, got):
                end = pos + length + overhead
                if end > got:
                    break
                if crc(view[pos + crc_start:end]) != stored_crc:
                    RecordBatch(buffer, pos).ensure_valid()  # raises, naming the fault
                last = base + delta
                if not (last_offset < base <= last <= max_last and 0 <= count <= delta + 1):
                    _raise_bad_offsets(buffer, pos, file_pos + pos, last_offset, base_offset)
                if max_ts > best_ts:
                    best_ts = max_ts
                    best_offset = last
                due = index_entries_due(end - pos, best_ts)
                if due:
                    offset_entries += (last - base_offset, file_pos + pos)
                    if due == OFFSET_AND_TIME_ENTRY:
                        time_entries += (best_ts, best_offset - base_offset)
                if epoch > epoch_seen:
                    epoch_seen = epoch
                    if on_epoch is not None:
                        on_epoch(epoch, base)
                if producer_id >= 0 and on_batch is not None:
                    on_batch(RecordBatch(buffer, pos))
                last_offset = last
                batches += 1
                pos = end
            if pos == 0:
                # Not one whole batch in the chunk: a batch bigger than the buffer, or a
                # cut-off batch at the end of the file.
                needed = _whole_batch_bytes(buffer, got, size - file_pos)
                view.release()
                buffer = bytearray(needed)
                view = memoryview(buffer)
                continue
            file_pos += pos
            pos = 0
    except CorruptRecordError as exc:  # includes TruncatedBatchError
        # The check that failed, without the error's position (one within the read chunk):
        # the file's is the first invalid byte.
        result.error = f"{exc.check} check failed: {exc.detail}" if exc.check else exc.detail
        log.warning("%s: invalid data at byte %d: %s", records.path, file_pos + pos,
                    result.error)
    finally:
        view.release()
    result.batches = batches
    valid = file_pos + pos
    if best_ts >= 0 and best_ts > rule.indexed_timestamp:
        # The entry a roll or close appends: the segment's max timestamp.
        time_entries += (best_ts, best_offset - base_offset)
    result.valid_bytes = valid
    result.next_offset = last_offset + 1
    return SegmentScan(offset_entries, time_entries, best_ts, best_offset, rule.since, result)


def _whole_batch_bytes(buffer: bytearray, got: int, remaining: int) -> int:
    """The size of the batch starting ``buffer`` (``got`` bytes read, ``remaining`` left in
    the file from there), which did not fit: TruncatedBatchError when the file cuts it off."""
    if got < HEADER_SIZE:
        raise TruncatedBatchError(
            f"{got} trailing bytes are not a whole batch header ({HEADER_SIZE} bytes)")
    base, length = HEADER.unpack_from(buffer, 0)[:2]
    needed: int = length + LOG_OVERHEAD
    if needed > remaining:
        raise TruncatedBatchError(
            f"the batch there (offset {base}) declares {needed} bytes but only {remaining} "
            f"remain"
        )
    return needed


def _raise_bad_offsets(buffer: bytearray, pos: int, position: int, previous_last: int,
                       base_offset: int) -> None:
    batch = RecordBatch(buffer, pos)
    batch.ensure_valid()  # negative counts and deltas are named there
    if batch.base_offset <= previous_last or batch.base_offset < base_offset:
        raise CorruptRecordError(
            f"batch at position {position} has offset {batch.base_offset}, not above "
            f"{max(previous_last, base_offset - 1)} (the previous batch's last offset "
            f"or the segment's base offset {base_offset})"
        )
    raise CorruptRecordError(
        f"batch at position {position} ends at offset {batch.last_offset}, beyond the "
        f"4-byte relative offsets of the segment at base offset {base_offset}"
    )
