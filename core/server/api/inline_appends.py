"""When a produce request's appends may run on the event loop instead of a worker thread.

A hop to the worker pool and back costs more than appending a 16 KiB batch to the page cache
(about 150 us against 20 us), so the server appends inline when an append can only write to
the page cache: the flush policy forces no fsync on it (``flush.messages`` is not reached),
no segment roll is due (a roll creates files and snapshots the producer state), and no other
thread holds the log's lock (the cleaner, retention or the tier copier might, for as long as
they need). Appends never call the remote tier. Anything else goes to the worker pool as
before, so a config that fsyncs every append (``flush.messages=1``) never blocks the loop.
"""

from __future__ import annotations

from collections.abc import Callable

from tierlog.log.log import Log

#: The smallest v2 record: seven one-byte fields.
_MIN_RECORD_SIZE = 7


def append_is_nonblocking(log: Log, size: int, now_ms: int,
                          time_ms: Callable[[], int]) -> bool:
    """Whether appending ``size`` bytes of batches to ``log`` now only writes to the page
    cache (see the module docstring).

    The bounds are conservative: ``size // 7`` bounds the number of records (a v2 record
    takes at least 7 bytes: its length, attributes, timestamp and offset deltas, key and
    value lengths and header count), and ``now_ms`` stands for the batches' largest timestamp
    (producers stamp them before sending), so a roll the engine would make is always foreseen. The
    lock check is a hint: a thread taking the lock right after it only delays this append."""
    if log.closed:
        return False  # the append raises at once; the worker path reports it as before
    config = log.config
    most_records = size // _MIN_RECORD_SIZE
    if log.log_end_offset - log.recovery_point + most_records >= config["flush.messages"]:
        return False
    active = log.segments.active
    if active.should_roll(size, now_ms, log.log_end_offset + most_records, config["segment.bytes"],
                          config["segment.ms"], time_ms):
        return False
    lock = log.lock
    if not lock.acquire(blocking=False):
        return False
    lock.release()
    return True
