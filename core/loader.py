"""LogLoader: turns a partition directory on disk into loaded segments, recovering what a crash left.

Finishes or discards leftover transient files, opens every segment, sanity-checks and rebuilds
indexes, re-validates unflushed segments (truncating at the first invalid byte) and reports it all.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tierlog import filenames
from tierlog.errors import CorruptIndexError, LogDirectoryError
from tierlog.records.batch import RecordBatch
from tierlog.segment import LogSegment
from tierlog.segments import LogSegments

log = logging.getLogger(__name__)

_INDEX_SUFFIXES = (filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX, filenames.TXN_INDEX_SUFFIX)


@dataclass(slots=True)
class RecoveryReport:
    """What opening a log did: reported through logging and kept on the Log as ``recovery``."""

    segments_loaded: int = 0
    segments_recovered: int = 0
    bytes_truncated: int = 0
    segments_deleted: list[int] = field(default_factory=list)
    indexes_rebuilt: list[str] = field(default_factory=list)
    files_removed: list[str] = field(default_factory=list)
    swaps_completed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    clean_shutdown: bool = True

    @property
    def changed_anything(self) -> bool:
        return bool(
            self.segments_recovered or self.bytes_truncated or self.segments_deleted
            or self.indexes_rebuilt or self.files_removed or self.swaps_completed
        )

    def summary(self) -> str:
        return (
            f"{self.segments_loaded} segments loaded, {self.segments_recovered} recovered, "
            f"{self.bytes_truncated} bytes truncated, {len(self.segments_deleted)} segments "
            f"deleted, {len(self.indexes_rebuilt)} indexes rebuilt, "
            f"{len(self.files_removed)} leftover files removed"
        )


SegmentFactory = Callable[[int, str], LogSegment]
BatchVisitor = Callable[[RecordBatch], None]


class LogLoader:
    """Loads the segments of one partition directory; see :meth:`load`."""

    def __init__(
        self,
        directory: Path,
        open_segment: SegmentFactory,
        *,
        recovery_point: int,
        had_clean_shutdown: bool,
        on_recovered_batch: Callable[[LogSegment], BatchVisitor | None] | None = None,
    ) -> None:
        self.directory = directory
        self.open_segment = open_segment
        self.recovery_point = recovery_point
        self.had_clean_shutdown = had_clean_shutdown
        self.on_recovered_batch = on_recovered_batch
        self.report = RecoveryReport(clean_shutdown=had_clean_shutdown)

    def load(self) -> LogSegments:
        """Load, check and (if needed) recover every segment; returns them in offset order."""
        if not self.directory.is_dir():
            raise LogDirectoryError(f"{self.directory} is not a directory")
        self._remove_transient_files()
        segments = self._open_segments()
        if not self.had_clean_shutdown:
            self._recover(segments)
        return segments

    # -- leftovers -------------------------------------------------------------------

    def _remove_transient_files(self) -> None:
        """Discard ``.tmp``, ``.cleaned``, ``.deleted``; complete ``.swap`` files (Kafka's rules)."""
        swaps: list[Path] = []
        for path in sorted(self.directory.iterdir()):
            name = path.name
            if not path.is_file():
                continue
            if name.endswith((filenames.TMP_SUFFIX, filenames.CLEANED_SUFFIX,
                              filenames.DELETED_SUFFIX)):
                self._remove(path)
            elif name.endswith(filenames.SWAP_SUFFIX):
                swaps.append(path)
        for swap in swaps:
            self._complete_swap(swap)

    def _complete_swap(self, swap: Path) -> None:
        """A ``.swap`` is a finished replacement: drop what it replaces, then rename it in."""
        target = swap.with_name(swap.name[: -len(filenames.SWAP_SUFFIX)])
        if target.name.endswith(filenames.LOG_SUFFIX):
            swap_base = filenames.offset_from_filename(target.name)
            swap_end = _next_offset_of(swap)
            # Segments wholly covered by the swapped-in one are replaced by it.
            for log_path in self.directory.glob(f"*{filenames.LOG_SUFFIX}"):
                base = filenames.offset_from_filename(log_path.name)
                if swap_base <= base < swap_end and log_path != target:
                    for suffix in (filenames.LOG_SUFFIX, *_INDEX_SUFFIXES):
                        self._remove(log_path.with_name(filenames.filename_prefix_from_offset(base) + suffix))
            # The swapped .log's indexes are rebuilt from its data.
            for suffix in _INDEX_SUFFIXES:
                self._remove(target.with_name(target.name[: -len(filenames.LOG_SUFFIX)] + suffix))
        os.replace(swap, target)
        self.report.swaps_completed.append(target.name)
        log.info("%s: completed interrupted swap of %s", self.directory, target.name)

    def _remove(self, path: Path) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            return
        self.report.files_removed.append(path.name)

    # -- segments --------------------------------------------------------------------

    def _open_segments(self) -> LogSegments:
        segments = LogSegments()
        log_offsets = set()
        for path in self.directory.iterdir():
            if path.name.endswith(filenames.LOG_SUFFIX):
                log_offsets.add(filenames.offset_from_filename(path.name))
        for path in list(self.directory.iterdir()):
            name = path.name
            if name.endswith(_INDEX_SUFFIXES):
                if filenames.offset_from_filename(name) not in log_offsets:
                    log.warning("%s: removing orphaned index %s", self.directory, name)
                    self._remove(path)
        for base in sorted(log_offsets):
            missing_index = not all(
                (self.directory / (filenames.filename_prefix_from_offset(base) + s)).exists()
                for s in (filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX)
            )
            segment = self.open_segment(base, "")
            segments.add(segment)
            self.report.segments_loaded += 1
            if missing_index:
                self._rebuild(segment, "missing index")
            elif self.had_clean_shutdown or base < self.recovery_point:
                self._sanity_check(segment)
        return segments

    def _sanity_check(self, segment: LogSegment) -> None:
        try:
            segment.offset_index.sanity_check()
            segment.time_index.sanity_check()
            segment.txn_index.sanity_check()
        except CorruptIndexError as exc:
            self._rebuild(segment, str(exc))

    def _rebuild(self, segment: LogSegment, reason: str) -> None:
        log.warning("%s: rebuilding indexes of segment %d: %s", self.directory,
                    segment.base_offset, reason)
        result = segment.rebuild_indexes(self._visitor(segment))
        self.report.indexes_rebuilt.append(segment.path.name)
        if result.truncated_bytes:
            self.report.bytes_truncated += result.truncated_bytes
            self.report.errors.append(f"{segment.path.name}: {result.error}")

    def _visitor(self, segment: LogSegment) -> BatchVisitor | None:
        return self.on_recovered_batch(segment) if self.on_recovered_batch else None

    def _recover(self, segments: LogSegments) -> None:
        """Re-validate every segment at or above the recovery point; cut at the first bad byte."""
        unflushed = [s for s in segments if s.base_offset >= self.recovery_point
                     or s is segments.active]
        for i, segment in enumerate(unflushed):
            log.info("%s: recovering segment %d", self.directory, segment.base_offset)
            result = segment.rebuild_indexes(self._visitor(segment))
            self.report.segments_recovered += 1
            if segment.path.name not in self.report.indexes_rebuilt:
                self.report.indexes_rebuilt.append(segment.path.name)
            if result.truncated_bytes:
                self.report.bytes_truncated += result.truncated_bytes
                self.report.errors.append(f"{segment.path.name}: {result.error}")
                log.warning("%s: truncated %d invalid bytes from segment %d", self.directory,
                            result.truncated_bytes, segment.base_offset)
                for later in unflushed[i + 1:]:
                    self._delete_segment(segments, later)
                break

    def _delete_segment(self, segments: LogSegments, segment: LogSegment) -> None:
        segments.remove(segment.base_offset)
        self.report.bytes_truncated += segment.size
        segment.delete()
        self.report.segments_deleted.append(segment.base_offset)
        log.warning("%s: deleted segment %d after an earlier corruption", self.directory,
                    segment.base_offset)


def _next_offset_of(log_path: Path) -> int:
    """The offset after the last batch of a ``.log`` file (its base offset if empty)."""
    from tierlog.records.file_records import FileRecords

    records = FileRecords.open(log_path, mutable=False)
    try:
        last = None
        for _, header in records.headers_from(0):
            last = header
    finally:
        records.close()
    return last.next_offset if last is not None else filenames.offset_from_filename(log_path.name)
