"""The pure-Python per-record codec of v2 record batches: the records section after the header.

It mirrors the C accelerator ``_speedups.c`` byte for byte and error for error; ``_codec``
picks one of the two.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tierlog.common.int_bounds import INT32_MAX, INT64_MAX, INT64_MIN
from tierlog.errors import CorruptRecordError
from tierlog.records.columns import Buffer as ColumnBuffer
from tierlog.records.columns import RecordColumns
from tierlog.records.record import Header, Record
from tierlog.records.varint import unsigned_varint

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["decode_records", "encode_records"]

_INT32_BITS = 32
_INT64_BITS = 64
#: Longest encodings Kafka allows: a varint (int32) and a varlong (int64).
_VARINT_MAX_BYTES = 5
_VARLONG_MAX_BYTES = 10
#: The varint of -1, written for a null key or value.
_NULL_LENGTH = b"\x01"
#: Every record's attributes byte (Kafka defines no record-level attribute).
_ATTRIBUTES = b"\x00"
#: A header count of zero.
_NO_HEADERS = b"\x00"

#: Signed value of every zigzag varint below 2**14, indexed by its raw 7-bit groups.
_ZIGZAG = tuple((raw >> 1) ^ -(raw & 1) for raw in range(1 << 14))
#: Encoded bytes of every zigzag value below 2**14 (the one- and two-byte varints).
_SMALL_VARINTS = tuple(unsigned_varint(raw) for raw in range(1 << 14))
#: Lengths below this are non-negative values found in ``_SMALL_VARINTS`` (at ``2 * length``).
_SMALL_LENGTH_LIMIT = 1 << 13


# --- decoding ---------------------------------------------------------------------------


def _corrupt(index: int, position: int, message: str) -> CorruptRecordError:
    return CorruptRecordError(f"record {index} at byte {position}: {message}")


def _check_range(position: int, end: int, size: int) -> None:
    if not 0 <= position <= end <= size:
        raise ValueError(f"records range [{position}, {end}) is outside a buffer of {size} bytes")


def _read_varint(
    buf: bytes | memoryview, pos: int, limit: int, max_bytes: int, index: int, shift: int
) -> tuple[int, int]:
    """Decode the zigzag varint at ``pos`` (any length) bounded by ``limit``: (value, next pos)."""
    raw = 0
    for n in range(max_bytes):
        if pos + n >= limit:
            raise _corrupt(index, pos + shift, "varint runs past the end of its data")
        b = buf[pos + n]
        raw |= (b & 0x7F) << (7 * n)
        if b < 0x80:
            if raw >> (_INT32_BITS if max_bytes == _VARINT_MAX_BYTES else _INT64_BITS):
                raise _corrupt(index, pos + shift, "varint overflows its integer type")
            return (raw >> 1) ^ -(raw & 1), pos + n + 1
    raise _corrupt(index, pos + shift, f"varint longer than {max_bytes} bytes")


def _read_bytes(
    buf: bytes, pos: int, rec_end: int, index: int, shift: int, what: str
) -> tuple[bytes | None, int]:
    """Decode a ``length varint | bytes`` field (length -1 is null): (bytes, next pos)."""
    length, nxt = _read_varint(buf, pos, rec_end, _VARINT_MAX_BYTES, index, shift)
    if length < 0:
        if length == -1:
            return None, nxt
        raise _corrupt(index, nxt + shift, f"{what} length {length} is below -1")
    if nxt + length > rec_end:
        raise _corrupt(index, nxt + shift, f"{what} length {length} runs past the record end")
    return buf[nxt : nxt + length], nxt + length


def _read_headers(
    buf: bytes, pos: int, rec_end: int, count: int, index: int, shift: int
) -> tuple[tuple[Header, ...], int]:
    """Decode ``count`` headers of one record: (headers, next pos)."""
    if count < 0 or count > (rec_end - pos) // 2:
        raise _corrupt(index, pos + shift, f"header count {count} does not fit the record")
    headers = []
    for _ in range(count):
        key_start = pos
        raw_key, pos = _read_bytes(buf, pos, rec_end, index, shift, "header key")
        if raw_key is None:
            raise _corrupt(index, key_start + shift, "header key is null")
        try:
            key = raw_key.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _corrupt(index, key_start + shift, f"header key is not UTF-8 ({exc})") from exc
        value, pos = _read_bytes(buf, pos, rec_end, index, shift, "header value")
        headers.append((key, value))
    return tuple(headers), pos


def decode_records(  # noqa: C901 - its loop is inlined for speed (the docstring says)
    data: Buffer, position: int, end: int, count: int, base_offset: int, base_timestamp: int
) -> list[Record]:
    """Decode ``count`` uncompressed v2 records from ``data[position:end]``.

    ``data`` is any buffer (bytes, bytearray, memoryview, mmap). Raises CorruptRecordError
    naming the record index and absolute byte position on any framing error.

    One pass of the loop decodes one record with its varints inline: split into a function
    per record (and one for its key, value and headers) it decodes 10-25% slower, measured.
    """
    if type(data) is bytes:
        buf, shift = data, 0
        _check_range(position, end, len(buf))
    else:
        # Release the view at once: an exported mmap cannot be closed.
        with memoryview(data) as whole, whole.cast("B") as view:
            _check_range(position, end, len(view))
            # One copy of the records section: slicing bytes is the fastest way to make values.
            buf = bytes(view[position:end])
        shift = position
        position, end = 0, end - position
    if count < 0:
        raise _corrupt(0, position + shift, f"negative record count {count}")

    zigzag = _ZIGZAG
    new = object.__new__
    record_type = Record
    read_varint = _read_varint
    varint_max = _VARINT_MAX_BYTES
    records: list[Record] = []
    append = records.append
    pos = start = position
    i = 0
    try:
        for i in range(count):
            if pos >= end:
                raise _corrupt(i, pos + shift, f"only {i} of {count} records fit the data")
            start = pos
            # Varints of one or two bytes (three for the deltas) are decoded inline. A read
            # past the record end is caught below: ``pos`` never moves back, and the record
            # must end exactly at ``rec_end``.
            b = buf[pos]
            if b < 0x80:
                length = zigzag[b]
                pos += 1
            elif buf[pos + 1] < 0x80:
                length = zigzag[(b & 0x7F) | (buf[pos + 1] << 7)]
                pos += 2
            else:
                length, pos = read_varint(buf, pos, end, varint_max, i, shift)
            rec_end = pos + length
            if rec_end > end:
                raise _corrupt(i, start + shift, f"record length {length} runs past the data end")
            if length < 0:
                raise _corrupt(i, start + shift, f"negative record length {length}")
            pos += 1  # attributes: Kafka defines no record-level attribute
            b = buf[pos]
            if b < 0x80:
                ts_delta = zigzag[b]
                pos += 1
            elif buf[pos + 1] < 0x80:
                ts_delta = zigzag[(b & 0x7F) | (buf[pos + 1] << 7)]
                pos += 2
            elif buf[pos + 2] < 0x80:
                raw = (b & 0x7F) | ((buf[pos + 1] & 0x7F) << 7) | (buf[pos + 2] << 14)
                ts_delta = (raw >> 1) ^ -(raw & 1)
                pos += 3
            else:
                ts_delta, pos = read_varint(buf, pos, rec_end, _VARLONG_MAX_BYTES, i, shift)
            b = buf[pos]
            if b < 0x80:
                offset_delta = zigzag[b]
                pos += 1
            elif buf[pos + 1] < 0x80:
                offset_delta = zigzag[(b & 0x7F) | (buf[pos + 1] << 7)]
                pos += 2
            elif buf[pos + 2] < 0x80:
                raw = (b & 0x7F) | ((buf[pos + 1] & 0x7F) << 7) | (buf[pos + 2] << 14)
                offset_delta = (raw >> 1) ^ -(raw & 1)
                pos += 3
            else:
                offset_delta, pos = read_varint(buf, pos, rec_end, varint_max, i, shift)
            b = buf[pos]
            if b < 0x80:
                n = zigzag[b]
                pos += 1
            else:
                n, pos = read_varint(buf, pos, rec_end, varint_max, i, shift)
            if n >= 0:
                nxt = pos + n
                if nxt > rec_end:
                    raise _corrupt(i, pos + shift, f"key length {n} runs past the record end")
                key = buf[pos:nxt]
                pos = nxt
            elif n == -1:
                key = None
            else:
                raise _corrupt(i, pos + shift, f"key length {n} is below -1")
            b = buf[pos]
            if b < 0x80:
                n = zigzag[b]
                pos += 1
            elif buf[pos + 1] < 0x80:
                n = zigzag[(b & 0x7F) | (buf[pos + 1] << 7)]
                pos += 2
            else:
                n, pos = read_varint(buf, pos, rec_end, varint_max, i, shift)
            if n >= 0:
                nxt = pos + n
                if nxt > rec_end:
                    raise _corrupt(i, pos + shift, f"value length {n} runs past the record end")
                value = buf[pos:nxt]
                pos = nxt
            elif n == -1:
                value = None
            else:
                raise _corrupt(i, pos + shift, f"value length {n} is below -1")
            b = buf[pos]
            if b == 0:
                headers: tuple[Header, ...] = ()
                pos += 1
            else:
                n, pos = read_varint(buf, pos, rec_end, varint_max, i, shift)
                headers, pos = _read_headers(buf, pos, rec_end, n, i, shift)
            if pos != rec_end:
                raise _corrupt(
                    i, start + shift,
                    f"record length {length} differs from the {pos - rec_end + length} bytes read",
                )
            record = new(record_type)
            record.offset = base_offset + offset_delta
            record.timestamp = base_timestamp + ts_delta
            record.key = key
            record.value = value
            record.headers = headers
            append(record)
    except IndexError:
        raise _corrupt(i, start + shift, "record runs past the end of the data") from None
    if pos != end:
        raise _corrupt(count, pos + shift, f"{end - pos} bytes remain after {count} records")
    return records


def check_records(data: Buffer, position: int, end: int, count: int) -> None:
    """Check that ``data[position:end]`` holds exactly ``count`` well-formed uncompressed v2
    records whose offset deltas are 0, 1, 2... (as a producer writes them). Raises
    CorruptRecordError as :func:`decode_records` would; the C twin checks without decoding."""
    for i, record in enumerate(decode_records(data, position, end, count, 0, 0)):
        if record.offset != i:
            start = _record_start(data, position, i)
            raise _corrupt(i, start, f"offset delta {record.offset} where a producer writes {i}")


def _record_start(data: Buffer, position: int, index: int) -> int:
    """Where record ``index`` starts, in records already known to be well formed."""
    with memoryview(data) as whole, whole.cast("B") as view:
        for i in range(index):
            length, after = _read_varint(view, position, len(view), _VARINT_MAX_BYTES, i, 0)
            position = after + length
    return position


# --- encoding ---------------------------------------------------------------------------


def _varint_bytes(value: int, bits: int, index: int, what: str) -> bytes:
    """Zigzag-encode a value that must fit a signed ``bits``-bit integer."""
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise ValueError(f"record {index}: {what} {value} does not fit int{bits}")
    return unsigned_varint((value << 1) ^ (value >> (bits - 1)))


def _as_bytes(value: object, index: int, what: str) -> bytes | bytearray:
    """Accept bytes, bytearray or memoryview (as its raw bytes); reject anything else."""
    if isinstance(value, (bytes, bytearray)):
        return value
    if isinstance(value, memoryview):
        return value.tobytes()
    raise TypeError(
        f"record {index}: {what} must be bytes, bytearray, memoryview or None, "
        f"not {type(value).__name__}"
    )


def _check_int64(value: object, what: str) -> int:
    """``value`` if it is an int that fits int64, else TypeError/ValueError naming ``what``."""
    if not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{what} {value} does not fit int64")
    return value


def _encode_headers(headers: Iterable[Header], index: int) -> list[bytes | bytearray]:
    """The wire pieces of a record's headers, starting with the header count."""
    pieces: list[bytes | bytearray] = []
    count = 0
    for header in headers:
        if type(header) not in (tuple, list) or len(header) != 2:
            raise TypeError(f"record {index}: header {header!r} is not a (key, value) pair")
        key, value = header
        if not isinstance(key, str):
            raise TypeError(f"record {index}: header key must be str, not {type(key).__name__}")
        raw_key = key.encode("utf-8")
        pieces.append(_varint_bytes(len(raw_key), _INT32_BITS, index, "header key length"))
        pieces.append(raw_key)
        if value is None:
            pieces.append(_NULL_LENGTH)
        else:
            raw_value = _as_bytes(value, index, "header value")
            pieces.append(_varint_bytes(len(raw_value), _INT32_BITS, index,
                                        "header value length"))
            pieces.append(raw_value)
        count += 1
    pieces.insert(0, _varint_bytes(count, _INT32_BITS, index, "header count"))
    return pieces


