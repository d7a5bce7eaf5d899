"""Segment index types as plugins: the protocol an index implementation follows, and the
built-in offset, time and transaction indexes registered through ``tierlog_register_index_types``.

The segment serves the built-in types natively (they are on the append hot path); an extra
index type is opened per segment, fed every appended batch, and rebuilt on recovery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tierlog import filenames
from tierlog.hookspecs import hookimpl


@runtime_checkable
class SegmentIndex(Protocol):
    """One segment's instance of an index type. Not thread-safe: the Log serialises writers."""

    path: Path

    def on_append(self, batch: Any, base_offset: int, position: int) -> None:
        """Feed one batch just written at ``position``; its first offset is ``base_offset``
        (``batch.base_offset`` may still hold the producer's value). Every batch a segment
        gets comes through here: the Log's appends, the cleaner's output, recovery."""

    def reset(self) -> None:
        """Forget every entry: recovery is about to feed every batch again."""

    def lookup(self, key: Any) -> Any:
        """Answer a query; what ``key`` and the answer are is up to the index type."""

    def truncate_to(self, offset: int) -> None:
        """Drop what refers to offsets >= ``offset``."""

    def sanity_check(self) -> None:
        """Raise ``CorruptIndexError`` if the file is damaged (it is then rebuilt)."""

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def delete_if_exists(self) -> bool: ...

    def rename_to(self, path: Path) -> None:
        """Move the file (if written yet) to ``path`` and follow it: called with the
        segment's other files (``LogSegment.change_file_suffixes``) by the cleaner's swap
        and by deletion, so the index must be complete on disk under the new name."""


@runtime_checkable
class SegmentIndexType(Protocol):
    """An index implementation: its name, file suffix, and how to open it for a segment."""

    name: str
    suffix: str
    uploaded_to_remote: bool
    builtin: bool

    def enabled_for(self, config: Any) -> bool:
        """Whether segments of a log with this LogConfig carry this index."""

    def open(self, path: Path, base_offset: int, config: Any) -> SegmentIndex:
        """Open (or create) the index file of the segment at ``base_offset``."""


@dataclass(frozen=True, slots=True)
class BuiltinIndexType:
    """A built-in index (offset, time, transaction): the segment opens and feeds it natively;
    the registry entry says which file it is and whether it travels to the remote tier."""

    name: str
    suffix: str
    uploaded_to_remote: bool = True
    builtin: bool = True

    def enabled_for(self, config: Any) -> bool:
        return True

    def open(self, path: Path, base_offset: int, config: Any) -> SegmentIndex:
        raise NotImplementedError(f"the {self.name} index is opened by LogSegment itself")


OFFSET_INDEX = BuiltinIndexType("offset", filenames.INDEX_SUFFIX)
TIME_INDEX = BuiltinIndexType("time", filenames.TIME_INDEX_SUFFIX)
TRANSACTION_INDEX = BuiltinIndexType("transaction", filenames.TXN_INDEX_SUFFIX)


@hookimpl
def tierlog_register_index_types(register: Callable[[Any], None]) -> None:
    for index_type in (OFFSET_INDEX, TIME_INDEX, TRANSACTION_INDEX):
        register(index_type)
