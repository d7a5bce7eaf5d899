"""An empty or lost ``.timeindex`` of a segment that holds timestamps is rebuilt at open, even
after a clean shutdown (Kafka sanity-checks the indexes of every segment it loads): without it,
``offset_for_timestamp`` would find nothing in that segment."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.log_invariants import check_indexes

from tierlog import Log, Record

T0 = 1_700_000_000_000
CONFIG = {"segment.bytes": 1024, "index.interval.bytes": 128}


def _fill(directory: Path, batches: int = 12) -> tuple[list[int], list[int]]:
    """A cleanly closed log of ``batches`` batches of 3 records; batch i is stamped
    T0 + 1000 i. Returns the segment base offsets and every batch's first offset."""
    with Log.open(directory, CONFIG, time_ms=lambda: T0, had_clean_shutdown=True) as log:
        firsts = []
        for i in range(batches):
            info = log.append_records(
                [Record(key=b"k%d" % j, value=b"v" * 60, timestamp=T0 + 1000 * i)
                 for j in range(3)])
            firsts.append(info.first_offset)
        bases = log.segments.base_offsets()
    assert len(bases) >= 3
    return bases, firsts


def _time_index(directory: Path, base: int) -> Path:
    return directory / f"{base:020d}.timeindex"


@pytest.mark.parametrize("which", ["first", "middle", "active"])
def test_empty_time_index_of_a_nonempty_segment_is_rebuilt_after_a_clean_shutdown(
        tmp_path: Path, which: str) -> None:
    directory = tmp_path / "t-0"
    bases, firsts = _fill(directory)
    base = {"first": bases[0], "middle": bases[1], "active": bases[-1]}[which]
    _time_index(directory, base).write_bytes(b"")
    with Log.open(directory, CONFIG, time_ms=lambda: T0, had_clean_shutdown=True) as log:
        assert f"{base:020d}.log" in log.recovery.indexes_rebuilt
        segment = log.segments.get(base)
        assert segment.time_index.entries > 0
        for i, first in enumerate(firsts):
            assert log.offset_for_timestamp(T0 + 1000 * i) == first, i
        check_indexes(log)


def test_a_truncated_time_index_tail_is_caught_too(tmp_path: Path) -> None:
    """A time index cut back to fewer entries than its segment's maximum timestamp needs:
    the segment's last entry must be its maximum timestamp, as a roll or close leaves it."""
    directory = tmp_path / "t-0"
    bases, firsts = _fill(directory)
    path = _time_index(directory, bases[0])
    data = path.read_bytes()
    assert len(data) >= 24
    path.write_bytes(data[:12])
    with Log.open(directory, CONFIG, time_ms=lambda: T0, had_clean_shutdown=True) as log:
        assert f"{bases[0]:020d}.log" in log.recovery.indexes_rebuilt
        for i, first in enumerate(firsts):
            assert log.offset_for_timestamp(T0 + 1000 * i) == first, i
        check_indexes(log)


def test_healthy_indexes_are_not_rebuilt(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    _fill(directory)
    with Log.open(directory, CONFIG, time_ms=lambda: T0, had_clean_shutdown=True) as log:
        assert log.recovery.indexes_rebuilt == []
        assert not log.recovery.repaired_anything
