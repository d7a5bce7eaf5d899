"""A test plugin that replaces the built-in ``offset`` index type with a subclass of
OffsetIndex counting its appends and lookups (a plugin replacing a built-in)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tierlog.common import filenames
from tierlog.hookspecs import hookimpl
from tierlog.index import OffsetIndex


class CountingOffsetIndex(OffsetIndex):
    """An OffsetIndex that counts, class-wide, the entries appended and the lookups."""

    appends = 0
    lookups = 0

    def append(self, offset: int, position: int) -> None:
        type(self).appends += 1
        super().append(offset, position)

    def lookup(self, target_offset: int) -> Any:
        type(self).lookups += 1
        return super().lookup(target_offset)


class CountingOffsetIndexType:
    """Registered under the built-in's name and suffix, so it replaces it."""

    name = "offset"
    suffix = filenames.INDEX_SUFFIX
    uploaded_to_remote = True
    builtin = False

    def enabled_for(self, config: Any) -> bool:
        return True

    def open(self, path: Path, base_offset: int, config: Any, *,
             max_index_size: int | None = None) -> CountingOffsetIndex:
        size = config["segment.index.bytes"] if max_index_size is None else max_index_size
        return CountingOffsetIndex(path, base_offset, size)


class CountingIndexPlugin:
    @hookimpl
    def tierlog_register_index_types(self, register):
        register(CountingOffsetIndexType())
