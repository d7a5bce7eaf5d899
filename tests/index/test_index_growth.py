"""An index's disk space is reserved in steps as entries are appended (issue 21, defect 11):
a new partition's indexes no longer take 2 x ``segment.index.bytes`` of disk before a record,
and every slot an append or the armed plain appender writes is reserved first."""

from __future__ import annotations

import os
from pathlib import Path

from tierlog import Log, Record
from tierlog.index.base import RESERVE_STEP_BYTES
from tierlog.index.offset_index import OffsetIndex
from tierlog.index.time_index import TimeIndex


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_appends_reserve_the_next_step_before_they_reach_it(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 4 << 20)
    step = RESERVE_STEP_BYTES // index.entry_size
    try:
        for i in range(step):
            index.append(i, i * 10)
        assert index.reserved_entries == step
        assert _allocated(index.path) < 2 * RESERVE_STEP_BYTES
        index.append(step, step * 10)  # the first entry of the next step reserves it
        assert index.reserved_entries == 2 * step
        assert 2 * RESERVE_STEP_BYTES <= _allocated(index.path) < 3 * RESERVE_STEP_BYTES
        assert index.lookup(step).position == step * 10
    finally:
        index.close()


def test_a_time_index_grows_the_same_way(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "00000000000000000000.timeindex", 0, 4 << 20)
    step = RESERVE_STEP_BYTES // index.entry_size
    try:
        for i in range(step + 1):
            index.maybe_append(1000 + i, i)
        assert index.reserved_entries == 2 * step
        assert index.lookup(1000 + step).offset == step
    finally:
        index.close()


def test_a_reopened_index_reserves_again_as_it_grows(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 4 << 20)
    index.append(0, 0)
    index.close()  # trimmed to its one entry
    again = OffsetIndex(path, 0, 4 << 20)
    try:
        assert again.entries == 1 and again.reserved_entries == 0
        again.resize(4 << 20)  # the active segment's index is grown back on load
        step = RESERVE_STEP_BYTES // again.entry_size
        assert again.reserved_entries == step
        for i in range(1, 2 * step):
            again.append(i, i)
        assert again.entries == 2 * step and again.reserved_entries == 2 * step
        assert _allocated(path) >= again.entries * again.entry_size
    finally:
        again.close()


def test_a_new_log_takes_two_steps_of_index_disk_not_two_maximums(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0", {"index.interval.bytes": 1}) as log:
        segment = log.segments.active
        used = _allocated(segment.offset_index.path) + _allocated(segment.time_index.path)
        assert used <= 2 * RESERVE_STEP_BYTES  # was 2 x segment.index.bytes (20 MiB)
        for i in range(3 * RESERVE_STEP_BYTES // 8):  # past a step of the offset index
            log.append_records([Record(value=b"v", timestamp=1_700_000_000_000 + i)])
        assert segment.offset_index.entries <= segment.offset_index.reserved_entries
        assert segment.time_index.entries <= segment.time_index.reserved_entries
        assert log.read(3 * RESERVE_STEP_BYTES // 8 - 1, 1 << 10).records()
