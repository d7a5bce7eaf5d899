"""Kafka's field encoding for the coordinators' internal records (the one home of it).

``__consumer_offsets`` and ``__transaction_state`` hold records whose keys and values are
Kafka "data" messages: a big-endian int16 version, then the fields of that version. Versions
below a schema's first flexible version use int16-length strings, int32-length bytes and
int32-count arrays; flexible versions use unsigned-varint lengths plus one (compact) and end
every struct with tagged fields. :class:`Writer` and :class:`Reader` are those primitives;
the record codecs (:mod:`tierlog.server.coordinator.group.offsets_topic_records`,
:mod:`tierlog.server.coordinator.txn.txn_log_records`) describe their fields with them. A short or
malformed record raises CorruptRecordError naming what was being read.
"""

from __future__ import annotations

import struct

from tierlog.errors import CorruptRecordError
from tierlog.records.varint import unsigned_varint

_I8, _I16, _I32, _I64 = (struct.Struct(f) for f in (">b", ">h", ">i", ">q"))


class Writer:
    """Builds one key or value; ``flexible`` selects the compact encodings."""

    __slots__ = ("_parts", "flexible")

    def __init__(self, version: int, *, flexible: bool = False) -> None:
        self.flexible = flexible
        self._parts: list[bytes] = [_I16.pack(version)]

    def int8(self, value: int) -> None:
        self._parts.append(_I8.pack(value))

    def int16(self, value: int) -> None:
        self._parts.append(_I16.pack(value))

    def int32(self, value: int) -> None:
        self._parts.append(_I32.pack(value))

    def int64(self, value: int) -> None:
        self._parts.append(_I64.pack(value))

    def _uvarint(self, value: int) -> None:
        self._parts.append(unsigned_varint(value))

    def length(self, count: int | None, *, wide: bool) -> None:
        """A length or count prefix (None: null); ``wide`` is int32 (bytes, arrays) rather
        than int16 (strings) in the non-flexible encoding."""
        if self.flexible:
            self._uvarint(0 if count is None else count + 1)
        elif wide:
            self.int32(-1 if count is None else count)
        else:
            self.int16(-1 if count is None else count)

    def string(self, value: str | None) -> None:
        data = None if value is None else value.encode()
        self.length(None if data is None else len(data), wide=False)
        if data:
            self._parts.append(data)

    def bytes_(self, value: bytes | None) -> None:
        self.length(None if value is None else len(value), wide=True)
        if value:
            self._parts.append(bytes(value))

    def array(self, count: int | None) -> None:
        self.length(count, wide=True)

    def tagged_fields(self, fields: dict[int, bytes] | None = None) -> None:
        """The tagged-field section of a flexible struct (nothing when not flexible)."""
        if not self.flexible:
            return
        fields = fields or {}
        self._uvarint(len(fields))
        for tag in sorted(fields):
            self._uvarint(tag)
            self._uvarint(len(fields[tag]))
            self._parts.append(fields[tag])

    def finish(self) -> bytes:
        return b"".join(self._parts)


class Reader:
    """Reads one key or value written as :class:`Writer` writes it."""

    __slots__ = ("_buf", "_pos", "flexible", "version", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self._buf = memoryview(data)
        self._pos = 0
        self.what = what
        self.flexible = False
        self.version = self.int16()

    def _take(self, n: int) -> memoryview:
        end = self._pos + n
        if n < 0 or end > len(self._buf):
            raise CorruptRecordError(
                f"{self.what} (version {getattr(self, 'version', '?')}) is truncated: "
                f"{n} bytes wanted at position {self._pos} of {len(self._buf)}")
        view = self._buf[self._pos:end]
        self._pos = end
        return view

    def int8(self) -> int:
        return int(_I8.unpack(self._take(1))[0])

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def _uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise CorruptRecordError(f"{self.what}: a varint longer than 5 bytes")

    def length(self, *, wide: bool) -> int | None:
        if self.flexible:
            n = self._uvarint()
            return None if n == 0 else n - 1
        n = self.int32() if wide else self.int16()
        if n < -1:
            raise CorruptRecordError(f"{self.what}: negative length {n}")
        return None if n == -1 else n

    def string(self) -> str | None:
        n = self.length(wide=False)
        if n is None:
            return None
        try:
            return bytes(self._take(n)).decode()
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"{self.what}: a string is not UTF-8: {exc}") from None

    def required_string(self, field: str) -> str:
        value = self.string()
        if value is None:
            raise CorruptRecordError(f"{self.what}: {field} is null")
        return value

    def bytes_(self) -> bytes | None:
        n = self.length(wide=True)
        return None if n is None else bytes(self._take(n))

    def array(self) -> int | None:
        return self.length(wide=True)

    def tagged_fields(self) -> dict[int, bytes]:
        if not self.flexible:
            return {}
        fields: dict[int, bytes] = {}
        for _ in range(self._uvarint()):
            tag = self._uvarint()
            fields[tag] = bytes(self._take(self._uvarint()))
        return fields

    def end(self) -> None:
        """Check nothing is left over (a value of a version this reader misunderstood)."""
        if self._pos != len(self._buf):
            raise CorruptRecordError(f"{self.what} (version {self.version}) has "
                                     f"{len(self._buf) - self._pos} trailing bytes")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` of ``text`` (over UTF-16 code units, as a signed int32)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, partitions: int) -> int:
    """The internal-topic partition of a group id or transactional id, as Kafka computes it:
    ``Utils.abs(key.hashCode()) % partitions`` (Utils.abs maps MIN_VALUE to 0)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