def encode_records(
    records: Sequence[Record], base_timestamp: int, now_ms: int, base_offset: int | None = None
) -> tuple[bytes, int]:
    """Encode the records section of a batch: (bytes, max timestamp or -1 when empty).

    offsetDelta is each record's index, or ``record.offset - base_offset`` when
    ``base_offset`` is given (a rewritten batch keeps its records' offsets); a None timestamp
    becomes ``now_ms``; timestampDelta is relative to ``base_timestamp``. Raises
    TypeError/ValueError on a bad field.
    """
    base_timestamp = _check_int64(base_timestamp, "base_timestamp")
    now_ms = _check_int64(now_ms, "now_ms")
    if base_offset is not None:
        base_offset = _check_int64(base_offset, "base_offset")
    small = _SMALL_VARINTS
    small_limit = _SMALL_LENGTH_LIMIT
    varint_bytes = _varint_bytes
    as_bytes = _as_bytes
    attributes = _ATTRIBUTES
    no_headers = _NO_HEADERS
    null = _NULL_LENGTH
    empty = b""
    int64_min = INT64_MIN
    int64_max = INT64_MAX
    out: list[bytes | bytearray] = []
    extend = out.extend
    max_timestamp = -1
    for i, record in enumerate(records):
        offset_delta = i if base_offset is None else _offset_delta(record, i, base_offset)
        timestamp = record.timestamp
        if timestamp is None:
            timestamp = now_ms
        elif type(timestamp) is not int or not int64_min <= timestamp <= int64_max:
            timestamp = _check_int64(timestamp, f"record {i}: timestamp")
        if timestamp > max_timestamp:  # noqa: PLR1730 - a max() call per record costs ~5%
            max_timestamp = timestamp
        delta = timestamp - base_timestamp
        raw = (delta << 1) ^ (delta >> 63)
        try:
            head = attributes + small[raw] + small[offset_delta << 1]
        except IndexError:
            head = (
                attributes
                + varint_bytes(delta, _INT64_BITS, i, "timestamp delta")
                + varint_bytes(offset_delta, _INT32_BITS, i, "offset delta")
            )
        key: bytes | bytearray | None = record.key
        if key is None:
            key, key_len = empty, null
        else:
            if type(key) is not bytes:
                key = as_bytes(key, i, "key")
            n = len(key)
            key_len = (
                small[n << 1] if n < small_limit else varint_bytes(n, _INT32_BITS, i, "key length")
            )
        value: bytes | bytearray | None = record.value
        if value is None:
            value, value_len = empty, null
        else:
            if type(value) is not bytes:
                value = as_bytes(value, i, "value")
            n = len(value)
            value_len = (
                small[n << 1]
                if n < small_limit
                else varint_bytes(n, _INT32_BITS, i, "value length")
            )
        headers = record.headers
        if headers:
            tail = _encode_headers(headers, i)
            size = sum(map(len, tail))
        else:
            tail = None
            size = 1
        size += len(head) + len(key_len) + len(key) + len(value_len) + len(value)
        if size < small_limit:
            size_varint = small[size << 1]
        else:
            size_varint = varint_bytes(size, _INT32_BITS, i, "record size")
        extend((size_varint, head, key_len, key, value_len, value))
        if tail is None:
            out.append(no_headers)
        else:
            extend(tail)
    return b"".join(out), max_timestamp


