"""The columnar decoder of tierlog.reader (``tierlog.records.arrow``): its C twin
(``_columnar``) and its pure-Python twin (``_columnar_py``) give the same Arrow buffers for
every codec, null keys and values, headers, offset and timestamp bounds and LogAppendTime, and
refuse hostile bytes the same way (CorruptRecordError, nothing appended); ``decompress_into``
reuses one buffer.
"""

from __future__ import annotations

import dataclasses
import importlib
from array import array
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tier_builder import BuiltTier

from tierlog.errors import CorruptRecordError, DecompressionLimitError
from tierlog.reader import SCHEMA, SCHEMA_NO_HEADERS, RemoteTopicReader, read_split, schema
from tierlog.records import Record, RecordBatch
from tierlog.records.arrow import _columnar_py
from tierlog.records.arrow.builder import ColumnBuilder
from tierlog.records.arrow.codec import COLUMNS, OFFSET_COLUMNS
from tierlog.records.batch import HEADER_SIZE, LOG_APPEND_TIME
from tierlog.records.builder import build_batch
from tierlog.records.compression import CODEC_NAMES, decompress, decompress_into

try:
    _c = importlib.import_module("tierlog.records.arrow._columnar")
except ImportError:  # no compiler at install time: only the pure twin can be checked
    _c = None

TWINS = [pytest.param(_columnar_py.decode_batch, id="pure")]
if _c is not None:
    TWINS.append(pytest.param(_c.decode_batch, id="c"))
INT64_MIN = -(1 << 63)
SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _empty() -> tuple[list[bytearray], Any]:
    columns = [bytearray(4) if c in OFFSET_COLUMNS else bytearray() for c in range(len(COLUMNS))]
    used = array("q", (4 if c in OFFSET_COLUMNS else 0 for c in range(len(COLUMNS))))
    return columns, used


def _filled(columns: list[bytearray], used: Any) -> list[bytes]:
    return [bytes(c[:n]) for c, n in zip(columns, used, strict=True)]


def _decode_both(args: tuple[Any, ...]) -> list[tuple[str, object]]:
    """Each twin's outcome on ``args``: ("ok", (rows, buffers)) or ("error", type)."""
    outcomes: list[tuple[str, object]] = []
    decoders = [_columnar_py.decode_batch] + ([_c.decode_batch] if _c is not None else [])
    for decode in decoders:
        columns, used = _empty()
        before = _filled(columns, used)
        try:
            rows = decode(columns, used, *args)
        except CorruptRecordError as e:
            assert _filled(columns, used) == before, "a refused batch left rows behind"
            outcomes.append(("error", type(e)))
        else:
            outcomes.append(("ok", (rows, _filled(columns, used))))
    return outcomes


keys = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=12)),
                   max_size=3)
records = st.lists(st.tuples(keys, keys, headers, st.integers(-5000, 5000)), min_size=1,
                   max_size=30)


@SETTINGS
@given(rows=records, codec=st.sampled_from(sorted(CODEC_NAMES)), data=st.data(),
       log_append=st.booleans(), include_headers=st.booleans())
def test_twins_agree_with_each_other_and_with_records(rows, codec, data, log_append,
                                                      include_headers) -> None:
    base_offset = data.draw(st.integers(0, 1 << 40))
    base_ts = 1_700_000_000_000
    raw = build_batch([Record(key=k, value=v, headers=tuple(h), timestamp=base_ts + t)
                       for k, v, h, t in rows], compression=codec, base_offset=base_offset,
                      timestamp_type=LOG_APPEND_TIME if log_append else 0, now_ms=base_ts + 7)
    batch = RecordBatch(raw)
    n = len(rows)
    start = base_offset + data.draw(st.integers(0, n))
    end = base_offset + data.draw(st.integers(0, n + 1))
    min_ts = data.draw(st.sampled_from([INT64_MIN, base_ts, base_ts + 100]))
    builder = ColumnBuilder("t", 3, include_headers)
    section = decompress(batch.compression, raw[HEADER_SIZE:]) if codec != "none" else raw
    at = 0 if codec != "none" else HEADER_SIZE
    args = (section, at, len(section), n, base_offset, batch.base_timestamp, batch.timestamp_type,
            batch.max_timestamp if log_append else None, start, end, min_ts, include_headers)
    outcomes = _decode_both(args)
    assert all(o == outcomes[0] for o in outcomes)
    builder.add(*args[:-1])
    table = builder.build()
    assert table.schema == schema(include_headers)
    expected = [r for r in batch.records() if start <= r.offset < end and r.timestamp >= min_ts]
    got = table.to_pylist()
    assert [(g["key"], g["value"], g["offset"], g["topic"], g["partition"], g["timestampType"])
            for g in got] == [(r.key, r.value, r.offset, "t", 3, batch.timestamp_type)
                              for r in expected]
    assert [int(g["timestamp"].timestamp() * 1000) for g in got] == \
        [r.timestamp for r in expected]
    if include_headers:
        assert [g["headers"] for g in got] == [
            [{"key": k, "value": v} for k, v in r.headers] or None for r in expected]


