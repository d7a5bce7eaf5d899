"""SparseIndexRule, the one home of where a segment's sparse indexes take entries, and the
writers that follow it: the general append (LogSegment.append), the recovery scan, and the C
appender, which mirrors the rule because it cannot call Python per batch. Property tests over
random batch sizes, index intervals and timestamps (rising, repeating, falling back)."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierlog.common.stats import LogStats
from tierlog.index.sparse import NO_ENTRY, OFFSET_AND_TIME_ENTRY, OFFSET_ENTRY, SparseIndexRule
from tierlog.log import segment_appender
from tierlog.log.segment import AppendedBatch, LogSegment
from tierlog.records import Record, build_batch
from tierlog.records.batch import RecordBatch

NOW = 1_700_000_000_000
LONG_AGO = 10 * 365 * 86_400_000

#: (batch size, max timestamp of the batch) pairs.
batch_runs = st.lists(st.tuples(st.integers(61, 20_000), st.integers(-1, 50)), max_size=80)


@given(interval=st.integers(0, 30_000), since=st.integers(0, 30_000),
       indexed=st.integers(-1, 40), batches=batch_runs)
def test_the_rule_places_entries_where_kafka_does(interval, since, indexed, batches):
    """An offset entry before a batch exactly when more than ``interval`` bytes were written
    since the last one; a time entry with it exactly when the max timestamp rose above the
    last time entry; ``since`` restarts at the batch that got the entry."""
    rule = SparseIndexRule(interval, since, indexed)
    max_ts = indexed
    for size, ts in batches:
        max_ts = max(max_ts, ts)
        before, indexed_before = rule.since, rule.indexed_timestamp
        due = rule.add(size, max_ts)
        if before <= interval:
            assert due == NO_ENTRY and rule.since == before + size
            assert rule.indexed_timestamp == indexed_before
            continue
        assert rule.since == size
        if max_ts > indexed_before:
            assert due == OFFSET_AND_TIME_ENTRY and rule.indexed_timestamp == max_ts
        else:
            assert due == OFFSET_ENTRY and rule.indexed_timestamp == indexed_before


def _expected(interval: int, since: int, indexed: int, position: int, max_ts: tuple[int, int],
              batches: list[tuple[int, int, int]]) -> tuple[list, list]:
    """Index entries the rule places for batches (size, last offset, max timestamp) written
    from ``position`` on, starting from the given tail state."""
    rule = SparseIndexRule(interval, since, indexed)
    offsets, times = [], []
    for size, last, ts in batches:
        if ts > max_ts[0]:
            max_ts = (ts, last)
        due = rule.add(size, max_ts[0])
        if due:
            offsets.append((last, position))
        if due == OFFSET_AND_TIME_ENTRY:
            times.append(max_ts)
        position += size
    return offsets, times


def _entries(segment: LogSegment) -> tuple[list, list]:
    offsets = [tuple(segment.offset_index.entry(i)) for i in range(segment.offset_index.entries)]
    times = [tuple(segment.time_index.entry(i)) for i in range(segment.time_index.entries)]
    return offsets, times


def _batch(records: int, value_size: int, ts: int, base_offset: int) -> bytes:
    return build_batch([Record(key=b"k", value=b"v" * value_size, timestamp=ts)
                        for _ in range(records)], base_offset=base_offset, now_ms=ts)


workloads = st.lists(st.tuples(st.integers(1, 4), st.integers(0, 3000), st.integers(-3, 3)),
                     min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(interval=st.integers(0, 12_000), workload=workloads)
def test_every_writer_places_entries_as_the_rule_does(interval, workload):
    """The same batches appended by the C appender, by LogSegment.append (the general path)
    and re-indexed by the recovery scan leave the index entries the rule places."""
    # Imported here so that a missing accelerator fails the run instead of skipping it.
    c_appender = importlib.import_module("tierlog.log._segment_appender").PlainAppender
    first = _batch(2, 10, NOW, 0)
    batches, offset, ts = [], 2, NOW
    for records, value_size, step in workload:
        ts += step * 1000
        batches.append(_batch(records, value_size, ts, offset))
        offset += records
    with tempfile.TemporaryDirectory() as tmp:
        segments = {}
        for name in ("c", "general"):
            (Path(tmp) / name).mkdir()
            segment = LogSegment.open(Path(tmp) / name, 0, index_interval_bytes=interval,
                                      max_index_size=1 << 20, time_ms=lambda: NOW)
            segment.append([first], [AppendedBatch(1, NOW, len(first))])
            segments[name] = segment
        # What the first (general) append left is where the rule starts from.
        start = segments["c"]
        views = [RecordBatch(data, 0) for data in batches]
        described = [(len(data), view.last_offset, view.max_timestamp)
                     for data, view in zip(batches, views, strict=True)]
        expected = _expected(
            interval, start.bytes_since_last_index_entry, start.time_index.last_entry.timestamp,
            start.log.size_in_bytes(), tuple(start.max_timestamp_and_offset), described)
        before = _entries(start)

        saved = segment_appender.PlainAppender
        segment_appender.PlainAppender = c_appender
        try:
            end = SimpleNamespace(next_offset=2)  # the log end each batch starts at
            appender = segments["c"].arm_plain_appends(1 << 30, LONG_AGO, 1 << 20, True, end,
                                                       LogStats())
            assert type(appender) is c_appender
            for data, view in zip(batches, views, strict=True):
                assert end.next_offset == view.base_offset
                assert appender.append(data, None) is not None
        finally:
            segment_appender.PlainAppender = saved
        segments["general"].append(batches, [AppendedBatch(last, max_ts, size)
                                             for size, last, max_ts in described])
        want = (before[0] + expected[0], before[1] + expected[1])
        assert _entries(segments["c"]) == want
        assert _entries(segments["general"]) == want
        # The scan rebuilds from the segment's start: the first batch is part of its walk.
        rebuilt = segments["general"]
        rebuilt.rebuild_indexes()
        size = len(first)
        scan_expected = _expected(interval, 0, -1, 0, (-1, 0),
                                  [(size, 1, NOW), *described])
        got = _entries(rebuilt)
        assert got[0] == scan_expected[0]
        # The scan also appends the roll/close entry (the max timestamp) when it rose after
        # the last entry it placed.
        assert got[1][:len(scan_expected[1])] == scan_expected[1]
        for segment in segments.values():
            segment.close()
