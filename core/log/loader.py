"""LogLoader: turns a partition directory on disk into loaded segments, recovering what a crash
left.

Finishes or discards leftover transient files, opens every segment, sanity-checks and rebuilds
indexes, re-validates unflushed segments (truncating at the first invalid byte) and reports it all.
A read-only load (a reader beside a live owner, or after a crash) checks the same segments but
changes no file: damage is reported and left, reads stop before it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tierlog.common import filenames
from tierlog.common.clock import system_time_ms
from tierlog.errors import (
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    LogDirectoryError,
)
from tierlog.log.leader_epoch import LeaderEpochFileCache
from tierlog.log.segment import LogSegment
from tierlog.log.segment_read_only import trust_indexes
from tierlog.log.segment_recovery import RecoveryResult, SegmentDamage
from tierlog.log.segments import LogSegments
from tierlog.producer.append import REPLICATION, ProducerBatchRun
from tierlog.producer.state import ProducerStateManager
from tierlog.records.batch import RecordBatch
from tierlog.records.file_records import FileRecords

log = logging.getLogger(__name__)

_INDEX_SUFFIXES = (filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX, filenames.TXN_INDEX_SUFFIX)


@dataclass(slots=True)
class RecoveryReport:
    """What opening a log did: reported through logging and kept on the Log as ``recovery``."""

    segments_loaded: int = 0
    segments_recovered: int = 0
    """Segments re-validated batch by batch (unclean shutdown, or a bad or missing index)."""
    bytes_truncated: int = 0
    """Invalid bytes cut from ``.log`` files plus the bytes of segments deleted after them."""
    segments_deleted: list[int] = field(default_factory=list)
    indexes_rebuilt: list[str] = field(default_factory=list)
    """The ``.log`` names whose offset, time and transaction indexes were rebuilt."""
    files_removed: list[str] = field(default_factory=list)
    swaps_completed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    snapshots_from_remote: list[int] = field(default_factory=list)
    """Producer snapshots taken from the remote tier (a tiered log's local log start)."""
    damage: list[SegmentDamage] = field(default_factory=list)
    """Invalid bytes a read-only load found and left (recovery would have cut them)."""
    clean_shutdown: bool = True
    read_only: bool = False
    """A read-only load: ``segments_recovered`` counts segments only checked, and damage is
    left in place (nothing is recovered)."""
    log_start_offset: int = 0
    log_end_offset: int = 0
    recovery_point: int = 0
    """The recovery point after loading: only a flush moves it past the old one."""

    @property
    def changed_anything(self) -> bool:
        return self.repaired_anything or bool(self.files_removed)

    @property
    def dropped_anything(self) -> bool:
        """Whether loading cut or deleted bytes (records may be lost): what a recovery
        warns about by name."""
        return bool(self.bytes_truncated or self.segments_deleted)

    @property
    def repaired_anything(self) -> bool:
        """Whether loading had to recover, cut, delete or rebuild anything (leftover
        ``.deleted``/``.tmp`` files of a clean shutdown do not count)."""
        return bool(
            self.segments_recovered or self.bytes_truncated or self.segments_deleted
            or self.indexes_rebuilt or self.swaps_completed
        )

    def summary(self) -> str:
        if self.read_only:
            return (f"{self.segments_loaded} segments loaded, {self.segments_recovered} "
                    f"checked (read-only, nothing changed), {len(self.damage)} with invalid "
                    f"bytes left in place; offsets [{self.log_start_offset}, "
                    f"{self.log_end_offset})")
        return (
            f"{self.segments_loaded} segments loaded, {self.segments_recovered} recovered, "
            f"{self.bytes_truncated} bytes truncated, {len(self.segments_deleted)} segments "
            f"deleted, {len(self.indexes_rebuilt)} indexes rebuilt, "
            f"{len(self.files_removed)} leftover files removed, "
            f"{len(self.swaps_completed)} swaps completed; offsets [{self.log_start_offset}, "
            f"{self.log_end_offset}), recovery point {self.recovery_point}"
        )


SegmentFactory = Callable[[int, str], LogSegment]
#: The producer snapshot bytes a remote tier holds at an offset, or None.
RemoteSnapshot = Callable[[int], "bytes | None"]


class LogLoader:
    """Loads the segments of one partition directory; see :meth:`load` (Kafka's LogLoader).

    Fills the given ProducerStateManager and LeaderEpochFileCache to match the loaded
    segments. Not thread-safe: one loader per directory, used once.
    """

    def __init__(
        self,
        directory: Path,
        open_segment: SegmentFactory,
        *,
        recovery_point: int,
        had_clean_shutdown: bool,
        log_start_offset: int = 0,
        producer_state: ProducerStateManager | None = None,
        leader_epoch_cache: LeaderEpochFileCache | None = None,
        time_ms: Callable[[], int] | None = None,
        tiered: bool = False,
        remote_snapshot: RemoteSnapshot | None = None,
        read_only: bool = False,
        index_interval_bytes: int = 4096,
    ) -> None:
        self.directory = directory
        #: Change no file (see :meth:`load`); ``index_interval_bytes`` is then the scan's.
        self.read_only = read_only
        self.index_interval_bytes = index_interval_bytes
        self.open_segment = open_segment
        self.recovery_point = recovery_point
        self.had_clean_shutdown = had_clean_shutdown
        self.log_start_offset = max(log_start_offset, 0)
        #: Offsets below the local segments may live in a remote tier (remote.storage.enable).
        self.tiered = tiered
        self.remote_snapshot = remote_snapshot
        self._time_ms = time_ms or system_time_ms
        self.producer_state = producer_state or ProducerStateManager(directory,
                                                                     time_ms=self._time_ms)
        self.leader_epoch_cache = leader_epoch_cache
        self.report = RecoveryReport(clean_shutdown=had_clean_shutdown, read_only=read_only)
        self._recovered: dict[int, RecoveryResult] = {}  # by base offset

    def load(self) -> LogSegments:
        """Load, check and (if needed) recover every segment; returns them in offset order,
        never empty. Afterwards ``report`` holds the log start, end and recovery offsets, the
        producer state is rebuilt up to the log end and the epoch cache agrees with the log."""
        if not self.directory.is_dir():
            raise LogDirectoryError(f"{self.directory} is not a directory")
        if self.read_only:
            return self._load_read_only()
        self._remove_transient_files()
        if self.tiered:
            self._keep_snapshot_at_local_start()
        segments = self._open_segments()
        if not self.had_clean_shutdown:
            self._recover(segments)
        end = segments.active.read_next_offset() if segments else None
        if end is not None and end < self.log_start_offset:
            log.warning("%s: deleting every segment: the log end offset %d is below the log "
                        "start offset %d", self.directory, end, self.log_start_offset)
            for segment in segments.values():
                self._delete_segment(segments, segment)
            if self.leader_epoch_cache is not None:
                self.leader_epoch_cache.clear_and_flush()
            self.producer_state.truncate_fully_and_start_at(self.log_start_offset)
            end = None
        if not segments:
            segments.add(self.open_segment(self.log_start_offset, ""))
        if end is None:
            end = segments.active.read_next_offset()
        # Kafka: only a flush moves the recovery point; after a crash it stays where it was.
        recovery_point = end if self.had_clean_shutdown else min(self.recovery_point, end)
        log_start = self._log_start(segments)
        if self.leader_epoch_cache is not None:
            self.leader_epoch_cache.truncate_from_end(end)
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.producer_state.remove_stray_snapshots(segments.base_offsets())
        rebuild_producer_state(self.producer_state, segments, log_start, end,
                               self._time_ms(), reload_from_clean_shutdown=self.had_clean_shutdown)
        self.report.log_start_offset = log_start
        self.report.log_end_offset = end
        self.report.recovery_point = recovery_point
        return segments

    def _load_read_only(self) -> LogSegments:
        """:meth:`load` without changing a file: leftovers stay, no index is rebuilt, no
        snapshot or checkpoint is written. The segments recovery would re-validate (from the
        one holding the recovery point, unless the shutdown was clean) and those whose
        indexes cannot be trusted are scanned in memory (LogSegment.check_read_only): the
        last one now, the others when first read. Invalid bytes at the very end of the last
        segment are a write in flight (not read), anywhere else damage (the last segment's
        in ``report.damage``; left in place, reads stop before it). The producer state is
        replayed in memory up to the first damage."""
        bases = sorted(filenames.offset_from_filename(p.name) for p in self.directory.iterdir()
                       if p.name.endswith(filenames.LOG_SUFFIX))
        if not bases:
            raise LogDirectoryError(f"{self.directory} holds no segment: a read-only open "
                                    f"cannot create one")
        segments = LogSegments()
        first_unflushed = self._first_unflushed(bases)
        for base in bases:
            try:
                segment = self.open_segment(base, "")
            except FileNotFoundError:  # the live owner's retention removed it meanwhile
                log.info("%s: segment %d went while it was opened: not read", self.directory,
                         base)
                continue
            segments.add(segment)
            self.report.segments_loaded += 1
            problem = trust_indexes(segment)
            if not self._has_indexes(base):
                problem = "missing index"
            if problem is not None:
                log.info("%s: segment %d is read through a scan: %s", self.directory, base,
                         problem)
            if base == bases[-1]:  # its end is the log end: checked now
                self._note_damage(segment.check_read_only(last=True))
            elif base >= first_unflushed or problem is not None:
                segment.unchecked = True  # by the first read of it: a describe reads none
            if base == bases[-1] or problem is not None:
                segment.load_max_timestamp()
        if not segments:
            raise LogDirectoryError(f"{self.directory}: every segment went while it was "
                                    f"opened (deleted by its owner?)")
        end = self._read_only_end(segments)
        log_start = self._log_start(segments)
        replay_end = min([end, *(d.offset for d in self.report.damage)])
        try:
            rebuild_producer_state(self.producer_state, segments, log_start,
                                   max(replay_end, log_start), self._time_ms(), snapshot=False)
        except CorruptRecordError as exc:
            # Damage the scans did not cover (below the recovery point): the producer state,
            # and so the last stable offset, may lag; reads report the damage itself.
            problem = f"producer state replayed only in part: {exc}"
            log.warning("%s: %s", self.directory, problem)
            self.report.errors.append(problem)
        self.report.log_start_offset = log_start
        self.report.log_end_offset = end
        self.report.recovery_point = min(self.recovery_point, end)
        return segments

    def _note_damage(self, damage: SegmentDamage | None) -> None:
        self.report.segments_recovered += 1
        if damage is not None:
            self.report.damage.append(damage)
            self.report.errors.append(str(damage.error()))

    def _read_only_end(self, segments: LogSegments) -> int:
        """The log end offset a read-only load reports: past a damaged last batch, so that a
        reader reaches the damage and reports it instead of stopping short in silence."""
        active = segments.active
        try:
            end = active.read_next_offset()
        except CorruptRecordError:
            end = active.base_offset
        if active.damage is not None:
            end = max(end, active.damage.offset + 1)
        return end

    def _log_start(self, segments: LogSegments) -> int:
        """The log start offset after loading (Kafka's newLogStartOffset): the checkpointed one
        for a tiered log, whose older offsets live in the tier below its local segments (so
        producer state loads from the snapshot at the local log start, which stays); otherwise
        at least the first segment's base offset."""
        if self.tiered:
            return self.log_start_offset
        first = segments.first
        assert first is not None, "load() opens a segment when the directory has none"
        return max(self.log_start_offset, first.base_offset)

    def _keep_snapshot_at_local_start(self) -> None:
        """A tiered log replays producer state from a snapshot at or below its local log start:
        the batches below it are only in the tier. If no such snapshot is left, take the one
        the tier holds at the local log start (copied with the segment that ends just below
        it); failing that, report that the producers seen only below it are forgotten."""
        bases = [filenames.offset_from_filename(p.name) for p in self.directory.iterdir()
                 if p.name.endswith(filenames.LOG_SUFFIX)]
        local_start = min(bases, default=None)
        if local_start is None or local_start <= self.log_start_offset:
            return
        if self.producer_state.snapshot_at_or_below(local_start) is not None:
            return
        data = self.remote_snapshot(local_start) if self.remote_snapshot is not None else None
        if data is not None:
            try:
                self.producer_state.restore_snapshot(local_start, data,
                                                     f"the remote tier (offset {local_start})")
                self.report.snapshots_from_remote.append(local_start)
                return
            except CorruptSnapshotError as exc:
                log.warning("%s: %s", self.directory, exc)
        problem = (f"no producer snapshot at or below the local log start offset {local_start} "
                   f"(locally or in the remote tier): producers whose last batches are below it "
                   f"are forgotten")
        log.warning("%s: %s", self.directory, problem)
        self.report.errors.append(problem)

    # -- leftovers -------------------------------------------------------------------

    def _remove_transient_files(self) -> None:
        """Kafka's rules: delete ``.deleted``, ``.tmp`` and ``.cleaned`` files and the
        ``.swap`` files at or above the lowest ``.cleaned`` offset (an unfinished split); then
        delete the files that the remaining swapped-in segments replace and rename the swaps."""
        swaps: list[Path] = []
        cleaned: list[Path] = []
        for path in sorted(self.directory.iterdir()):
            name = path.name
            if not path.is_file():
                continue
            if name.endswith((filenames.DELETED_SUFFIX, filenames.TMP_SUFFIX)):
                self._remove(path)
            elif name.endswith(filenames.CLEANED_SUFFIX):
                cleaned.append(path)
            elif name.endswith(filenames.SWAP_SUFFIX):
                swaps.append(path)
        min_cleaned = min((_offset_of(p) for p in cleaned), default=None)
        valid_swaps = []
        for swap in swaps:
            if min_cleaned is not None and _offset_of(swap) >= min_cleaned:
                self._remove(swap)
            else:
                valid_swaps.append(swap)
        for path in cleaned:
            self._remove(path)
        self._complete_swaps(valid_swaps)

    def _complete_swaps(self, swaps: list[Path]) -> None:
        """A ``.swap`` is a finished replacement: the segment files (and snapshots) whose
        offsets it covers go, then every swap file is renamed into place."""
        ranges = []
        for swap in swaps:
            if swap.name[: -len(filenames.SWAP_SUFFIX)].endswith(filenames.LOG_SUFFIX):
                ranges.append((_offset_of(swap), _next_offset_of(swap)))
        if ranges:
            low = min(r[0] for r in ranges)
            high = max(r[1] for r in ranges)
            for path in sorted(self.directory.iterdir()):
                if not path.is_file() or path.name.endswith(filenames.SWAP_SUFFIX):
                    continue
                try:
                    offset = filenames.offset_from_filename(path.name)
                except LogDirectoryError:
                    continue  # a checkpoint or metadata file
                if low <= offset < high:
                    log.info("%s: deleting %s, replaced by a swapped-in segment",
                             self.directory, path.name)
                    self._remove(path)
        for swap in swaps:
            target = swap.with_name(swap.name[: -len(filenames.SWAP_SUFFIX)])
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
        """Open every segment in offset order; one with a missing or insane index is
        recovered at once (with the producer state of the segments before it)."""
        segments = LogSegments()
        log_offsets = set()
        for path in self.directory.iterdir():
            if path.name.endswith(filenames.LOG_SUFFIX):
                log_offsets.add(filenames.offset_from_filename(path.name))
        for path in list(self.directory.iterdir()):
            name = path.name
            if (name.endswith(_INDEX_SUFFIXES)
                    and filenames.offset_from_filename(name) not in log_offsets):
                log.warning("%s: removing orphaned index %s", self.directory, name)
                self._remove(path)
        ordered = sorted(log_offsets)
        first_unflushed = self._first_unflushed(ordered)
        for base in ordered:
            missing_index = not self._has_indexes(base)
            segment = self.open_segment(base, "")
            self.report.segments_loaded += 1
            # From the first unflushed segment on, the recovery pass re-validates every segment
            # in offset order, a missing index included. Rebuilding one here would replay
            # producer state through earlier segments not yet recovered, such as a preallocated
            # one whose zero tail a crash in the middle of a roll left behind.
            if base < first_unflushed:
                if missing_index or segment.missing_extra_indexes:
                    self._rebuild(segments, segment, "missing index")
                else:
                    problem = _index_problem(segment)
                    if problem is not None:
                        self._rebuild(segments, segment, problem)
            segments.add(segment)
        return segments

    def _has_indexes(self, base: int) -> bool:
        """Whether the segment at ``base`` has its offset and time index files."""
        prefix = filenames.filename_prefix_from_offset(base)
        return all((self.directory / (prefix + suffix)).exists()
                   for suffix in (filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX))

    def _first_unflushed(self, bases: list[int]) -> int:
        """Base offset of the first segment that recovery re-validates: the one holding the
        recovery point (Kafka recovers ``segments.values(recoveryPoint, ...)``, which starts
        at the floor segment), and the active one in any case."""
        if self.had_clean_shutdown or not bases:
            return 1 << 63
        floor = [b for b in bases if b <= self.recovery_point]
        return min(floor[-1] if floor else bases[0], bases[-1])

    def _rebuild(self, segments: LogSegments, segment: LogSegment, reason: str) -> None:
        log.warning("%s: rebuilding indexes of segment %d: %s", self.directory,
                    segment.base_offset, reason)
        self._note_recovered(segment, self.recover_segment(segments, segment))

    def _note_recovered(self, segment: LogSegment, result: RecoveryResult) -> None:
        self._recovered[segment.base_offset] = result
        self.report.segments_recovered += 1
        if segment.path.name not in self.report.indexes_rebuilt:
            self.report.indexes_rebuilt.append(segment.path.name)
        if result.truncated_bytes:
            self.report.bytes_truncated += result.truncated_bytes
            self.report.errors.append(f"{segment.path.name}: {result.error}")
            log.warning("%s: truncated %d invalid bytes from segment %d", self.directory,
                        result.truncated_bytes, segment.base_offset)

    def recover_segment(self, segments: LogSegments, segment: LogSegment) -> RecoveryResult:
        """Re-validate one segment and rebuild its indexes, transaction index included (Kafka's
        recoverSegment): producer state is rebuilt up to the segment's base offset from the
        snapshots and ``segments`` before it, replayed through the segment, and snapshotted at
        its end so the next segment starts from there."""
        psm = ProducerStateManager(
            self.directory, self.producer_state.max_producer_id_expiration_ms, time_ms=self._time_ms
        )
        rebuild_producer_state(psm, segments, self.log_start_offset, segment.base_offset,
                               self._time_ms(), snapshot=False)
        cache = self.leader_epoch_cache
        result = segment.rebuild_indexes(_ProducerStateRecovery(psm, segment),
                                         None if cache is None else cache.assign_if_newer)
        psm.update_map_end_offset(result.next_offset)
        psm.take_snapshot()
        return result

    def _recover(self, segments: LogSegments) -> None:
        """Re-validate every segment from the one holding the recovery point; after the first
        invalid byte, truncate there and delete every later segment."""
        first = self._first_unflushed(segments.base_offsets())
        unflushed = [s for s in segments if s.base_offset >= first]
        for i, segment in enumerate(unflushed):
            result = self._recovered.get(segment.base_offset)  # for a missing or bad index
            if result is None:
                log.debug("%s: recovering segment %d", self.directory, segment.base_offset)
                result = self.recover_segment(segments, segment)
                self._note_recovered(segment, result)
            if result.truncated_bytes:
                for later in unflushed[i + 1:]:
                    self._delete_segment(segments, later)
                break

    def _delete_segment(self, segments: LogSegments, segment: LogSegment) -> None:
        segments.remove(segment.base_offset)
        self.report.bytes_truncated += segment.size
        segment.delete()
        snapshot = filenames.snapshot_file(self.directory, segment.base_offset)
        if snapshot.exists():
            self._remove(snapshot)
        self.report.segments_deleted.append(segment.base_offset)
        log.warning("%s: deleted segment %d after an earlier corruption", self.directory,
                    segment.base_offset)


class _ProducerStateRecovery:
    """The batch visitor of a segment's recovery: replays producer batches into a producer
    state manager one by one (a ProducerBatchRun of one batch) and appends the aborted
    transactions to the segment's transaction index (Kafka's LogSegment.updateProducerState)."""

    __slots__ = ("_psm", "_segment")

    def __init__(self, psm: ProducerStateManager, segment: LogSegment) -> None:
        self._psm = psm
        self._segment = segment

    def __call__(self, batch: RecordBatch) -> None:
        run = ProducerBatchRun(self._psm, REPLICATION)
        run.add(batch)
        run.apply(self._segment.append_aborted_txn)
        self._psm.update_map_end_offset(batch.last_offset + 1)


def rebuild_producer_state(
    psm: ProducerStateManager,
    segments: LogSegments,
    log_start_offset: int,
    last_offset: int,
    now_ms: int,
    *,
    reload_from_clean_shutdown: bool = False,
    snapshot: bool = True,
) -> None:
    """Bring ``psm`` to ``last_offset`` (exclusive): load the newest valid snapshot at or
    below it and replay the batches after it (Kafka's UnifiedLog.rebuildProducerState).

    Snapshots above ``last_offset`` or at or below the log start are deleted. After a clean
    shutdown with no snapshot at all the log holds no producer state worth a full scan (Kafka's
    upgrade rule): empty snapshots are written instead. With ``snapshot``, snapshots are taken
    at the last two segment bases passed by the replay and at ``last_offset``.
    """
    bases = segments.base_offsets()
    to_snapshot = {last_offset}
    if bases:
        to_snapshot.update(bases[-2:])
    if reload_from_clean_shutdown and psm.latest_snapshot_offset is None:
        for offset in sorted(o for o in to_snapshot if o <= last_offset):
            psm.update_map_end_offset(offset)
            psm.take_snapshot()
        return
    psm.truncate_and_reload(log_start_offset, last_offset, now_ms)
    if last_offset > psm.map_end_offset:
        for segment in segments.values(psm.map_end_offset, last_offset):
            start = max(segment.base_offset, psm.map_end_offset, log_start_offset)
            psm.update_map_end_offset(start)
            if snapshot and segment.base_offset in to_snapshot:
                psm.take_snapshot()
            first = segment.translate_offset(start)
            if first is None:
                continue
            stop = segment.translate_offset(last_offset)
            end = stop.position if stop is not None else segment.size
            # Kafka's loadProducersFromRecords: each segment's batches as one replicated run.
            run = ProducerBatchRun(psm, REPLICATION)
            for _, batch in segment.log.batches_from(first.position, end):
                if batch.last_offset >= start:
                    run.add(batch)
            run.apply()
    psm.update_map_end_offset(last_offset)
    if snapshot:
        psm.take_snapshot()


def _index_problem(segment: LogSegment) -> str | None:
    """Why the indexes of a closed (rolled, or cleanly shut down) segment cannot be trusted:
    their sanity checks, an offset index pointing past the end of the ``.log``, or a time index
    that does not end at the segment's maximum timestamp; None when they can."""
    try:
        segment.offset_index.sanity_check()
        segment.time_index.sanity_check()
        segment.txn_index.sanity_check()
        for extra in segment.extra_indexes.values():
            extra.sanity_check()
    except CorruptIndexError as exc:
        return str(exc)
    index = segment.offset_index
    tail = 0
    if index.entries:
        tail = index.lookup(index.last_offset).position
        if tail >= segment.size:
            return (f"offset index {index.path} points at position {tail}, beyond the "
                    f"{segment.size} bytes of {segment.path.name}")
    return _time_index_problem(segment, tail)


def _time_index_problem(segment: LogSegment, tail: int) -> str | None:
    """A closed segment's time index ends at its maximum timestamp (a roll or a close appends
    that entry; Kafka's final entry), so no batch may carry a later timestamp. Only the batches
    from ``tail`` (the last offset index entry's position) on are read: the ones before it
    were indexed with their running maximum, so an empty or cut-back time index shows there
    too. An empty time index is right only for a segment without timestamps. Invalid bytes
    in that tail are a problem too (the segment is then recovered)."""
    last = segment.time_index.last_entry
    try:
        for _, header in segment.log.headers_from(tail):
            if header.max_timestamp > last.timestamp:
                held = (f"ends at timestamp {last.timestamp}"
                        if segment.time_index.entries else "is empty")
                return (f"time index {segment.time_index.path} {held}, but the batch at offset "
                        f"{header.base_offset} of {segment.path.name} has timestamp "
                        f"{header.max_timestamp}")
    except CorruptRecordError as exc:
        # Invalid bytes after the last indexed batch: e.g. the zero tail of a preallocated
        # segment a crash left untrimmed mid-roll. Recovering the segment cuts them.
        return f"{segment.path.name} has invalid bytes after its last indexed batch: {exc}"
    return None


def _offset_of(path: Path) -> int:
    return filenames.offset_from_filename(path.name)


def _next_offset_of(log_path: Path) -> int:
    """The offset after the last whole batch of a ``.log`` file (its base offset if empty)."""
    records = FileRecords.open(log_path, mutable=False)
    last = None
    try:
        for _, header in records.headers_from(0):
            last = header
    except CorruptRecordError as exc:
        log.warning("%s: %s; the swap ends before it", log_path, exc)
    finally:
        records.close()
    return last.next_offset if last is not None else _offset_of(log_path)