def _section(rows: int = 5) -> tuple[bytes, int]:
    raw = build_batch([Record(key=b"k%d" % i if i % 2 else None, value=b"v" * i,
                              headers=(("h", b"x"), ("n", None)) if i % 3 else (),
                              timestamp=1000 + i) for i in range(rows)])
    return raw[HEADER_SIZE:], rows


@SETTINGS
@given(data=st.data(), include_headers=st.booleans())
def test_hostile_bytes_raise_the_same_error_in_both_twins(data, include_headers) -> None:
    section, rows = _section()
    mutated = bytearray(section)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "cut", "grow", "varint"]))
        if kind == "flip" and mutated:
            i = data.draw(st.integers(0, len(mutated) - 1))
            mutated[i] = data.draw(st.integers(0, 255))
        elif kind == "cut" and mutated:
            del mutated[data.draw(st.integers(0, len(mutated) - 1)):]
        elif kind == "grow":
            mutated += data.draw(st.binary(min_size=1, max_size=8))
        else:  # an endless or overlong varint
            i = data.draw(st.integers(0, max(0, len(mutated) - 1)))
            mutated[i:i] = b"\xff" * data.draw(st.integers(1, 12))
    count = data.draw(st.sampled_from([rows, rows - 1, rows + 1, 0, 1 << 30, -1]))
    args = (bytes(mutated), 0, len(mutated), count, 10, 1000, 0, None, INT64_MIN, 1 << 62,
            INT64_MIN, include_headers)
    outcomes = _decode_both(args)
    assert all(o == outcomes[0] for o in outcomes), outcomes


@pytest.mark.parametrize("decode", TWINS)
@pytest.mark.parametrize(("damage", "message"), [
    (lambda s: s[:-3], "record"),
    (lambda s: b"\xff" * 11 + s, "varint"),
    (lambda s: b"\x7e" + s[1:], "record 0"),
    (lambda s: s + b"\x00", "remain"),
])
def test_hostile_records_name_the_record(decode, damage, message) -> None:
    section, rows = _section()
    columns, used = _empty()
    bad = damage(section)
    with pytest.raises(CorruptRecordError, match=message):
        decode(columns, used, bad, 0, len(bad), rows, 0, 0, 0, None, INT64_MIN, 1 << 62,
               INT64_MIN, True)
    assert list(used) == list(_empty()[1])


@pytest.mark.parametrize("decode", TWINS)
def test_count_mismatch_and_range_checks(decode) -> None:
    section, rows = _section()
    for count in (rows - 1, rows + 1, 1 << 40):
        with pytest.raises(CorruptRecordError):
            decode(*_empty(), section, 0, len(section), count, 0, 0, 0, None, INT64_MIN,
                   1 << 62, INT64_MIN, False)
    with pytest.raises(ValueError, match="outside a buffer"):
        decode(*_empty(), section, 0, len(section) + 1, rows, 0, 0, 0, None, INT64_MIN, 1 << 62,
               INT64_MIN, False)
    with pytest.raises(CorruptRecordError, match="offset does not fit int64"):
        decode(*_empty(), section, 0, len(section), rows, (1 << 63) - 2, 0, 0, None, INT64_MIN,
               INT64_MIN + 1, INT64_MIN, False)


