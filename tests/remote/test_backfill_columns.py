"""Encoding a batch's records section in bulk from Arrow columns (encode_columns, C and
pure-Python twins) gives the bytes the engine's builder gives the same Records, and the
backfill's batch cut is a producer's batch.size rule."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import BackfillError
from tierlog.records import _codec_py
from tierlog.records._codec import encode_columns
from tierlog.records.builder import build_batch, build_batch_from_columns
from tierlog.records.record import Record
from tierlog.remote.ops.backfill import _timestamps
from tierlog.remote.ops.backfill_stage import (
    _RECORD_OVERHEAD,
    ROW_SCHEMA,
    batch_ends,
    record_columns,
)

_blob = st.one_of(st.none(), st.binary(max_size=40))
_header = st.tuples(st.text(max_size=6), _blob)
_row = st.tuples(_blob, _blob, st.one_of(st.none(), st.lists(_header, max_size=3)),
                 st.integers(-(1 << 40), 1 << 40))


def _table(rows):
    return pa.table({
        "key": pa.array([r[0] for r in rows], pa.binary()),
        "value": pa.array([r[1] for r in rows], pa.binary()),
        "headers": pa.array([None if r[2] is None else [{"key": k, "value": v} for k, v in r[2]]
                             for r in rows], ROW_SCHEMA.field("headers").type),
        "timestamp": pa.array([r[3] for r in rows], pa.int64())}, schema=ROW_SCHEMA)


def _records(rows):
    return [Record(k, v, tuple(h or ()), ts) for k, v, h, ts in rows]


@settings(max_examples=150, deadline=None)
@given(st.lists(_row, min_size=1, max_size=30), st.data())
def test_columns_encode_as_the_builder_encodes_records(rows, data):
    # Slicing gives arrays a non-zero offset, as Spark's batches and the writer's remainders have.
    skip = data.draw(st.integers(0, len(rows) - 1))
    table = _table(rows).slice(skip).combine_chunks() if data.draw(st.booleans()) \
        else _table(rows).slice(skip)
    columns = record_columns(table.combine_chunks() if table.column(0).num_chunks != 1
                             else table)
    start = data.draw(st.integers(0, len(rows) - skip - 1))
    end = data.draw(st.integers(start + 1, len(rows) - skip))
    expected = _records(rows[skip:])[start:end]
    codec = data.draw(st.sampled_from(["none", "gzip", "zstd"]))
    built, max_ts = build_batch_from_columns(columns, start, end, compression=codec)
    assert built == build_batch(expected, compression=codec, now_ms=0)
    assert max_ts == max(-1, *(r.timestamp for r in expected))  # the header's maxTimestamp
    base = expected[0].timestamp
    python = _codec_py.encode_columns(columns, start, end, base)
    assert encode_columns(columns, start, end, base) == python
    assert python == _codec_py.encode_records(expected, base, base)


def test_offsets_outside_the_data_are_a_value_error_in_both_twins():
    # Imported directly (not through ACCELERATED, which TIERLOG_PURE_PYTHON turns off), so a
    # missing accelerator fails the run instead of skipping the C twin.
    from tierlog.records import _speedups

    columns = record_columns(_table([(b"k", b"value", None, 1)]))
    bad = columns._replace(value_data=b"va")
    for encode in (_speedups.encode_columns, _codec_py.encode_columns):
        with pytest.raises(ValueError, match=r"record 0: value offsets 0\.\.5 outside 0\.\.2"):
            encode(bad, 0, 1, 1)
        with pytest.raises(ValueError, match="not a range"):
            encode(columns, 1, 0, 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.booleans()), min_size=1, max_size=60),
       st.integers(1, 2000))
def test_batch_ends_cut_where_batch_size_is_reached(sizes, limit):
    rows = [(None if not keyed else b"k" * 3, b"v" * n, None, 0) for n, keyed in sizes]
    ends, pending = [], 0
    for i, (key, value, _, _) in enumerate(rows):  # the producer's rule, record by record
        pending += len(value) + len(key or b"") + _RECORD_OVERHEAD
        if pending >= limit:
            ends.append(i + 1)
            pending = 0
    assert batch_ends(_table(rows), limit) == ends


@pytest.mark.parametrize(("unit", "raw", "ms"), [
    ("us", 1_700_000_000_000_123, 1_700_000_000_000), ("us", -1, -1), ("us", -1000, -1),
    ("ns", 1_999_999, 1), ("ns", -1_000_001, -2), ("s", 3, 3000), ("ms", -7, -7)])
def test_spark_timestamps_floor_to_milliseconds(unit, raw, ms):
    batch = pa.record_batch({"timestamp": pa.array([raw, None], pa.timestamp(unit, tz="UTC"))})
    assert _timestamps(batch, 42).to_pylist() == [ms, 42]


def test_a_bad_timestamp_type_is_named():
    batch = pa.record_batch({"timestamp": pa.array(["x"])})
    with pytest.raises(BackfillError, match="'timestamp' must be a timestamp"):
        _timestamps(batch, 0)
