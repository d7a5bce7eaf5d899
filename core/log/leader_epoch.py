"""The leader-epoch cache: the offset where each leader epoch started (LeaderEpochFileCache).

Backed by the partition's ``leader-epoch-checkpoint``, rewritten atomically on every change.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from tierlog.checkpoint.checkpoint_file import EpochEntry
from tierlog.errors import CorruptCheckpointError

if TYPE_CHECKING:
    from tierlog.checkpoint.checkpoint_file import LeaderEpochCheckpointFile

log = logging.getLogger(__name__)

#: Kafka's OffsetsForLeaderEpoch answer when the epoch or its end offset is unknown.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


def _remove_while(
    entries: list[EpochEntry], predicate: Callable[[EpochEntry], bool], *, from_end: bool
) -> list[EpochEntry]:
    """Pop entries from one end while ``predicate`` holds; returns them in the order popped."""
    removed: list[EpochEntry] = []
    while entries:
        candidate = entries[-1] if from_end else entries[0]
        if not predicate(candidate):
            break
        removed.append(entries.pop(-1 if from_end else 0))
    return removed


def _truncate_from_start(entries: list[EpochEntry], start_offset: int) -> list[EpochEntry]:
    removed = _remove_while(entries, lambda e: e.start_offset <= start_offset, from_end=False)
    if removed:
        # The epoch that was current at the new start offset now starts exactly there.
        entries.insert(0, EpochEntry(removed[-1].epoch, start_offset))
    return removed


def _truncate_from_end(entries: list[EpochEntry], end_offset: int) -> list[EpochEntry]:
    if end_offset >= 0 and entries and entries[-1].start_offset >= end_offset:
        return _remove_while(entries, lambda e: e.start_offset >= end_offset, from_end=True)
    return []


class LeaderEpochFileCache:
    """The ``(leader epoch -> start offset)`` entries of one partition, in increasing order of
    both epoch and start offset (assigning an entry removes any that would break that).

    Every change is written to the checkpoint (when there is one) atomically before the
    method returns; Kafka flushes truncations asynchronously, tierlog has no scheduler here.
    Thread-safe: all access holds a ``threading.RLock``.
    """

    def __init__(self, checkpoint: LeaderEpochCheckpointFile | None) -> None:
        self.checkpoint = checkpoint
        self._lock = threading.RLock()
        self._entries: list[EpochEntry] = []
        #: The newest cached epoch (-1: none), read without the lock by the append hot path
        #: (:meth:`is_news`'s rule inline); only this cache writes it, on every change.
        self.newest_epoch = -1
        if checkpoint is not None:
            for entry in checkpoint.read():
                try:
                    self._assign(entry)
                except ValueError as e:
                    raise CorruptCheckpointError(f"{checkpoint.path}: {e}") from None
            self._entries_changed()

    # -- updates -------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` and flush when anything changed.

        Ignored when it is not news (same latest epoch at the same or a lower offset). Entries
        with an epoch >= ``epoch`` or a start offset >= ``start_offset`` are removed first.
        """
        with self._lock:
            if self._assign(EpochEntry(epoch, start_offset)):
                self.flush()

    def is_news(self, epoch: int) -> bool:
        """The epoch rule of an append, and of recovery replaying one: a batch's epoch is
        recorded only if it is newer than every cached epoch. A batch of an older epoch
        (written by an older leader) is no news and must not truncate newer entries, as
        :meth:`assign` would; -1 (no epoch) never is."""
        return epoch > self.newest_epoch

    def assign_if_newer(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` if it is news (:meth:`is_news`)."""
        with self._lock:
            if self.is_news(epoch):
                self.assign(epoch, start_offset)

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {tuple(entry)}: must be non-negative")
        with self._lock:
            latest = self.latest_entry
            if latest is not None and entry.epoch == latest.epoch and (
                entry.start_offset >= latest.start_offset
            ):
                return False
            removed = _remove_while(
                self._entries,
                lambda e: e.epoch >= entry.epoch or e.start_offset >= entry.start_offset,
                from_end=True,
            )
            self._entries.append(entry)
            # Removing one entry at the very same offset only means no data was written in it.
            if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
                log.warning(
                    "new epoch entry %s truncated conflicting entries %s in %s",
                    tuple(entry), [tuple(e) for e in removed], self._where(),
                )
            return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove every entry starting at or after ``end_offset`` (the log was truncated to it)."""
        with self._lock:
            removed = _truncate_from_end(self._entries, end_offset)
            if removed:
                log.debug("removed %s from %s after truncating to end offset %d",
                          removed, self._where(), end_offset)
                self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly before ``start_offset``; the epoch current at ``start_offset``
        is kept and now starts there (so ``truncate_from_start(6)`` keeps an entry at 6)."""
        with self._lock:
            removed = _truncate_from_start(self._entries, start_offset)
            if removed:
                log.debug("removed %s from %s after truncating to start offset %d",
                          removed, self._where(), start_offset)
                self.flush()

    def clear_and_flush(self) -> None:
        """Delete every entry and write the (empty) checkpoint."""
        with self._lock:
            self._entries.clear()
            self.flush()

    def _entries_changed(self) -> None:
        self.newest_epoch = self._entries[-1].epoch if self._entries else -1

    def flush(self) -> None:
        """Write the entries to the checkpoint atomically (a no-op without a checkpoint).
        Every change of the entries ends here."""
        with self._lock:
            self._entries_changed()
            if self.checkpoint is not None:
                self.checkpoint.write(self._entries)

    # -- queries -------------------------------------------------------------------------

    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, oldest first."""
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The current leader epoch: the newest one with an entry, or None."""
        latest = self.latest_entry
        return None if latest is None else latest.epoch

    def previous_epoch(self, epoch: int) -> int | None:
        """The largest cached epoch below ``epoch``, or None."""
        with self._lock:
            i = bisect.bisect_left(self._epochs(), epoch)
            return self._entries[i - 1].epoch if i > 0 else None

    def next_epoch(self, epoch: int) -> int | None:
        """The smallest cached epoch above ``epoch``, or None."""
        with self._lock:
            i = bisect.bisect_right(self._epochs(), epoch)
            return self._entries[i].epoch if i < len(self._entries) else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds ``offset`` (None when ``offset`` precedes every entry)."""
        with self._lock:
            i = bisect.bisect_right([e.start_offset for e in self._entries], offset)
            return self._entries[i - 1].epoch if i > 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: ``(epoch, end offset)`` for OffsetsForLeaderEpoch.

        The epoch returned is the largest cached epoch <= ``requested_epoch``; its end offset
        is the start offset of the next larger epoch, or ``log_end_offset`` when the latest
        epoch is requested. An epoch below every cached one answers ``(requested_epoch,
        first start offset)``; ``UNDEFINED_EPOCH`` or an epoch above all answers
        ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if self.latest_epoch == requested_epoch:
                return requested_epoch, log_end_offset
            epochs = self._epochs()
            higher = bisect.bisect_right(epochs, requested_epoch)
            if higher == len(epochs):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            end_offset = self._entries[higher].start_offset
            if higher == 0:
                return requested_epoch, end_offset
            return self._entries[higher - 1].epoch, end_offset

    def epochs_between(self, start_offset: int, end_offset: int) -> list[EpochEntry]:
        """The entries for offsets in ``[start_offset, end_offset)``, as the cache would hold
        them after truncating a copy from the start (when ``start_offset >= 0``) and end."""
        with self._lock:
            copy = list(self._entries)
        if start_offset >= 0:
            _truncate_from_start(copy, start_offset)
        _truncate_from_end(copy, end_offset)
        return copy

    def _epochs(self) -> list[int]:
        return [e.epoch for e in self._entries]

    def _where(self) -> str:
        return str(self.checkpoint.path) if self.checkpoint is not None else "leader epoch cache"

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.entries()})"