@pytest.mark.parametrize("decode", TWINS)
def test_a_non_utf8_header_key_is_refused(decode) -> None:
    raw = build_batch([Record(key=None, value=b"v", headers=(("\u00e9", b"x"),), timestamp=1)])
    section = bytearray(raw[HEADER_SIZE:])
    at = section.index("\u00e9".encode())
    section[at + 1] = 0x41  # a lead byte with no continuation
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        decode(*_empty(), bytes(section), 0, len(section), 1, 0, 0, 0, None, INT64_MIN,
               1 << 62, INT64_MIN, False)


def test_builder_reuses_nothing_arrow_holds_and_cuts_between_builds() -> None:
    raw = build_batch([Record(key=b"a", value=b"b" * 10, timestamp=5)] * 3, base_offset=7)
    builder = ColumnBuilder("t", 0)
    for _ in range(2):
        builder.add(raw, HEADER_SIZE, len(raw), 3, 7, 5, 0, None, INT64_MIN, 1 << 62, INT64_MIN)
    first = builder.build()
    builder.add(raw, HEADER_SIZE, len(raw), 3, 7, 5, 0, None, 8, 9, INT64_MIN)
    second = builder.build()
    assert first.num_rows == 6 and first.column("offset").to_pylist() == [7, 8, 9] * 2
    assert second.column("offset").to_pylist() == [8]
    assert first.column("headers").null_count == 6
    first.validate(full=True)
    second.validate(full=True)
    assert len(builder) == 0 and builder.build().num_rows == 0


@pytest.mark.parametrize("codec", sorted(CODEC_NAMES))
def test_decompress_into_reuses_one_buffer(codec: str) -> None:
    out = bytearray()
    for size in (100_000, 10, 300_000, 0, 5000):
        raw = build_batch([Record(key=None, value=bytes(range(256)) * (size // 256 + 1),
                                  timestamp=1)], compression=codec)
        section = memoryview(raw)[HEADER_SIZE:]
        written = decompress_into(RecordBatch(raw).compression, section, out)
        assert bytes(out[:written]) == decompress(RecordBatch(raw).compression, section)
    assert len(out) >= 300_000


def test_decompress_into_keeps_the_bomb_bound() -> None:
    raw = build_batch([Record(key=None, value=bytes(1 << 20), timestamp=1)], compression="zstd")
    out = bytearray()
    with pytest.raises(DecompressionLimitError):
        decompress_into(4, memoryview(raw)[HEADER_SIZE:], out, max_bytes=1 << 16)
    assert len(out) <= 1 << 16


# --- read_split end to end ---------------------------------------------------------------


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_without_headers_the_seven_columns_are_the_same(tier: BuiltTier, isolation: str) -> None:
    splits = RemoteTopicReader(tier.url, split_bytes=900).plan("orders", isolation_level=isolation)
    with_headers = pa.Table.from_batches(
        [b for s in splits for b in read_split(s)], schema=SCHEMA)
    without = pa.Table.from_batches(
        [b for s in splits for b in read_split(dataclasses.replace(s, include_headers=False))],
        schema=SCHEMA_NO_HEADERS)
    assert with_headers.num_rows > 0
    assert with_headers.drop_columns(["headers"]).equals(without)
    assert with_headers.column("headers").null_count < with_headers.num_rows
    assert schema(False) == SCHEMA_NO_HEADERS and schema() == SCHEMA


def test_a_damaged_record_names_the_object_and_batch(tmp_path: Path) -> None:
    log_path = tmp_path / "tier" / "x.log"
    log_path.parent.mkdir()
    raw = bytearray(build_batch([Record(key=b"k", value=b"v" * 20, timestamp=1)] * 4,
                                base_offset=0))
    raw[HEADER_SIZE] = 0x7E  # the first record's length runs past the batch
    from crc32c import crc32c  # a CRC-valid batch: else its CRC failure is what is reported

    raw[17:21] = crc32c(bytes(raw[21:])).to_bytes(4, "big")
    log_path.write_bytes(bytes(raw))
    from tierlog.reader import ReadSplit
    split = ReadSplit(url=(tmp_path / "tier").as_uri(), storage_options={}, topic="t",
                      partition=0, log_path=str(log_path), byte_start=0, byte_end=len(raw),
                      start_offset=0, end_offset=4, verify_crc=False, segment_last_offset=3)
    with pytest.raises(CorruptRecordError, match=r"x\.log, batch at offset 0 .*record 0"):
        list(read_split(split))
