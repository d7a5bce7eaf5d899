"""FetchDataInfo: what ``Log.read`` returns, and the consumer-side view of its records.

Holds the raw batches (a local file slice or remote bytes) for zero-copy forwarding, plus the
aborted transactions a read_committed reader needs to skip aborted data, as Kafka's fetcher does.
"""

from __future__ import annotations

import heapq
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tierlog.index import AbortedTxn
from tierlog.records.batch import RecordBatch
from tierlog.records.control import ABORT
from tierlog.records.file_records import MemoryRecords, Records
from tierlog.records.record import Record

ISOLATION_LEVELS = ("log_end", "read_uncommitted", "read_committed")


def check_isolation(isolation: str) -> str:
    if isolation not in ISOLATION_LEVELS:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, got {isolation!r}")
    return isolation


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """The result of one read.

    ``data`` holds whole batches starting with the batch that contains ``fetch_offset`` (a
    trailing batch may be cut by ``max_bytes``; it is never handed out). ``upper_bound`` is
    the exclusive offset the read was capped at (log end, high watermark or last stable
    offset). ``aborted_transactions`` is set for read_committed reads.
    """

    fetch_offset: int
    upper_bound: int
    data: Records
    isolation: str = "log_end"
    first_entry_incomplete: bool = False
    aborted_transactions: tuple[AbortedTxn, ...] | None = None
    from_remote: bool = False

    @classmethod
    def empty(cls, fetch_offset: int, upper_bound: int, isolation: str = "log_end") -> FetchDataInfo:
        aborted = () if isolation == "read_committed" else None
        return cls(fetch_offset, upper_bound, MemoryRecords(b""), isolation,
                   aborted_transactions=aborted)

    @property
    def size_in_bytes(self) -> int:
        return self.data.size_in_bytes()

    def batches(self) -> Iterator[RecordBatch]:
        """The complete batches of the read, as zero-copy views."""
        return self.data.batches()

    def write_to(self, destination: socket.socket | int) -> int:
        """Send the raw batches (``os.sendfile`` when they are a local file slice)."""
        return self.data.write_to(destination)

    def records(
        self, *, include_control: bool = False, include_aborted: bool = False
    ) -> Iterator[Record]:
        """The records from ``fetch_offset`` up to ``upper_bound``, as a consumer sees them.

        Control records are skipped unless ``include_control``; in a read_committed read,
        records of aborted transactions are skipped unless ``include_aborted``.
        """
        start, stop = self.fetch_offset, self.upper_bound
        skip_aborted = self.aborted_transactions is not None and not include_aborted
        tracker = None
        if skip_aborted:
            tracker = AbortedTracker((t.first_offset, t.producer_id)
                                     for t in self.aborted_transactions or ())
        for batch in self.batches():
            if batch.base_offset >= stop:
                return
            if batch.last_offset < start:
                continue
            if tracker is not None and tracker.skip(batch):
                continue
            if batch.is_control and not include_control:
                continue
            for record in batch.records():
                offset = record.offset
                if start <= offset < stop:
                    yield record


class AbortedTracker:
    """Kafka's consumer rule for read_committed: once the first offset of one of its aborted
    transactions is reached, a producer's transactional batches (its ABORT marker included)
    are dropped until that marker. Fed batches in offset order."""

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        """``aborted``: (first offset, producer id) of each aborted transaction in range."""
        self._pending = list(aborted)
        heapq.heapify(self._pending)
        self._aborting: set[int] = set()

    def skip(self, batch: RecordBatch) -> bool:
        """Whether ``batch`` belongs to an aborted transaction."""
        while self._pending and self._pending[0][0] <= batch.last_offset:
            self._aborting.add(heapq.heappop(self._pending)[1])
        if not batch.is_transactional or batch.producer_id not in self._aborting:
            return False
        if batch.is_control:
            control = batch.control_record()
            if control is not None and control.type == ABORT:  # ends the aborted range
                self._aborting.discard(batch.producer_id)
        return True
