"""LogOffsets: a partition's log start offset, high watermark and highest tiered offset.

The one owner of these three offsets and of their invariant, log start offset <= high
watermark <= log end offset (the end is the LocalLog's: every change is given it), asserted in
one place (:meth:`LogOffsets._check`). A move of an offset tells the producer state and the
leader-epoch cache what it means to them (Kafka's ``UnifiedLog`` does this inline).
"""

from __future__ import annotations

from tierlog.log.leader_epoch import LeaderEpochFileCache
from tierlog.log.loader import rebuild_producer_state
from tierlog.log.segments import LogSegments
from tierlog.producer.state import ProducerStateManager

__all__ = ["LogOffsets", "last_offset_off_local"]


def last_offset_off_local(highest_offset_in_remote: int, log_start_offset: int) -> int:
    """The last offset a tiered log's local segments no longer hold for the remote tier:
    one the tier holds (copied), or one below the log start offset (deleted records: never
    copied, as Kafka copies from the local log start, and removable locally uncopied, as
    Kafka's ``deletableSegments`` allows once the log start passed a segment). The one rule
    of both the RemoteLogManager's copy candidates (it copies only segments above this) and
    local retention (it removes only segments at or below this)."""
    return max(highest_offset_in_remote, log_start_offset - 1)


class LogOffsets:
    """The offsets that describe a whole partition (local and tiered) beyond its local end.

    The three offsets are plain attributes (as LocalLog's ``next_offset``), read by anyone and
    written only by the methods here, which keep the invariant: a read costs no call, and the
    producer hot path reads the log start offset on every append.

    Not thread-safe: the owning Log's lock guards every change; a read of one offset needs
    no lock (an int read is atomic), a consistent view of several takes the Log's lock.
    """

    __slots__ = ("_epochs", "_producers", "high_watermark", "highest_offset_in_remote",
                 "log_start_offset")

    def __init__(self, log_start_offset: int, log_end_offset: int,
                 producer_state: ProducerStateManager,
                 epoch_cache: LeaderEpochFileCache) -> None:
        self._producers = producer_state
        self._epochs = epoch_cache
        #: The first offset of the partition (local or tiered) a reader may fetch.
        self.log_start_offset = log_start_offset
        #: Every offset below it is replicated: consumers read up to it (the LSO's bound).
        self.high_watermark = log_start_offset
        #: The last offset the remote tier holds (-1: none).
        self.highest_offset_in_remote = -1
        self._check(log_end_offset)

    def _check(self, log_end_offset: int) -> None:
        """The invariant, after every change: log start <= high watermark <= log end."""
        assert self.log_start_offset <= self.high_watermark <= log_end_offset, (
            f"offsets out of order: log start {self.log_start_offset}, high watermark "
            f"{self.high_watermark}, log end {log_end_offset}")

    # -- reading -----------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, else the high watermark."""
        first_unstable = self._producers.first_unstable_offset()
        if first_unstable is None:
            return self.high_watermark
        return min(first_unstable, self.high_watermark)

    def last_offset_off_local(self) -> int:
        """:func:`last_offset_off_local` of these offsets."""
        return last_offset_off_local(self.highest_offset_in_remote, self.log_start_offset)

    # -- the high watermark ------------------------------------------------------------

    def set_high_watermark(self, offset: int, log_end_offset: int) -> None:
        """Move the high watermark to ``offset`` (producer state forgets what it passed)."""
        self.high_watermark = offset
        self._producers.on_high_watermark_updated(offset)
        self._check(log_end_offset)

    def follow_log_end(self, log_end_offset: int) -> None:
        """The high watermark follows the log end, which an append just moved up (a partition
        with one replica). No check needed: log start <= old high watermark <= old end <= new
        end, so the invariant holds with the high watermark at the new end."""
        self.high_watermark = log_end_offset
        self._producers.on_high_watermark_updated(log_end_offset)

    def update_high_watermark(self, offset: int, log_end_offset: int) -> int:
        """Set the high watermark clamped to [log start, log end]; returns the value set."""
        self.set_high_watermark(min(max(offset, self.log_start_offset), log_end_offset),
                                log_end_offset)
        return self.high_watermark

    # -- the log start offset ----------------------------------------------------------

    def advance_log_start(self, offset: int, log_end_offset: int) -> None:
        """Raise the log start offset to ``offset`` (above the current one): the epoch cache
        drops what lies below, producer state its completed transactions there, and the high
        watermark follows if it was below."""
        self.log_start_offset = offset
        self._epochs.truncate_from_start(offset)
        self._producers.on_log_start_offset_incremented(offset)
        if self.high_watermark < offset:
            self.set_high_watermark(offset, max(log_end_offset, offset))
        self._check(max(log_end_offset, offset))

    def log_end_kept(self, log_end_offset: int) -> None:
        """A truncation at or above the log end removed nothing: a leader may still have
        assigned an epoch there and written nothing in it."""
        self._epochs.truncate_from_end(log_end_offset)

    def truncated(self, log_end_offset: int, segments: LogSegments, now_ms: int) -> None:
        """The local log was cut back to ``log_end_offset``: the log start follows it down
        (Kafka), the epoch cache drops later epochs, producer state is replayed from its
        newest valid snapshot, and the high watermark comes down to the end."""
        self.log_start_offset = min(self.log_start_offset, log_end_offset)
        self._epochs.truncate_from_end(log_end_offset)
        rebuild_producer_state(self._producers, segments, self.log_start_offset,
                               log_end_offset, now_ms)
        if self.high_watermark > log_end_offset:
            self.set_high_watermark(log_end_offset, log_end_offset)
        self._check(log_end_offset)

    def restart_at(self, offset: int) -> None:
        """The local log restarted, empty, at ``offset``: every offset starts there, producer
        state and the epoch cache forget everything."""
        self.log_start_offset = offset
        self._producers.truncate_fully_and_start_at(offset)
        self._epochs.clear_and_flush()
        self.set_high_watermark(offset, offset)

    # -- the tier ----------------------------------------------------------------------

    def set_highest_offset_in_remote(self, offset: int) -> None:
        """What a RemoteLogManager found in the tier when it attached."""
        self.highest_offset_in_remote = offset

    def tiered_up_to(self, offset: int) -> None:
        """A copy up to ``offset`` was committed to the tier (never moves it down)."""
        self.highest_offset_in_remote = max(self.highest_offset_in_remote, offset)
