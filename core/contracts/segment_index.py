"""The segment index contract: ``SegmentIndexType``, what a plugin registers through
``tierlog_register_index_types``, and ``SegmentIndex``, the per-segment index it opens.

It names only the record batch an index is fed and the log's configuration, so it sits below
the index room, beside the hook specs that name it. The built-in types and the choice of a
log's types from the registry are :mod:`tierlog.index.index_types`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tierlog.config import LogConfig
    from tierlog.records.batch import RecordBatch

__all__ = ["SegmentIndex", "SegmentIndexType"]


@runtime_checkable
class SegmentIndex(Protocol):
    """One segment's instance of an index type. Not thread-safe: the Log serialises writers."""

    path: Path

    def on_append(self, batch: RecordBatch, base_offset: int, position: int) -> None:
        """Feed one batch just written at ``position``; its first offset is ``base_offset``
        (``batch.base_offset`` may still hold the producer's value). Every batch a segment
        gets comes through here: the Log's appends, the cleaner's output, recovery."""

    def reset(self) -> None:
        """Forget every entry: recovery is about to feed every batch again."""

    def lookup(self, key: Any) -> Any:  # noqa: ANN401 - each index type has its own
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
    """An index implementation: its name, file suffix, and how to open it for a segment.
    The four facts are read-only (class attributes or a frozen dataclass's fields do)."""

    @property
    def name(self) -> str: ...

    @property
    def suffix(self) -> str: ...

    @property
    def uploaded_to_remote(self) -> bool: ...

    @property
    def builtin(self) -> bool: ...

    def enabled_for(self, config: LogConfig) -> bool:
        """Whether segments of a log with this LogConfig carry this index."""

    def open(self, path: Path, base_offset: int, config: LogConfig) -> SegmentIndex:
        """Open (or create) the index file of the segment at ``base_offset``."""
