"""TieredLog: what the remote layer needs of a partition's log, as a structural type.

The remote layer (RemoteLogManager, RemoteLogReader) sits below the Log that drives it, so it
cannot import ``tierlog.log.log``; this Protocol names every attribute and method it uses instead,
and :class:`tierlog.log.log.Log` satisfies it structurally. Adding a use of the log in the remote
layer means adding it here, which keeps the contract between the two visible in one place.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tierlog.common.stats import LogStats
    from tierlog.config import LogConfig
    from tierlog.log.leader_epoch import LeaderEpochFileCache
    from tierlog.log.segments import LogSegments
    from tierlog.log.tier_reads import TierReads
    from tierlog.producer.state import ProducerStateManager

__all__ = ["TieredLog"]


class TieredLog(Protocol):
    """A partition's log as the remote tier sees it: its identity, offsets, segments, producer
    state and leader epochs, and the three calls by which tiering reports back to it."""

    # -- identity ------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The partition directory (its name, ``<topic>-<partition>``, names it in messages)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def topic_id(self) -> str: ...

    @property
    def config(self) -> LogConfig: ...

    @property
    def stats(self) -> LogStats:
        """The log's event counters: the tier counts its copies, fetches and deletes there."""

    # -- offsets and contents --------------------------------------------------------------

    @property
    def log_start_offset(self) -> int: ...

    @property
    def local_log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    @property
    def highest_offset_in_remote(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def recovery_point(self) -> int: ...

    @property
    def lock(self) -> threading.RLock:
        """Held to read several offsets and the segment list as one view."""

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync the log below ``up_to_offset`` (tail publishing sends only flushed data)."""

    @property
    def segments(self) -> LogSegments: ...

    @property
    def producer_state(self) -> ProducerStateManager: ...

    @property
    def leader_epoch_cache(self) -> LeaderEpochFileCache: ...

    # -- what tiering tells the log ----------------------------------------------------------

    def attach_remote(self, reader: TierReads, highest_offset_in_remote: int) -> None:
        """Reads below the local log start offset go to ``reader`` from now on."""

    def update_highest_offset_in_remote(self, offset: int) -> None:
        """A copy up to ``offset`` was committed to the tier."""

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Remote retention deleted everything below ``offset``; True if the start moved."""