def _offset_delta(record: Record, index: int, base_offset: int) -> int:
    """``record.offset - base_offset``, checked to fit a batch's 4-byte offset delta."""
    offset = _check_int64(record.offset, f"record {index}: offset")
    delta = offset - base_offset
    if not 0 <= delta <= INT32_MAX:
        raise ValueError(f"record {index}: offset {offset} is not within 2^31-1 after base "
                         f"offset {base_offset}")
    return delta


# --- encoding from Arrow columns --------------------------------------------------------------


def _valid(bitmap: ColumnBuffer, offset: int, i: int) -> bool:
    if bitmap is None:
        return True
    bit = offset + i
    return bool(memoryview(bitmap)[bit >> 3] >> (bit & 7) & 1)


def _element(valid: ColumnBuffer, offsets: ColumnBuffer, data: ColumnBuffer, offset: int,
             i: int, index: int, what: str) -> bytes | None:
    """Element ``i`` of an Arrow binary column: its bytes, or None when null."""
    if offsets is None or not _valid(valid, offset, i):
        return None
    view = memoryview(offsets).cast("B").cast("i")
    begin, end = view[offset + i], view[offset + i + 1]
    size = len(memoryview(data)) if data is not None else 0
    if begin < 0 or end < begin or end > size:
        raise ValueError(f"record {index}: {what} offsets {begin}..{end} outside 0..{size}")
    return bytes(memoryview(data)[begin:end])


