"""tierlog.remote.ops.restore_cut.last_stable_boundary over many generated segments: the cut is
the last batch boundary at or before the requested offset (and time) where no transaction is
open, checked against a plain walk of the same batches."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.producer.snapshot import SnapshotEntry, encode_snapshot
from tierlog.records.batch import iter_batches
from tierlog.records.builder import build_batch, build_control_batch
from tierlog.records.control import ABORT, COMMIT
from tierlog.records.record import Record
from tierlog.remote.ops.restore_cut import SegmentCut, last_stable_boundary

T0 = 1_700_000_000_000
#: A producer whose transaction is open before the segment starts (its snapshot says so).
EARLY = 9

Op = tuple[str, int, int]  # (kind, producer id, count or commit flag)


@st.composite
def segments(draw: st.DrawFn) -> tuple[list[Op], bool]:
    early_open = draw(st.booleans())
    open_pids = {EARLY} if early_open else set()
    ops: list[Op] = []
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["plain", "txn", "end"]))
        if kind == "end":
            if not open_pids:
                continue
            pid = draw(st.sampled_from(sorted(open_pids)))
            open_pids.discard(pid)
            ops.append(("end", pid, draw(st.integers(0, 1))))
        elif kind == "txn":
            pid = draw(st.integers(1, 3))
            open_pids.add(pid)
            ops.append(("txn", pid, draw(st.integers(1, 3))))
        else:
            ops.append(("plain", -1, draw(st.integers(1, 3))))
    return ops, early_open


def encode(ops: list[Op], start: int) -> tuple[bytes, list[tuple[int, int, bool]], int]:
    """The segment's bytes, each boundary as (offset, position, stable) per a plain walk,
    and one past the last offset."""
    data = bytearray()
    sequences: dict[int, int] = {}
    offset = start
    open_pids: set[int] = set()
    boundaries: list[tuple[int, int, bool]] = []
    for i, (kind, pid, n) in enumerate(ops):
        boundaries.append((offset, len(data), not open_pids))
        if kind == "end":
            batch = build_control_batch(COMMIT if n else ABORT, producer_id=pid,
                                        producer_epoch=0, base_offset=offset,
                                        timestamp=T0 + i)
            open_pids.discard(pid)
            offset += 1
        else:
            records = [Record(b"k", b"v%d" % j, timestamp=T0 + i) for j in range(n)]
            if kind == "txn":
                seq = sequences.get(pid, 0)
                sequences[pid] = seq + n
                batch = build_batch(records, base_offset=offset, producer_id=pid,
                                    producer_epoch=0, base_sequence=seq, is_transactional=True)
                open_pids.add(pid)
            else:
                batch = build_batch(records, base_offset=offset)
            offset += n
        data += batch
    boundaries.append((offset, len(data), not open_pids))
    return bytes(data), boundaries, offset


def expected(boundaries: list[tuple[int, int, bool]], stop: int, ts_stop: int | None
             ) -> SegmentCut | None:
    best = None
    for i, (offset, position, stable) in enumerate(boundaries):
        if offset > stop:
            break
        if stable:
            best = SegmentCut(offset, position)
        if ts_stop is not None and T0 + i > ts_stop:
            break  # the batch after this boundary is past the time asked for
    return best


def snapshot_with_early_txn(start: int) -> bytes:
    return encode_snapshot([SnapshotEntry(EARLY, 0, 4, start - 1, 0, T0, 0, start - 5)])


@settings(max_examples=150, deadline=None)
@given(segments(), st.integers(0, 60), st.one_of(st.none(), st.integers(-1, 26)))
def test_the_cut_is_the_last_stable_boundary_at_or_before_the_stop(
        segment: tuple[list[Op], bool], stop: int, ts: int | None) -> None:
    ops, early_open = segment
    start = 100
    data, boundaries, end = encode(ops, start)
    if early_open:
        boundaries = _early_txn(boundaries, ops)
    snapshot = snapshot_with_early_txn(start) if early_open else None
    ts_stop = None if ts is None else T0 + ts
    got = last_stable_boundary(iter_batches(data, strict=True), start=start, end=end,
                               snapshot=snapshot, stop=start + stop,
                               stop_after_timestamp=ts_stop)
    assert got == expected(boundaries, start + stop, ts_stop)


def _early_txn(boundaries: list[tuple[int, int, bool]], ops: list[Op]
               ) -> list[tuple[int, int, bool]]:
    """The boundaries with EARLY's transaction open from the start until its marker."""
    closed_at = next((i for i, (kind, pid, _) in enumerate(ops)
                      if kind == "end" and pid == EARLY), None)
    return [(o, p, stable and closed_at is not None and i > closed_at)
            for i, (o, p, stable) in enumerate(boundaries)]


def test_an_empty_segment_cuts_at_its_start() -> None:
    assert last_stable_boundary(iter([]), start=7, end=7, snapshot=None, stop=7) == \
        SegmentCut(7, 0)


def test_the_end_of_a_compacted_segment_is_its_recorded_end() -> None:
    data = build_batch([Record(b"k", b"v", timestamp=T0)], base_offset=10)
    got = last_stable_boundary(iter_batches(data), start=10, end=15, snapshot=None, stop=20)
    assert got == SegmentCut(15, len(data))
    # Short of the end, the cut is just past the last batch.
    got = last_stable_boundary(iter_batches(data), start=10, end=15, snapshot=None, stop=13)
    assert got == SegmentCut(11, len(data))
