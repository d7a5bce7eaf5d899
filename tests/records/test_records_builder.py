"""build_batch / build_control_batch: arguments, header values, exact bytes and errors."""

from __future__ import annotations

import struct
import time

import pytest
from crc32c import crc32c

from tierlog.errors import UnsupportedCompressionError
from tierlog.records import ABORT, COMMIT, Record, RecordBatch, build_batch, build_control_batch
from tierlog.records.batch import HEADER_SIZE
from tierlog.records.compression import decompress

NOW = 1_700_000_000_000


def records(n: int = 3) -> list[Record]:
    return [Record(key=b"k%d" % i, value=b"v" * 50, timestamp=NOW + i) for i in range(n)]


def test_uncompressed_batch_bytes_are_exact() -> None:
    data = build_batch([Record(key=b"k", value=b"v", timestamp=NOW)], base_offset=3,
                       partition_leader_epoch=2, now_ms=NOW)
    # one record: length 8 | attrs 0 | tsDelta 0 | offsetDelta 0 | key len 1 "k" |
    # value len 1 "v" | 0 headers (zigzag varints)
    body = bytes([16, 0, 0, 0, 2]) + b"k" + bytes([2]) + b"v" + bytes([0])
    covered = struct.pack(">hiqqqhii", 0, 0, NOW, NOW, -1, -1, -1, 1) + body
    expected = struct.pack(">qiibI", 3, 49 + len(body), 2, 2, crc32c(covered)) + covered
    assert data == expected


def test_compressed_body_is_the_codec_output_of_the_plain_body() -> None:
    plain = build_batch(records(10), now_ms=NOW)
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        packed = build_batch(records(10), compression=codec, now_ms=NOW)
        assert packed[21] == 0 and packed[22] == (["none", "gzip", "snappy", "lz4", "zstd"].index(codec))
        assert decompress(codec, packed[HEADER_SIZE:]) == plain[HEADER_SIZE:]
        assert packed[23:61] == plain[23:61]  # same counts, timestamps and producer fields


def test_returns_bytes_and_batch_length_covers_everything() -> None:
    data = build_batch(records(), compression="zstd", now_ms=NOW)
    assert type(data) is bytes
    assert struct.unpack_from(">i", data, 8)[0] == len(data) - 12


def test_empty_records_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])


@pytest.mark.parametrize("timestamp_type", [2, -1, "log"])
def test_bad_timestamp_type(timestamp_type: object) -> None:
    with pytest.raises(ValueError, match="timestamp_type"):
        build_batch(records(), timestamp_type=timestamp_type)  # type: ignore[arg-type]


@pytest.mark.parametrize("compression", ["brotli", 9])
def test_unknown_compression(compression: object) -> None:
    with pytest.raises(UnsupportedCompressionError, match=str(compression)):
        build_batch(records(), compression=compression)  # type: ignore[arg-type]


@pytest.mark.parametrize("compression", ["GZIP", "Snappy", "lz4", "uncompressed", 4])
def test_compression_by_name_or_id(compression: int | str) -> None:
    b = RecordBatch(build_batch(records(), compression=compression, now_ms=NOW))
    assert b.compression == {"GZIP": 1, "Snappy": 2, "lz4": 3, "uncompressed": 0, 4: 4}[compression]
    assert [r.key for r in b.records()] == [b"k0", b"k1", b"k2"]


def test_compression_level_is_used() -> None:
    many = [Record(value=(b"abcdefgh%d" % (i % 97)) * 40, timestamp=NOW) for i in range(400)]
    fast = build_batch(many, compression="zstd", compression_level=1, now_ms=NOW)
    small = build_batch(many, compression="zstd", compression_level=19, now_ms=NOW)
    assert fast != small
    assert RecordBatch(fast).records() == RecordBatch(small).records()


@pytest.mark.parametrize(
    "field",
    [{"producer_epoch": 40_000}, {"base_sequence": 2**31}, {"base_offset": 2**63},
     {"partition_leader_epoch": 2**31}],
)
def test_out_of_range_header_fields(field: dict) -> None:
    with pytest.raises(ValueError, match="out of range"):
        build_batch(records(), now_ms=NOW, **field)


def test_timestamps() -> None:
    rs = [Record(value=b"a", timestamp=NOW + 10), Record(value=b"b", timestamp=NOW - 10),
          Record(value=b"c", timestamp=None)]
    b = RecordBatch(build_batch(rs, now_ms=NOW + 100))
    assert b.base_timestamp == NOW + 10
    assert b.max_timestamp == NOW + 100
    assert [r.timestamp for r in b.records()] == [NOW + 10, NOW - 10, NOW + 100]


def test_wall_clock_when_now_is_not_given() -> None:
    before = time.time_ns() // 1_000_000
    b = RecordBatch(build_batch([Record(value=b"x")]))
    after = time.time_ns() // 1_000_000
    assert before <= b.base_timestamp == b.max_timestamp <= after


def test_log_append_time_sets_max_timestamp_to_now() -> None:
    b = RecordBatch(build_batch(records(), timestamp_type=1, now_ms=NOW + 999))
    assert (b.timestamp_type, b.max_timestamp, b.base_timestamp) == (1, NOW + 999, NOW)


def test_delete_horizon_sets_bit_6_and_base_timestamp() -> None:
    b = RecordBatch(build_batch(records(), delete_horizon_ms=NOW + 77, now_ms=NOW))
    assert b.attributes & 0x40
    assert b.base_timestamp == NOW + 77
    assert [r.timestamp for r in b.records()] == [NOW, NOW + 1, NOW + 2]


def test_input_records_are_not_modified() -> None:
    rs = [Record(key=b"k", value=b"v")]
    build_batch(rs, base_offset=50, now_ms=NOW)
    assert (rs[0].offset, rs[0].timestamp) == (-1, None)


@pytest.mark.parametrize("marker", [ABORT, COMMIT])
def test_control_batch_bytes(marker: int) -> None:
    data = build_control_batch(marker, producer_id=11, producer_epoch=2, coordinator_epoch=5,
                               base_offset=40, timestamp=NOW, partition_leader_epoch=9)
    key = struct.pack(">hh", 0, marker)
    value = struct.pack(">hi", 0, 5)
    inner = bytes([0, 0, 0, 2 * len(key)]) + key + bytes([2 * len(value)]) + value + bytes([0])
    body = bytes([2 * len(inner)]) + inner
    covered = struct.pack(">hiqqqhii", 0x30, 0, NOW, NOW, 11, 2, -1, 1) + body
    assert data == struct.pack(">qiibI", 40, 49 + len(body), 9, 2, crc32c(covered)) + covered


def test_control_batch_rejects_other_types() -> None:
    for bad in (2, 3, -1):
        with pytest.raises(ValueError):
            build_control_batch(bad, producer_id=1, producer_epoch=0)
