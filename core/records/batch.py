"""RecordBatch: a zero-copy view of one v2 record batch inside a buffer, the header rule, the
walkers over batches (``iter_batches``) and over their headers alone (``walk_headers``), and
the in-place header patchers (base offset, leader epoch, log append time) the log uses.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeAlias, TypeVar

from crc32c import crc32c

from tierlog.common.int_bounds import INT32_MAX
from tierlog.errors import (
    CorruptRecordError,
    DecompressionLimitError,
    TruncatedBatchError,
    UnsupportedMagicError,
)
from tierlog.records._codec import check_records, decode_records
from tierlog.records.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    NONE,
    ZSTD,
    codec_name,
    decompress,
)
from tierlog.records.control import ControlRecord, decode_control_record

if TYPE_CHECKING:
    from tierlog.records.record import Record

#: What a batch view can sit on: any bytes-like object with a length.
ByteBuffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap


_Error = TypeVar("_Error", bound=CorruptRecordError)


class BatchOrigin(NamedTuple):
    """Where a buffer of batches came from, for the errors about them: the segment file or
    remote object (``file``), the position in it where the buffer starts (``shift``), and
    the topic-partition when known. Errors of a batch read from it name all of them."""

    file: str
    shift: int = 0
    topic: str | None = None
    partition: int | None = None

    def locate(self, error: _Error) -> _Error:
        """``error`` (positions in the buffer) with this origin filled in."""
        return error.located(file=self.file, shift=self.shift, topic=self.topic,
                             partition=self.partition)

# --- header layout -----------------------------------------------------------------------
BASE_OFFSET = 0
LENGTH = 8
PARTITION_LEADER_EPOCH = 12
MAGIC = 16
CRC = 17
ATTRIBUTES = 21
LAST_OFFSET_DELTA = 23
BASE_TIMESTAMP = 27
MAX_TIMESTAMP = 35
PRODUCER_ID = 43
PRODUCER_EPOCH = 51
BASE_SEQUENCE = 53
RECORDS_COUNT = 57
HEADER_SIZE = 61
#: baseOffset and batchLength: the bytes before what batchLength counts.
LOG_OVERHEAD = 12
#: The smallest legal batchLength: a header with no records.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
#: The only magic (record format version) supported.
CURRENT_MAGIC = 2

#: Bytes 0..21: baseOffset, batchLength, partitionLeaderEpoch, magic, crc (outside the CRC).
HEADER_PREFIX = struct.Struct(">qiibI")
#: Bytes 21..61, covered by the CRC: attributes, lastOffsetDelta, baseTimestamp,
#: maxTimestamp, producerId, producerEpoch, baseSequence, recordCount.
HEADER_CRC_COVERED = struct.Struct(">hiqqqhii")
#: The whole 61-byte header, ">qiibIhiqqqhii".
HEADER = struct.Struct(HEADER_PREFIX.format + HEADER_CRC_COVERED.format[1:])

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_LENGTH_EPOCH_MAGIC = struct.Struct(">iib")

# --- attributes ----------------------------------------------------------------------------
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_SEQUENCE = -1


def _field(index: int, doc: str) -> Any:  # noqa: ANN401 - a property; its attribute is typed
    return property(lambda self: self._header[index], doc=doc)


class RecordBatch:
    """A read-only view of one v2 record batch at ``position`` in ``buffer`` (no copy).

    The 61-byte header (see docs/formats.md) is parsed once, on construction: batchLength
    must be at least 49 and the magic 2, and the buffer must hold the whole batch
    (``header_only=True`` needs just the header; the body methods then raise
    TruncatedBatchError). The buffer is any bytes-like object: bytes, bytearray,
    memoryview or mmap. The view keeps the buffer, not a copy; later changes to its
    bytes show through ``view()``, ``records()`` and the CRC but not the parsed header.
    ``origin`` says where the buffer came from: every CorruptRecordError of the batch names
    it, with the batch's offset, its position in the file and the check that failed.
    Instances are immutable and safe to share between threads if the buffer is.
    """

    __slots__ = ("_buffer", "_complete", "_header", "_origin", "_position")
    _buffer: ByteBuffer
    _complete: bool
    _header: tuple[int, ...]
    _origin: BatchOrigin | None
    _position: int

    def __init__(
        self, buffer: ByteBuffer, position: int = 0, *, header_only: bool = False,
        origin: BatchOrigin | None = None,
    ) -> None:
        total = len(buffer)
        available = total - position
        if position < 0 or available < 0:
            raise ValueError(f"position {position} is outside a buffer of {total} bytes")
        try:
            if available < HEADER_SIZE:
                _check_short_header(buffer, position, available)
            header = HEADER.unpack_from(buffer, position)
            if header[3] != CURRENT_MAGIC or header[1] < MIN_BATCH_LENGTH:
                _reject_header(header, position)
        except CorruptRecordError as e:
            if origin is None:
                raise
            raise origin.locate(e) from e
        size = header[1] + LOG_OVERHEAD
        if size > available and not header_only:
            raise _in(origin, TruncatedBatchError(
                f"the batch declares {size} bytes but only {available} are available",
                offset=header[0], position=position, check="size"))
        self._buffer = buffer
        self._position = position
        self._header = header
        self._complete = size <= available
        self._origin = origin

    base_offset: int = _field(0, "Offset of the first record (patched by the log on append).")
    batch_length: int = _field(1, "Bytes after the batchLength field (size_in_bytes - 12).")
    partition_leader_epoch: int = _field(2, "Leader epoch stamped by the log (outside the CRC).")
    magic: int = _field(3, "Record format version; always 2 here.")
    crc: int = _field(4, "Stored CRC-32C of bytes 21..end.")
    attributes: int = _field(5, "Attribute bits: codec, timestamp type, txn, control, horizon.")
    last_offset_delta: int = _field(6, "last_offset - base_offset (kept by compaction).")
    base_timestamp: int = _field(7, "First record's timestamp, or the delete horizon (bit 6).")
    max_timestamp: int = _field(8, "Largest record timestamp, or the log append time.")
    producer_id: int = _field(9, "Idempotent/transactional producer id, -1 for none.")
    producer_epoch: int = _field(10, "Producer epoch, -1 for none.")
    base_sequence: int = _field(11, "Sequence number of the first record, -1 for none.")
    record_count: int = _field(12, "Number of records the header declares.")

    @property
    def position(self) -> int:
        """Byte position of the batch in its buffer."""
        return self._position

    @property
    def size_in_bytes(self) -> int:
        return self._header[1] + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self._header[0] + self._header[6]

    @property
    def next_offset(self) -> int:
        return self._header[0] + self._header[6] + 1

    @property
    def compression(self) -> int:
        return self._header[5] & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """CREATE_TIME (0) or LOG_APPEND_TIME (1)."""
        return LOG_APPEND_TIME if self._header[5] & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self._header[5] & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self._header[5] & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self._header[5] & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When compaction may drop this batch's tombstones and markers (baseTimestamp), or None."""
        return self._header[7] if self._header[5] & DELETE_HORIZON_MASK else None

    @property
    def last_sequence(self) -> int:
        """base_sequence + last_offset_delta, wrapping past int32 max to 0 as Kafka does."""
        base, delta = self._header[11], self._header[6]
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        if base > INT32_MAX - delta:
            return delta - (INT32_MAX - base) - 1
        return base + delta

    # -- bytes --------------------------------------------------------------------------

    def view(self) -> memoryview:
        """The batch's bytes as a memoryview of the underlying buffer (no copy)."""
        self._require_body()
        return memoryview(self._buffer)[self._position:self._position + self.size_in_bytes]

    def compute_crc(self) -> int:
        """CRC-32C of bytes 21..end, computed on the buffer in place."""
        self._require_body()
        start = self._position + ATTRIBUTES
        end = self._position + self.size_in_bytes
        with memoryview(self._buffer) as whole, whole[start:end] as covered:
            return crc32c(covered)

    def is_valid(self) -> bool:
        """True when the stored CRC matches the bytes."""
        return self._header[4] == self.compute_crc()

    def ensure_valid(self) -> None:
        """Raise CorruptRecordError unless the CRC matches and the counts are sane.

        Beyond the CRC: the record count is not negative, lastOffsetDelta is not negative,
        and a non-empty batch has no more records than its offset range (compaction may
        leave fewer, never more).
        """
        self._check_crc()
        count, delta = self._header[12], self._header[6]
        if count < 0:
            raise self._error(f"negative record count {count}", "record count")
        if delta < 0:
            raise self._error(f"negative lastOffsetDelta {delta}", "record count")
        if count > delta + 1:
            raise self._error(f"declares {count} records but its lastOffsetDelta {delta} "
                              f"spans only {delta + 1} offsets", "record count")

    def _check_crc(self, cause: CorruptRecordError | None = None) -> None:
        """Raise the CRC failure, if there is one (chained to ``cause``, the error of a
        decode that the damage made fail)."""
        stored, computed = self._header[4], self.compute_crc()
        if stored != computed:
            raise self._error(f"stored crc {stored:#010x} != computed crc {computed:#010x}",
                              "CRC") from cause

    def _error(self, detail: str, check: str) -> CorruptRecordError:
        return self.locate(CorruptRecordError(detail), check)

    def locate(self, error: CorruptRecordError, check: str | None = None) -> CorruptRecordError:
        """``error`` with this batch's offset, position, origin and ``check`` filled in."""
        error = error.located(offset=self._header[0], position=self._position, check=check)
        return error if self._origin is None else self._origin.locate(error)

    # -- records ------------------------------------------------------------------------

    def records(self, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES, *,
                verify_crc: bool = True) -> list[Record]:
        """Decode every record (decompressing first when needed); offsets are absolute.

        The CRC is checked first (as Kafka's consumer does, ``check.crcs``): damage is then
        reported as the CRC failure it is, and never decoded into records. A caller that has
        checked it already may pass ``verify_crc=False`` (a decode that fails still reports a
        CRC failure first). In a LogAppendTime batch every record carries the batch's
        max_timestamp. Raises CorruptRecordError when the records do not fill the batch
        exactly, and its subclass DecompressionLimitError when they would expand beyond
        ``max_decompressed_bytes``.
        """
        self._require_body()
        if verify_crc:
            self._check_crc()
        header = self._header
        count = header[12]
        base_offset = header[0]
        if count <= 0:
            if count < 0:
                raise self._error(f"negative record count {count}", "record count")
            return []
        codec = self._known_codec()
        try:
            data, start, end = self._records_section(codec, max_decompressed_bytes)
            records = decode_records(data, start, end, count, base_offset, header[7])
        except CorruptRecordError as e:
            raise self._located(e, codec) from e
        if header[5] & TIMESTAMP_TYPE_MASK:
            log_append_time = header[8]
            for record in records:
                record.timestamp = log_append_time
        return records

    def check_records(self, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> None:
        """Check, decompressing first when needed, that the records fill the batch exactly,
        are each well formed, and carry offset deltas 0, 1, 2... as a producer writes them;
        what a broker checks of every producer batch. Raises CorruptRecordError naming the
        batch, the record and the byte; cheaper than :meth:`records` (nothing is decoded in C).
        Records that would expand beyond ``max_decompressed_bytes`` raise DecompressionLimitError.
        """
        self._require_body()
        codec = self._known_codec()
        try:
            data, start, end = self._records_section(codec, max_decompressed_bytes)
            check_records(data, start, end, self._header[12])
        except CorruptRecordError as e:
            raise self._located(e, codec) from e

    def _known_codec(self) -> int:
        codec = self._header[5] & COMPRESSION_MASK
        if codec > ZSTD:
            self._check_crc()
            raise self._error(f"unknown compression codec id {codec}", "attributes")
        return codec

    def _records_section(self, codec: int, max_bytes: int) -> tuple[ByteBuffer, int, int]:
        """``(buffer, start, end)`` of the records: in the batch's own bytes, or decompressed."""
        start = self._position + HEADER_SIZE
        end = self._position + self._header[1] + LOG_OVERHEAD
        if codec == NONE:
            return self._buffer, start, end
        with memoryview(self._buffer) as whole, whole[start:end] as section:
            data = decompress(codec, section, max_bytes)
        return data, 0, len(data)

    def _located(self, error: CorruptRecordError, codec: int) -> CorruptRecordError:
        """``error`` from the records section with where this batch is; a CRC failure
        instead when the batch's bytes do not match its CRC (the damage the decode tripped
        on), so the check that failed first is the one reported."""
        self._check_crc(error)
        check = "record framing" if codec == NONE else f"record framing ({codec_name(codec)})"
        if isinstance(error, DecompressionLimitError):
            check = "decompression"
        return self.locate(error, check)

    def control_record(self) -> ControlRecord | None:
        """The control record of a control batch (None for data or empty batches)."""
        if not self._header[5] & CONTROL_MASK:
            return None
        records = self.records()
        if not records:
            return None
        try:
            return decode_control_record(records[0].key, records[0].value)
        except CorruptRecordError as e:
            self._check_crc(e)
            raise self.locate(e, "control record") from e

    def _require_body(self) -> None:
        if not self._complete:
            raise self.locate(TruncatedBatchError(
                f"read header-only; its {self.size_in_bytes} bytes are not in the buffer"),
                "size")

    def __repr__(self) -> str:
        return (
            f"RecordBatch(offsets=[{self.base_offset}, {self.last_offset}], "
            f"count={self.record_count}, size={self.size_in_bytes}, "
            f"compression={self.compression}, timestamp_type={self.timestamp_type}, "
            f"producer=({self.producer_id}, {self.producer_epoch}, {self.base_sequence}), "
            f"transactional={self.is_transactional}, control={self.is_control}, "
            f"crc={self.crc:#010x}, position={self._position})"
        )


def _check_short_header(buffer: ByteBuffer, position: int, available: int) -> None:
    """Name what is wrong with a buffer too short for a header: bad magic, bad length or a cut."""
    if available > MAGIC:
        length, _epoch, magic = _LENGTH_EPOCH_MAGIC.unpack_from(buffer, position + LENGTH)
        base_offset = _INT64.unpack_from(buffer, position)[0]
        if magic != CURRENT_MAGIC:
            raise _bad_magic(base_offset, position, magic)
        if length < MIN_BATCH_LENGTH:
            raise _short_length(base_offset, position, length)
    raise TruncatedBatchError(f"only {available} bytes; a batch header needs {HEADER_SIZE}",
                              position=position, check="size")


def _reject_header(header: tuple[int, ...], position: int) -> NoReturn:
    """Raise the error of a header that breaks the header rule (magic 2, batchLength >= 49):
    UnsupportedMagicError or CorruptRecordError naming the position and base offset. Callers
    test the rule inline (``header[3] != CURRENT_MAGIC or header[1] < MIN_BATCH_LENGTH``: one
    comparison on the hot path) and call this only when it fails."""
    if header[3] != CURRENT_MAGIC:
        raise _bad_magic(header[0], position, header[3])
    raise _short_length(header[0], position, header[1])


def _bad_magic(base_offset: int, position: int, magic: int) -> UnsupportedMagicError:
    return UnsupportedMagicError(
        f"magic {magic}; only v{CURRENT_MAGIC} record batches are supported",
        offset=base_offset, position=position, check="batch header")


def _short_length(base_offset: int, position: int, length: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"batchLength {length}, less than the {MIN_BATCH_LENGTH}-byte minimum",
        offset=base_offset, position=position, check="batch header")


def _in(origin: BatchOrigin | None, error: CorruptRecordError) -> CorruptRecordError:
    return error if origin is None else origin.locate(error)


def walk_headers(
    buffer: ByteBuffer, position: int = 0, end: int | None = None
) -> Iterator[tuple[int, tuple[int, ...]]]:
    """``(position, header)`` of every batch whose 61-byte header lies in
    ``buffer[position:end]``, in order: the one walk over batch headers in bytes (segment
    recovery, ranged remote reads, their offset checks). ``header`` is HEADER's 13 fields
    (baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
    baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount); the
    batch's size is ``header[1] + LOG_OVERHEAD``.

    Each header must keep the header rule that RecordBatch keeps (magic 2, batchLength >= 49):
    UnsupportedMagicError or CorruptRecordError otherwise, raised when the walk reaches it.
    Nothing else is checked: a batch's body may run past ``end`` (a read cut mid-batch; the
    caller compares ``position + size`` with it) and the walk stops quietly where fewer than
    61 bytes remain. No copy is made; the caller must not resize ``buffer`` during the walk.
    """
    limit = len(buffer) if end is None else min(end, len(buffer))
    unpack, header_size, overhead = HEADER.unpack_from, HEADER_SIZE, LOG_OVERHEAD
    magic, min_length = CURRENT_MAGIC, MIN_BATCH_LENGTH
    while position + header_size <= limit:
        header = unpack(buffer, position)
        if header[3] != magic or header[1] < min_length:
            _reject_header(header, position)
        yield position, header
        position += header[1] + overhead


def declared_size(buffer: ByteBuffer, position: int = 0) -> int | None:
    """The size in bytes the batch at ``position`` declares, its header kept to the header
    rule (as :func:`walk_headers`), or None when its 61-byte header is not all in ``buffer``:
    how a reader of chunks learns how much to read for a batch bigger than its chunk."""
    for _, header in walk_headers(buffer, position):
        return header[1] + LOG_OVERHEAD
    return None


def iter_batches(
    buffer: ByteBuffer, position: int = 0, end: int | None = None, *, strict: bool = False,
    origin: BatchOrigin | None = None,
) -> Iterator[RecordBatch]:
    """Walk the batches in ``buffer[position:end]`` as zero-copy RecordBatch views.

    A trailing partial batch (as in a fetch response cut at its max bytes) ends the walk
    quietly, or raises TruncatedBatchError when ``strict``. A batch with a bad magic or
    batchLength raises wherever it is. ``end`` defaults to (and is capped at) the
    buffer's length; an ``end`` short of it makes the batches hold a memoryview of the
    buffer (an mmap then cannot close while they live). ``origin`` says where the buffer
    came from: every error of the walk and of its batches names it.
    """
    if end is not None and end < len(buffer):
        buffer = memoryview(buffer)[:end]
    limit = len(buffer)
    while position < limit:
        try:
            batch = RecordBatch(buffer, position, origin=origin)
        except TruncatedBatchError:
            if strict:
                raise
            return
        yield batch
        position += batch.size_in_bytes


# --- in-place patchers -------------------------------------------------------------------


def set_base_offset(buf: ByteBuffer, position: int, offset: int) -> None:
    """Write baseOffset of the batch at ``position`` (outside the CRC: no recompute)."""
    _INT64.pack_into(buf, position + BASE_OFFSET, offset)


def set_partition_leader_epoch(buf: ByteBuffer, position: int, epoch: int) -> None:
    """Write partitionLeaderEpoch of the batch at ``position`` (outside the CRC)."""
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH, epoch)


def set_log_append_time(buf: ByteBuffer, position: int, timestamp: int) -> None:
    """Mark the batch LogAppendTime with maxTimestamp ``timestamp`` and rewrite its CRC.

    Other attribute bits are kept. Nothing is written when the batch already says so.
    """
    batch = RecordBatch(buf, position)
    if batch.timestamp_type == LOG_APPEND_TIME and batch.max_timestamp == timestamp:
        return
    _INT16.pack_into(buf, position + ATTRIBUTES, batch.attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP, timestamp)
    _UINT32.pack_into(buf, position + CRC, batch.compute_crc())
