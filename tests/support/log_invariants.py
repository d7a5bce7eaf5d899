"""Checks shared by the recovery tests: what must hold of any log tierlog has opened.

Indexes agree with the data, offsets are contiguous, transaction indexes and the epoch cache
match a model. Plain functions over a Log; they read its files, never its private state.
"""

from __future__ import annotations

from pathlib import Path

from tierlog import Log
from tierlog.log.segment import LogSegment
from tierlog.records import RecordBatch


def segment_batches(segment: LogSegment) -> list[tuple[int, RecordBatch]]:
    """(position, batch) of every batch of a segment, read from its ``.log``."""
    return list(segment.log.batches_from(0))


def log_batches(log: Log) -> list[RecordBatch]:
    return [batch for segment in log.segments for _, batch in segment_batches(segment)]


def check_offsets_contiguous(log: Log) -> None:
    """Batches run from the log start offset to the log end offset without gaps."""
    expected = log.segments.first.base_offset
    for segment in log.segments:
        for position, batch in segment_batches(segment):
            assert batch.base_offset == expected, (
                f"{segment.path.name}@{position}: offset {batch.base_offset}, expected {expected}")
            expected = batch.next_offset
    assert expected == log.log_end_offset


def check_segment_indexes(segment: LogSegment, final_entry: bool = True) -> None:
    """Every offset index entry names a batch's last offset and that batch's start position;
    time index entries have increasing timestamps and offsets, and each is the running maximum
    timestamp at a batch whose last offset it names. With ``final_entry`` (a rolled, closed
    or recovered segment) the last entry is the segment's maximum."""
    batches = segment_batches(segment)
    by_position = {position: batch for position, batch in batches}
    index = segment.offset_index
    previous = None
    for n in range(index.entries):
        offset, position = index.entry(n)
        assert position in by_position, f"{index.path}: entry {n} points into a batch ({position})"
        assert by_position[position].last_offset == offset, (
            f"{index.path}: entry {n} names offset {offset}, the batch at {position} ends at "
            f"{by_position[position].last_offset}")
        assert previous is None or offset > previous
        previous = offset
    running: dict[int, int] = {}  # last offset -> running max timestamp up to that batch
    best = -1
    for _, batch in batches:
        best = max(best, batch.max_timestamp)
        running[batch.last_offset] = best
    times = segment.time_index
    entries = [times.entry(n) for n in range(times.entries)]
    for n, (timestamp, offset) in enumerate(entries):
        assert offset in running, f"{times.path}: entry {n} names offset {offset}, no batch end"
        assert running[offset] == timestamp, (
            f"{times.path}: entry {n} ({timestamp}, {offset}) is not the max timestamp "
            f"{running[offset]} at that offset")
        if n:
            assert timestamp > entries[n - 1][0] and offset >= entries[n - 1][1]
    if final_entry and batches and best >= 0:
        assert entries and entries[-1][0] == best, f"{times.path}: last entry is not the max {best}"
    assert segment.max_timestamp_so_far == best


def check_indexes(log: Log, recovered: bool = True) -> None:
    """check_segment_indexes on every segment; the active one has its final time index entry
    only when it was just recovered (or rolled)."""
    active = log.segments.active
    for segment in log.segments:
        check_segment_indexes(segment, final_entry=recovered or segment is not active)


def log_file_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def aborted_txns(log: Log) -> list[tuple[int, int, int, int]]:
    """Every transaction index entry of the log as (producer, first, last, last stable)."""
    return [
        (t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
        for segment in log.segments for t in segment.txn_index.all_aborted_txns()
    ]


def epoch_starts(batches: list[RecordBatch]) -> list[tuple[int, int]]:
    """The leader-epoch cache a log of these batches must hold: each epoch's first offset."""
    out: list[tuple[int, int]] = []
    for batch in batches:
        epoch = batch.partition_leader_epoch
        if epoch >= 0 and (not out or epoch > out[-1][0]):
            out.append((epoch, batch.base_offset))
    return out


class TxnModel:
    """What read_committed must see: Kafka's rules replayed over (offset, batch) in order.

    Tracks each transactional producer's open transaction and the aborted transactions with
    the last stable offset Kafka records for them (the first offset of another producer's
    open transaction, else the marker's offset + 1)."""

    def __init__(self) -> None:
        self.open: dict[int, int] = {}  # producer -> first offset of its open transaction
        self.aborted: list[tuple[int, int, int, int]] = []
        self.aborted_offsets: set[int] = set()
        self._pending: dict[int, list[int]] = {}

    def apply(self, batch: RecordBatch) -> None:
        pid = batch.producer_id
        if not batch.is_transactional:
            return
        if batch.is_control:
            control = batch.control_record()
            first = self.open.pop(pid, None)
            offsets = self._pending.pop(pid, [])
            if first is None:
                return
            if control.type == 0:
                others = [f for p, f in self.open.items() if p != pid]
                lso = min(others) if others else batch.base_offset + 1
                self.aborted.append((pid, first, batch.base_offset, lso))
                self.aborted_offsets.update(offsets)
            return
        self.open.setdefault(pid, batch.base_offset)
        self._pending.setdefault(pid, []).extend(range(batch.base_offset, batch.next_offset))

    def last_stable_offset(self, high_watermark: int) -> int:
        return min([*self.open.values(), high_watermark])