def encode_columns(columns: RecordColumns, start: int, end: int, base_timestamp: int
                   ) -> tuple[bytes, int]:
    """encode_records for rows ``start..end-1`` of a RecordColumns: the rows become Records
    and the one record framing above (encode_records) encodes them."""
    c = columns
    if start < 0 or end < start:
        raise ValueError(f"rows {start}..{end} are not a range")
    stamps = memoryview(c.timestamps).cast("B").cast("q")
    records = []
    for row in range(start, end):
        index = row - start
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if c.header_offsets is not None and _valid(c.header_valid, c.header_offset, row):
            lists = memoryview(c.header_offsets).cast("B").cast("i")
            pairs = []
            for h in range(lists[c.header_offset + row], lists[c.header_offset + row + 1]):
                key = _element(c.header_key_valid, c.header_key_offsets, c.header_key_data,
                               c.header_key_offset, h, index, "header key")
                if key is None:
                    raise ValueError(f"record {index}: a header key is null")
                pairs.append((key.decode("utf-8"), _element(
                    c.header_value_valid, c.header_value_offsets, c.header_value_data,
                    c.header_value_offset, h, index, "header value")))
            headers = tuple(pairs)
        records.append(Record(
            _element(c.key_valid, c.key_offsets, c.key_data, c.key_offset, row, index, "key"),
            _element(c.value_valid, c.value_offsets, c.value_data, c.value_offset, row, index,
                     "value"),
            headers, stamps[c.timestamp_offset + row]))
    return encode_records(records, base_timestamp, base_timestamp)
