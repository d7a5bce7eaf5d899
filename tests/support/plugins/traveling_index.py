"""A test plugin index type that travels to the remote tier: per segment, key -> latest
offset, kept in memory and written (atomically, as JSON) when the segment flushes or closes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tierlog.common.atomic import atomic_write_bytes
from tierlog.errors import CorruptIndexError
from tierlog.hookspecs import hookimpl

NAME = "latest-key"
SUFFIX = ".latestkey"


class LatestKeyIndex:
    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._latest: dict[str, int] = {}
        self._dirty = False
        self._error: str | None = None
        if self.path.exists():
            try:
                self._latest = json.loads(self.path.read_bytes() or b"{}")
            except ValueError as exc:
                self._error = str(exc)

    def on_append(self, batch: Any, base_offset: int, position: int) -> None:
        if batch.is_control:
            return
        shift = base_offset - batch.base_offset
        for record in batch.records():
            if record.key is not None:
                self._latest[record.key.decode()] = record.offset + shift
        self._dirty = True

    def reset(self) -> None:
        self._latest.clear()
        self._error = None
        self._dirty = True

    def lookup(self, key: bytes) -> int | None:
        return self._latest.get(key.decode())

    def truncate_to(self, offset: int) -> None:
        self._latest = {k: o for k, o in self._latest.items() if o < offset}
        self._dirty = True

    def sanity_check(self) -> None:
        if self._error is not None:
            raise CorruptIndexError(f"{self.path}: {self._error}")

    def flush(self) -> None:
        if self._dirty:
            atomic_write_bytes(self.path, json.dumps(self._latest, sort_keys=True).encode())
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


class LatestKeyIndexType:
    name = NAME
    suffix = SUFFIX
    uploaded_to_remote = True
    builtin = False

    def enabled_for(self, config: Any) -> bool:
        return True

    def open(self, path: Path, base_offset: int, config: Any) -> LatestKeyIndex:
        return LatestKeyIndex(path, base_offset)


class TravelingIndexPlugin:
    @hookimpl
    def tierlog_register_index_types(self, register):
        register(LatestKeyIndexType())
