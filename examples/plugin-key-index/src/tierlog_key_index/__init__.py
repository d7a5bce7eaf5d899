"""tierlog-key-index: a per-segment key -> latest offset index, registered as a tierlog plugin.

File format (``<base offset>.keyindex``): ``b"TLKI" | version int16=1 | count int32`` then per
entry ``keyLength int32 | key | offset int64``, written atomically when the segment flushes or
closes. Lookups are answered from memory.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from tierlog.common.atomic import atomic_write_bytes
from tierlog.errors import CorruptIndexError
from tierlog.hookspecs import hookimpl

MAGIC = b"TLKI"
_HEADER = struct.Struct(">4shi")
_KEY_LEN = struct.Struct(">i")
_OFFSET = struct.Struct(">q")


class KeyIndex:
    """The key -> latest offset map of one segment. Not thread-safe (the Log serialises)."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._latest: dict[bytes, int] = {}
        self._dirty = False
        self._error: str | None = None
        if self.path.exists():
            try:
                self._latest = _decode(self.path.read_bytes())
            except ValueError as exc:
                self._error = str(exc)

    def on_append(self, batch: Any, base_offset: int, position: int) -> None:
        if batch.is_control:
            return
        shift = base_offset - batch.base_offset
        latest = self._latest
        for record in batch.records():
            if record.key is not None:
                latest[record.key] = record.offset + shift
        self._dirty = True

    def reset(self) -> None:
        self._latest.clear()
        self._error = None
        self._dirty = True

    def lookup(self, key: bytes) -> int | None:
        return self._latest.get(key)

    def sanity_check(self) -> None:
        if self._error is not None:
            raise CorruptIndexError(f"{self.path}: {self._error}")
        for offset in self._latest.values():
            if offset < self.base_offset:
                raise CorruptIndexError(
                    f"{self.path}: offset {offset} is below the segment's base {self.base_offset}"
                )

    def flush(self) -> None:
        if self._dirty:
            atomic_write_bytes(self.path, _encode(self._latest))
            self._dirty = False

    def close(self) -> None:
        self.flush()

    def delete_if_exists(self) -> bool:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, path: Path) -> None:
        self.flush()
        if self.path.exists():
            self.path.rename(path)
        self.path = Path(path)


class KeyIndexType:
    """The ``key`` index type: only for compacted topics, kept local (not uploaded)."""

    name = "key"
    suffix = ".keyindex"
    uploaded_to_remote = False
    builtin = False

    def enabled_for(self, config: Any) -> bool:
        return "compact" in config["cleanup.policy"]

    def open(self, path: Path, base_offset: int, config: Any) -> KeyIndex:
        return KeyIndex(path, base_offset)


def _encode(latest: dict[bytes, int]) -> bytes:
    parts = [_HEADER.pack(MAGIC, 1, len(latest))]
    for key in sorted(latest):
        parts += [_KEY_LEN.pack(len(key)), key, _OFFSET.pack(latest[key])]
    return b"".join(parts)


def _decode(data: bytes) -> dict[bytes, int]:
    if len(data) < _HEADER.size:
        raise ValueError(f"{len(data)} bytes is shorter than the header")
    magic, version, count = _HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != 1 or count < 0:
        raise ValueError(f"bad header (magic {magic!r}, version {version}, count {count})")
    latest, pos = {}, _HEADER.size
    for _ in range(count):
        if pos + 4 > len(data):
            raise ValueError(f"entry at byte {pos} is cut off")
        (n,) = _KEY_LEN.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n + 8 > len(data):
            raise ValueError(f"entry at byte {pos - 4} is cut off")
        key = bytes(data[pos:pos + n])
        (latest[key],) = _OFFSET.unpack_from(data, pos + n)
        pos += n + 8
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} trailing bytes")
    return latest


@hookimpl
def tierlog_register_index_types(register) -> None:
    register(KeyIndexType())
