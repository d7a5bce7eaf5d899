"""Idempotent and transactional producer state (Kafka's ProducerStateManager): the map of
producers after the last append, open transactions by first offset for the last stable offset,
expiry, and ``<offset>.snapshot`` files (format in :mod:`tierlog.producer.snapshot`).

One producer's state and one append's validation are in :mod:`tierlog.producer.append`.
"""

from __future__ import annotations

import logging
import time
import types
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from tierlog.common import filenames
from tierlog.common.clock import system_time_ms
from tierlog.errors import CorruptSnapshotError, LogDirectoryError
from tierlog.producer.append import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    NO_PRODUCER_ID,
    BatchMetadata,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateEntry,
    TxnMetadata,
)
from tierlog.producer.snapshot import decode_snapshot, read_snapshot, write_snapshot

log = logging.getLogger(__name__)

__all__ = ["ProducerStateManager"]


class ProducerStateManager:
    """Maps producer ids to their state after the last append, and open transactions by first
    offset; snapshots the map to ``<map end offset, 20 digits>.snapshot`` (format in
    ``producer_snapshot``).

    Producers expire after ``max_producer_id_expiration_ms`` without a write, unless they
    have a transaction open. Not thread-safe: the owning Log calls it under its lock.
    """

    def __init__(
        self,
        log_dir: str | Path,
        max_producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        *,
        time_ms: Callable[[], int] | None = None,
        read_only: bool = False,
    ) -> None:
        self.log_dir = Path(log_dir)
        #: A read-only open's manager changes no file: it takes no snapshot and a snapshot it
        #: drops is only forgotten, not deleted.
        self.read_only = read_only
        self.max_producer_id_expiration_ms = max_producer_id_expiration_ms
        self._time_ms = time_ms or system_time_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing_txns: dict[int, TxnMetadata] = {}  # keyed by first offset
        self._unreplicated_txns: dict[int, TxnMetadata] = {}  # completed, marker above the HW
        self._snapshots: dict[int, Path] = self._scan_snapshots()
        self._last_map_offset = 0
        self._last_snap_offset = 0

    # -- producers -----------------------------------------------------------------------

    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        """A read-only view of the producers by id."""
        return types.MappingProxyType(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def find_duplicate_batch(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The batch already appended with this producer, epoch and sequence range (among the
        producer's last ``NUM_BATCHES_TO_RETAIN``), or None."""
        entry = self._producers.get(producer_id)
        return None if entry is None else entry.find_duplicate_batch(epoch, first_seq, last_seq)

    def prepare_update(self, producer_id: int, origin: str) -> ProducerAppendInfo:
        """Start validating an append of ``producer_id`` (``origin``: one of APPEND_ORIGINS)."""
        current = self._producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(producer_id, current, origin, self.log_dir.name)

    def update(self, append_info: ProducerAppendInfo) -> None:
        """Apply a validated append's producer state and the transactions it started."""
        if append_info.producer_id == NO_PRODUCER_ID:
            raise ValueError(f"invalid producer id {NO_PRODUCER_ID} passed to update in "
                             f"{self.log_dir}")
        updated = append_info.to_entry()
        current = self._producers.get(append_info.producer_id)
        if current is not None:
            current.update(updated)
        else:
            self._producers[append_info.producer_id] = updated
        for txn in append_info.started_transactions:
            self._ongoing_txns[txn.first_offset] = txn

    def remove_expired_producers(self, now_ms: int | None = None) -> None:
        """Forget producers idle for ``max_producer_id_expiration_ms`` with no open transaction."""
        now = self._time_ms() if now_ms is None else now_ms
        expired = [pid for pid, e in self._producers.items() if self._is_expired(now, e)]
        for pid in expired:
            del self._producers[pid]

    def _is_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return (entry.current_txn_first_offset is None
                and now_ms - entry.last_timestamp >= self.max_producer_id_expiration_ms)

    # -- offsets and transactions --------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        """The offset up to which (exclusive) the log has been applied to this state."""
        return self._last_map_offset

    def update_map_end_offset(self, offset: int) -> None:
        self._last_map_offset = offset

    def first_undecided_offset(self) -> int | None:
        """The first offset of the earliest transaction not yet committed or aborted."""
        return min(self._ongoing_txns, default=None)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest transaction that is open or whose marker is not
        yet below the high watermark (see ``on_high_watermark_updated``), or None."""
        return min(self._ongoing_txns.keys() | self._unreplicated_txns.keys(), default=None)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is now below the high watermark."""
        if self._unreplicated_txns:  # runs per append on a LogManager log: usually none
            self._remove_unreplicated_txns(high_watermark)

    def _remove_unreplicated_txns(self, offset: int) -> None:
        for first in [f for f, t in self._unreplicated_txns.items()
                      if t.last_offset is not None and t.last_offset < offset]:
            del self._unreplicated_txns[first]

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is done (for its aborted-transaction index entry): the
        first offset of the earliest other producer's open transaction, else just after the
        marker. Call before ``complete_txn``."""
        pid = completed.producer_id
        others = [f for f, t in self._ongoing_txns.items() if t.producer_id != pid]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Mark a transaction complete; it stays unstable until the high watermark passes it."""
        txn = self._ongoing_txns.pop(completed.first_offset, None)
        if txn is None:
            raise ValueError(f"cannot complete transaction {completed} in {self.log_dir}: "
                             f"it was not started")
        txn.last_offset = completed.last_offset
        self._unreplicated_txns[completed.first_offset] = txn

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Drop completed transactions before the new log start; the map starts there at least."""
        self._remove_unreplicated_txns(log_start_offset)
        self._last_map_offset = max(self._last_map_offset, log_start_offset)
        latest = self.latest_snapshot_offset
        self._last_snap_offset = log_start_offset if latest is None else latest

    # -- snapshots -----------------------------------------------------------------------

    def _scan_snapshots(self) -> dict[int, Path]:
        found: dict[int, Path] = {}
        if not self.log_dir.is_dir():
            return found
        for path in self.log_dir.iterdir():
            if not path.name.endswith(filenames.SNAPSHOT_SUFFIX) or not path.is_file():
                continue
            try:
                found[filenames.offset_from_filename(path.name)] = path
            except LogDirectoryError:
                log.warning("ignoring %s: not named by a 20-digit offset", path)
        return found

    def snapshot_files(self) -> list[Path]:
        """The snapshot files known to this manager, oldest first."""
        return [self._snapshots[o] for o in sorted(self._snapshots)]

    def fetch_snapshot(self, offset: int) -> Path | None:
        """The snapshot file taken at exactly ``offset``, if any."""
        return self._snapshots.get(offset)

    @property
    def latest_snapshot_offset(self) -> int | None:
        return max(self._snapshots, default=None)

    @property
    def oldest_snapshot_offset(self) -> int | None:
        return min(self._snapshots, default=None)

    def take_snapshot(self) -> Path | None:
        """Write a snapshot at the map end offset unless one was already taken there (or
        later); returns the new file, or None."""
        if self._last_map_offset <= self._last_snap_offset or self.read_only:
            return None
        path = filenames.snapshot_file(self.log_dir, self._last_map_offset)
        start = time.monotonic()
        write_snapshot(path, (self._producers[pid].to_snapshot_entry()
                              for pid in sorted(self._producers)))
        log.info("wrote producer snapshot %s with %d producer ids in %.1f ms", path,
                 len(self._producers), (time.monotonic() - start) * 1000)
        self._snapshots[self._last_map_offset] = path
        self._last_snap_offset = self._last_map_offset
        return path

    def delete_snapshots_before(self, offset: int, *, keep_floor: bool = False) -> None:
        """Delete the snapshot files taken below ``offset``; with ``keep_floor`` the newest one
        at or below ``offset`` stays: the one a replay from ``offset`` starts from (a tiered
        log's local log start, below which nothing can be replayed locally)."""
        doomed = [o for o in self._snapshots if o < offset]
        if keep_floor and offset not in self._snapshots and doomed:
            doomed.remove(max(doomed))
        for snap in doomed:
            self._remove_and_delete_snapshot(snap)

    def snapshot_at_or_below(self, offset: int) -> int | None:
        """The offset of the newest snapshot file at or below ``offset`` (the directory is
        rescanned: loading may have removed files), or None."""
        self._snapshots = self._scan_snapshots()
        return max((o for o in self._snapshots if o <= offset), default=None)

    def restore_snapshot(self, offset: int, data: bytes, source: str) -> Path:
        """Write snapshot bytes taken elsewhere (``source``, e.g. a remote tier's object) as the
        snapshot at ``offset``, atomically; CorruptSnapshotError (naming ``source``) if they
        are not a valid snapshot, and then nothing is written."""
        entries = decode_snapshot(data, source)
        path = filenames.snapshot_file(self.log_dir, offset)
        write_snapshot(path, entries)
        self._snapshots[offset] = path
        log.info("restored producer snapshot %s (%d producer ids) from %s", path, len(entries),
                 source)
        return path

    def remove_stray_snapshots(self, segment_base_offsets: Collection[int]) -> None:
        """Rescan the directory and delete snapshots that match no segment base offset, except
        the newest stray one when it lies above every segment (a clean shutdown's snapshot)."""
        self._snapshots = self._scan_snapshots()
        bases = set(segment_base_offsets)
        strays = sorted(o for o in self._snapshots if o not in bases)
        keep = strays[-1] if strays and (not bases or strays[-1] > max(bases)) else None
        for stray in strays:
            if stray != keep:
                self._remove_and_delete_snapshot(stray)

    def _remove_and_delete_snapshot(self, offset: int) -> None:
        path = self._snapshots.pop(offset, None)
        if path is not None and not self.read_only:
            path.unlink(missing_ok=True)
            log.info("deleted producer state snapshot %s", path)

    def _load_from_snapshot(self, log_start_offset: int, current_time_ms: int) -> None:
        """Load the newest readable snapshot; corrupt (or vanished) ones are dropped in turn."""
        for offset in sorted(self._snapshots, reverse=True):
            path = self._snapshots[offset]
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, FileNotFoundError) as e:
                log.warning("failed to load producer snapshot %s: %s", path, e)
                self._remove_and_delete_snapshot(offset)
                continue
            log.info("loaded producer state from snapshot %s", path)
            for snapshot_entry in entries:
                entry = ProducerStateEntry.from_snapshot_entry(snapshot_entry)
                if self._is_expired(current_time_ms, entry):
                    continue
                self._producers[entry.producer_id] = entry
                if entry.current_txn_first_offset is not None:
                    self._ongoing_txns[entry.current_txn_first_offset] = TxnMetadata(
                        entry.producer_id, entry.current_txn_first_offset)
            self._last_snap_offset = self._last_map_offset = offset
            return
        self._last_snap_offset = self._last_map_offset = log_start_offset

    def truncate_and_reload(
        self, log_start_offset: int, log_end_offset: int, current_time_ms: int
    ) -> None:
        """Delete snapshots outside ``(log_start_offset, log_end_offset]`` and, unless the map
        already ends at ``log_end_offset``, reload from the newest valid snapshot left (or
        start empty at ``log_start_offset``); the caller replays the log from ``map_end_offset``.
        """
        for offset in [o for o in self._snapshots
                       if o > log_end_offset or o <= log_start_offset]:
            self._remove_and_delete_snapshot(offset)
        if log_end_offset != self._last_map_offset:
            self._producers.clear()
            self._ongoing_txns.clear()
            # The log end is assumed to be at or below the high watermark.
            self._unreplicated_txns.clear()
            self._load_from_snapshot(log_start_offset, current_time_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def reload_from_snapshots(self, log_start_offset: int, current_time_ms: int) -> None:
        """Forget the producers in memory and load the newest valid snapshot (a log restarted
        from a snapshot taken elsewhere: ``restore_snapshot``)."""
        self._producers.clear()
        self._ongoing_txns.clear()
        self._unreplicated_txns.clear()
        self._load_from_snapshot(log_start_offset, current_time_ms)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget every producer and transaction, delete every snapshot; the map starts at
        ``offset``."""
        self._producers.clear()
        self._ongoing_txns.clear()
        self._unreplicated_txns.clear()
        for snap in list(self._snapshots):
            self._remove_and_delete_snapshot(snap)
        self._last_snap_offset = 0
        self._last_map_offset = offset

    def __repr__(self) -> str:
        return (f"ProducerStateManager({self.log_dir.name}, producers={len(self._producers)}, "
                f"map_end={self._last_map_offset}, snapshots={sorted(self._snapshots)})")
