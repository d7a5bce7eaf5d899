"""LogSegment alone (Kafka's LogSegmentTest): append and read by offset, the roll rule,
truncation, recovery of a damaged tail, timestamp lookup, renames and deletion."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.log.segment import AppendedBatch, LogSegment
from tierlog.records import Record, build_batch
from tierlog.records.batch import RecordBatch

NOW = 1_700_000_000_000
BASE = 100


def _batch(base_offset: int, records: int = 2, ts: int = NOW, value: bytes = b"v" * 40) -> bytes:
    return build_batch([Record(key=b"k", value=value, timestamp=ts + i) for i in range(records)],
                       base_offset=base_offset, now_ms=ts)


def _append(segment: LogSegment, *batches: bytes) -> None:
    views = [RecordBatch(b) for b in batches]
    segment.append(list(batches), [AppendedBatch(v.last_offset, v.max_timestamp, len(b))
                                   for v, b in zip(views, batches, strict=True)], views)


def _open(tmp_path: Path, *, interval: int = 1, base: int = BASE,
          time_ms: object = None) -> LogSegment:
    return LogSegment.open(tmp_path, base, index_interval_bytes=interval, max_index_size=1024,
                           time_ms=time_ms or (lambda: NOW))  # type: ignore[arg-type]


@pytest.fixture
def segment(tmp_path: Path):  # type: ignore[no-untyped-def]
    seg = _open(tmp_path)
    _append(seg, _batch(BASE), _batch(BASE + 2), _batch(BASE + 4, ts=NOW + 10_000))
    yield seg
    seg.close()


def test_files_are_named_by_base_offset(tmp_path: Path, segment: LogSegment) -> None:
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"{BASE:020d}{s}" for s in (".index", ".log", ".timeindex", ".txnindex")]


def test_read_returns_the_batch_holding_the_offset_and_what_follows(segment: LogSegment) -> None:
    found = segment.read(BASE + 3, max_size=1 << 20)
    assert found is not None
    start, file_slice, incomplete = found
    assert start.offset == BASE + 3 and not incomplete
    batches = list(file_slice.batches())
    assert [b.base_offset for b in batches] == [BASE + 2, BASE + 4]


def test_read_past_the_end_returns_none(segment: LogSegment) -> None:
    assert segment.read(BASE + 6, max_size=1 << 20) is None


def test_read_respects_max_size_unless_one_message_is_needed(segment: LogSegment) -> None:
    found = segment.read(BASE, max_size=10)
    assert found is not None and found[1].size == 10 and found[2]   # first batch cut short
    found = segment.read(BASE, max_size=10, min_one_message=True)
    assert found is not None and not found[2]
    assert [b.base_offset for b in found[1].batches()] == [BASE]


def test_read_stops_at_max_position(segment: LogSegment) -> None:
    first = len(_batch(BASE))
    found = segment.read(BASE, max_size=1 << 20, max_position=first)
    assert found is not None and found[1].size == first


def test_next_offset_and_max_timestamp(segment: LogSegment) -> None:
    assert segment.read_next_offset() == BASE + 6
    assert segment.max_timestamp_so_far == NOW + 10_001
    assert segment.offset_of_max_timestamp_so_far == BASE + 5


def test_find_offset_by_timestamp(segment: LogSegment) -> None:
    found = segment.find_offset_by_timestamp(NOW + 5_000)
    assert found is not None and found.offset == BASE + 4
    assert segment.find_offset_by_timestamp(NOW + 20_000) is None


def test_truncate_removes_the_whole_batch_holding_the_offset(segment: LogSegment) -> None:
    removed = segment.truncate_to(BASE + 3)
    assert removed == len(_batch(BASE + 2)) + len(_batch(BASE + 4, ts=NOW + 10_000))
    assert segment.read_next_offset() == BASE + 2
    assert segment.read(BASE + 2, max_size=1 << 20) is None
    assert segment.offset_index.last_offset <= BASE + 1
    assert segment.max_timestamp_so_far == NOW + 1


def test_truncate_beyond_the_end_removes_nothing(segment: LogSegment) -> None:
    size = segment.size
    assert segment.truncate_to(BASE + 100) == 0 and segment.size == size


def test_rebuild_indexes_cuts_a_damaged_tail_and_rebuilds_the_indexes(
        tmp_path: Path, segment: LogSegment) -> None:
    good = segment.size
    entries = segment.offset_index.entries
    segment.log.append_pieces([b"\x00garbage after the last batch"])
    result = segment.rebuild_indexes()
    assert segment.size == good and result.truncated_bytes == len(b"\x00garbage after the last batch")
    assert segment.offset_index.entries == entries
    assert segment.read_next_offset() == BASE + 6


@pytest.mark.parametrize(
    ("messages_size", "max_offset", "max_ts", "segment_bytes", "rolls"),
    [
        (10, BASE + 7, NOW, 1 << 20, False),                      # room, same offsets range
        (1 << 20, BASE + 7, NOW, 1 << 20, True),                  # would pass segment.bytes
        (10, BASE + (1 << 31), NOW, 1 << 20, True),               # offset leaves the 4-byte range
        # segment.ms is measured from the first batch's max timestamp (NOW + 1), strictly
        (10, BASE + 7, NOW + 1 + 3_600_000, 1 << 20, False),
        (10, BASE + 7, NOW + 1 + 3_600_001, 1 << 20, True),
    ],
)
def test_should_roll_follows_kafkas_rule(segment: LogSegment, messages_size: int,
                                         max_offset: int, max_ts: int, segment_bytes: int,
                                         rolls: bool) -> None:
    assert segment.should_roll(messages_size, max_ts, max_offset, segment_bytes, 3_600_000,
                               lambda: NOW) is rolls


def test_an_empty_segment_never_rolls_by_time(tmp_path: Path) -> None:
    seg = _open(tmp_path)
    try:
        assert not seg.should_roll(10, NOW + 10**9, BASE, 1 << 20, 1, lambda: NOW + 10**9)
    finally:
        seg.close()


def test_change_file_suffixes_renames_every_file(tmp_path: Path, segment: LogSegment) -> None:
    segment.change_file_suffixes("", ".deleted")
    assert all(p.name.endswith(".deleted") for p in tmp_path.iterdir())
    assert segment.read(BASE, max_size=1 << 20) is not None   # still readable after the rename


def test_delete_removes_every_file(tmp_path: Path) -> None:
    seg = _open(tmp_path)
    _append(seg, _batch(BASE))
    seg.delete()
    assert list(tmp_path.iterdir()) == []
