"""Where a point-in-time restore may cut a partition: the last STABLE batch boundary at or
before the requested offset or time, so no transaction spans the cut.

A boundary (a batch's base offset, or one past a segment's last offset) is stable when no
producer has a transaction open there: every transaction whose data lies below it has its
marker below it too. Which transactions are open is the producer state's rule
(``ProducerStateManager.first_undecided_offset`` after replaying the batches through a
``ProducerBatchRun``), not a second copy here: the state at a segment's start comes from the
producer snapshot the tier holds there (copied with the segment before), then the segment's
batches are replayed one by one, the boundary checked before each.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

from tierlog.producer.append import REPLICATION, ProducerBatchRun
from tierlog.producer.state import ProducerStateManager
from tierlog.records.batch import RecordBatch


@dataclass(frozen=True, slots=True)
class SegmentCut:
    """A stable boundary inside (or at the end of) one segment's bytes."""

    offset: int
    """The first offset the restored log does not hold (its log end offset)."""
    position: int
    """The byte position of that boundary in the segment's ``.log`` (its size there)."""


def last_stable_boundary(batches: Iterable[RecordBatch], *, start: int, end: int,
                         snapshot: bytes | None, stop: int,
                         stop_after_timestamp: int | None = None,
                         now_ms: int = 0) -> SegmentCut | None:
    """The last stable boundary ``b`` of one segment with ``start <= b <= stop``, or None
    when every boundary of the segment up to ``stop`` is inside a transaction.

    ``batches`` are the segment's, in order, from byte position 0; ``start`` is its base
    offset and ``end`` one past its last offset. A boundary's offset is one past the batch
    before it (``start`` at position 0), so a segment truncated there ends at that offset;
    the end of the whole segment is ``end`` when ``stop`` reaches it.
    ``snapshot`` is the producer snapshot at ``start`` (None: no producer was known there).
    With ``stop_after_timestamp``, the cut is also at or before the first batch whose
    maximum timestamp is above it (the restored log keeps only batches up to that time).
    """
    with tempfile.TemporaryDirectory(prefix="tierlog-cut-") as scratch:
        psm = ProducerStateManager(scratch, time_ms=lambda: now_ms)
        if snapshot is not None:
            psm.restore_snapshot(start, snapshot, f"the producer snapshot at offset {start}")
            psm.truncate_and_reload(-1, start, now_ms)
        best: SegmentCut | None = None
        position, boundary = 0, start
        for batch in batches:
            if psm.first_undecided_offset() is None:
                best = SegmentCut(boundary, position)
            if batch.next_offset > stop or (stop_after_timestamp is not None
                                             and batch.max_timestamp > stop_after_timestamp):
                return best
            run = ProducerBatchRun(psm, REPLICATION)
            run.add(batch)
            run.apply()
            position += batch.size_in_bytes
            boundary = batch.next_offset
        if psm.first_undecided_offset() is None:
            # The whole segment: its end (past any offsets compaction removed at its tail)
            # when the request reaches it, else just past its last batch.
            best = SegmentCut(end if end <= stop else boundary, position)
        return best


__all__ = ["SegmentCut", "last_stable_boundary"]
