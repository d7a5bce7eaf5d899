"""first_record_at_or_after: the one home of the ListOffsets search inside a batch, used by
local segments (FileRecords.search_for_timestamp) and the remote tier (RemoteLogReader)."""

from __future__ import annotations

import random

import pytest

from tierlog.records.batch import LOG_APPEND_TIME, RecordBatch
from tierlog.records.builder import build_batch
from tierlog.records.file_records import TimestampAndOffset, first_record_at_or_after
from tierlog.records.record import Record


def _brute_force(records: list[tuple[int, int]], target: int, start: int
                 ) -> TimestampAndOffset | None:
    """(timestamp, offset) pairs in order: the first at or after both bounds."""
    for timestamp, offset in records:
        if timestamp >= target and offset >= start:
            return TimestampAndOffset(timestamp, offset)
    return None


@pytest.mark.parametrize("seed", range(60))
def test_matches_a_linear_scan_over_random_batches(seed: int) -> None:
    rng = random.Random(seed)
    base_offset = rng.randrange(0, 1 << 40)
    base_ts = rng.randrange(0, 1 << 41)
    # CreateTime timestamps need not grow with offsets: jitter both ways.
    stamps = [base_ts + rng.randrange(-1000, 1000) for _ in range(rng.randrange(1, 30))]
    batch = RecordBatch(build_batch([Record(b"k", b"v", timestamp=t) for t in stamps],
                                    base_offset=base_offset,
                                    compression=rng.choice(["none", "gzip"])))
    pairs = [(t, base_offset + i) for i, t in enumerate(stamps)]
    for _ in range(20):
        target = base_ts + rng.randrange(-1100, 1100)
        start = base_offset + rng.randrange(-2, len(stamps) + 2)
        assert first_record_at_or_after(batch, target, start) == _brute_force(pairs, target,
                                                                              start)


def test_log_append_time_batches_answer_with_the_batch_timestamp() -> None:
    batch = RecordBatch(build_batch([Record(b"k", b"v", timestamp=5), Record(timestamp=1)],
                                    base_offset=10, timestamp_type=LOG_APPEND_TIME,
                                    now_ms=1_000))
    assert first_record_at_or_after(batch, 999, 0) == TimestampAndOffset(1_000, 10)
    assert first_record_at_or_after(batch, 1_000, 11) == TimestampAndOffset(1_000, 11)
    assert first_record_at_or_after(batch, 1_001, 0) is None
