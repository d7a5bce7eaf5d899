"""RecordBatch: header fields and attribute bits, records, CRC and sanity checks, truncation,
zero-copy views over bytearray/mmap, the in-place patchers, and real Kafka 3.7 segment files.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from tierlog.errors import CorruptRecordError, TruncatedBatchError, UnsupportedMagicError
from tierlog.records import (
    ABORT,
    COMMIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    ControlRecord,
    Record,
    RecordBatch,
    build_batch,
    build_control_batch,
    iter_batches,
)
from tierlog.records.batch import (
    ATTRIBUTES,
    BASE_OFFSET,
    BASE_SEQUENCE,
    BASE_TIMESTAMP,
    CRC,
    HEADER,
    LAST_OFFSET_DELTA,
    LENGTH,
    MAGIC,
    MAX_TIMESTAMP,
    PARTITION_LEADER_EPOCH,
    PRODUCER_EPOCH,
    PRODUCER_ID,
    RECORDS_COUNT,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from tierlog.records.control import (
    LEADER_CHANGE,
    decode_control_record,
    encode_control_key,
    encode_control_value,
)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
NOW = 1_700_000_000_000


def sample_records(n: int = 5, base_ts: int = NOW - 10_000) -> list[Record]:
    return [
        Record(key=f"key-{i}".encode(), value=(f"value {i} " * 20).encode(),
               headers=[("trace", f"t{i}".encode())], timestamp=base_ts + 7 * i)
        for i in range(n)
    ]


def odd_records() -> list[Record]:
    """Null/empty keys and values, null header values, unicode header keys, out-of-order times."""
    return [
        Record(key=None, value=b"no key", timestamp=NOW - 5),
        Record(key=b"tombstone", value=None, timestamp=NOW - 9),
        Record(key=b"", value=b"", timestamp=NOW + 3),
        Record(key=b"k", value=b"v", headers=[("h-null", None), ("h-empty", b"")],
               timestamp=NOW),
        Record(key="ключ".encode(), value=bytes(range(256)),
               headers=[("ünïcødé-κλειδί-🔑", b"\x00\xff"), ("", b"empty key"), ("dup", b"1"),
                        ("dup", None)], timestamp=NOW - 1000),
        Record(key=None, value=None, timestamp=NOW + 1),
    ]


def fix_crc(buf: bytearray, position: int = 0) -> None:
    """Rewrite the CRC after a deliberate edit, so only the edit under test is wrong."""
    size = struct.unpack_from(">i", buf, position + LENGTH)[0] + LOG_OVERHEAD
    struct.pack_into(">I", buf, position + CRC,
                     crc32c(memoryview(buf)[position + ATTRIBUTES:position + size]))


def assert_same_records(got: list[Record], sent: list[Record], base_offset: int) -> None:
    assert len(got) == len(sent)
    for i, (g, s) in enumerate(zip(got, sent, strict=True)):
        assert g.offset == base_offset + i
        assert g.timestamp == s.timestamp
        assert g.key == s.key
        assert g.value == s.value
        assert tuple(g.headers) == tuple(s.headers)


# --- header -----------------------------------------------------------------------------


def test_header_layout_constants() -> None:
    assert HEADER.format == ">qiibIhiqqqhii"
    assert HEADER.size == HEADER_SIZE == 61
    assert LOG_OVERHEAD == 12
    offsets = [BASE_OFFSET, LENGTH, PARTITION_LEADER_EPOCH, MAGIC, CRC, ATTRIBUTES,
               LAST_OFFSET_DELTA, BASE_TIMESTAMP, MAX_TIMESTAMP, PRODUCER_ID, PRODUCER_EPOCH,
               BASE_SEQUENCE, RECORDS_COUNT]
    assert offsets == [0, 8, 12, 16, 17, 21, 23, 27, 35, 43, 51, 53, 57]
    # each offset is where HEADER puts that field
    sizes = [struct.calcsize(">" + c) for c in HEADER.format[1:]]
    assert offsets == [sum(sizes[:i]) for i in range(len(sizes))]


def test_every_header_field_round_trips() -> None:
    records = sample_records(4)
    data = build_batch(
        records, base_offset=1_234_567_890_123, producer_id=987_654_321_000, producer_epoch=32_000,
        base_sequence=2_000_000_000, is_transactional=True, partition_leader_epoch=77,
        now_ms=NOW,
    )
    b = RecordBatch(data)
    assert b.base_offset == 1_234_567_890_123
    assert b.batch_length == len(data) - 12
    assert b.size_in_bytes == len(data)
    assert b.partition_leader_epoch == 77
    assert b.magic == 2
    assert b.crc == crc32c(data[21:])
    assert b.attributes == 0x10
    assert b.last_offset_delta == 3
    assert b.base_timestamp == records[0].timestamp
    assert b.max_timestamp == records[-1].timestamp
    assert b.producer_id == 987_654_321_000
    assert b.producer_epoch == 32_000
    assert b.base_sequence == 2_000_000_000
    assert b.record_count == 4
    assert b.last_offset == 1_234_567_890_126
    assert b.next_offset == 1_234_567_890_127
    assert b.last_sequence == 2_000_000_003
    assert b.position == 0
    # the properties agree with a plain struct unpack of the bytes
    assert HEADER.unpack_from(data) == (
        b.base_offset, b.batch_length, b.partition_leader_epoch, b.magic, b.crc, b.attributes,
        b.last_offset_delta, b.base_timestamp, b.max_timestamp, b.producer_id, b.producer_epoch,
        b.base_sequence, b.record_count,
    )
    b.ensure_valid()
    assert b.is_valid()


def test_defaults_are_a_plain_non_idempotent_batch() -> None:
    b = RecordBatch(build_batch(sample_records(1), now_ms=NOW))
    assert (b.base_offset, b.partition_leader_epoch) == (0, -1)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1)
    assert b.last_sequence == -1
    assert b.attributes == 0
    assert not (b.is_transactional or b.is_control or b.has_delete_horizon)
    assert b.delete_horizon_ms is None
    assert b.timestamp_type == 0


def test_last_sequence_wraps_past_int32_max() -> None:
    b = RecordBatch(build_batch(sample_records(5), producer_id=1, producer_epoch=0,
                                base_sequence=2**31 - 2, now_ms=NOW))
    # sequences 2147483646, 2147483647, 0, 1, 2
    assert b.last_sequence == 2


@pytest.mark.parametrize("codec_id", range(5))
@pytest.mark.parametrize("timestamp_type", [0, 1])
@pytest.mark.parametrize("transactional", [False, True])
@pytest.mark.parametrize("horizon", [None, NOW + 86_400_000])
def test_attribute_bits(codec_id: int, timestamp_type: int, transactional: bool,
                        horizon: int | None) -> None:
    records = sample_records(3)
    data = build_batch(records, compression=codec_id, timestamp_type=timestamp_type,
                       is_transactional=transactional, producer_id=9 if transactional else -1,
                       producer_epoch=0 if transactional else -1, delete_horizon_ms=horizon,
                       now_ms=NOW)
    b = RecordBatch(data)
    expected = codec_id | timestamp_type << 3 | transactional << 4 | (horizon is not None) << 6
    assert b.attributes == expected
    assert struct.unpack_from(">h", data, ATTRIBUTES)[0] == expected
    assert b.compression == codec_id
    assert b.timestamp_type == timestamp_type
    assert b.is_transactional is transactional
    assert b.is_control is False
    assert b.has_delete_horizon is (horizon is not None)
    assert b.delete_horizon_ms == horizon
    b.ensure_valid()
    got = b.records()
    if timestamp_type == 1:
        assert b.max_timestamp == NOW
        assert [r.timestamp for r in got] == [NOW] * 3
    else:
        assert [r.timestamp for r in got] == [r.timestamp for r in records]
    assert [r.value for r in got] == [r.value for r in records]


# --- records ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_records_round_trip_with_odd_fields(codec: str) -> None:
    records = odd_records()
    data = build_batch(records, compression=codec, base_offset=500, now_ms=NOW)
    b = RecordBatch(data)
    b.ensure_valid()
    assert b.base_timestamp == NOW - 5  # the first record's, not the smallest
    assert b.max_timestamp == NOW + 3
    got = b.records()
    assert_same_records(got, records, 500)
    assert got[1].value is None and got[2].value == b""
    assert got[0].key is None and got[2].key == b""
    assert got[3].headers == (("h-null", None), ("h-empty", b""))


@pytest.mark.parametrize("codec", CODECS)
def test_records_of_a_large_batch_spanning_many_compression_blocks(codec: str) -> None:
    records = [Record(key=str(i).encode(), value=bytes([i % 251]) * 300, timestamp=NOW + i)
               for i in range(1000)]  # ~300 KB: several xerial 32 KiB and lz4 64 KiB blocks
    b = RecordBatch(build_batch(records, compression=codec, now_ms=NOW))
    b.ensure_valid()
    assert_same_records(b.records(), records, 0)


def test_missing_timestamps_become_now() -> None:
    records = [Record(value=b"a"), Record(value=b"b", timestamp=NOW + 50), Record(value=b"c")]
    b = RecordBatch(build_batch(records, now_ms=NOW))
    assert b.base_timestamp == NOW
    assert b.max_timestamp == NOW + 50
    assert [r.timestamp for r in b.records()] == [NOW, NOW + 50, NOW]


def test_log_append_time_batch_reports_max_timestamp_for_every_record() -> None:
    records = sample_records(4, base_ts=NOW - 60_000)
    b = RecordBatch(build_batch(records, timestamp_type=1, now_ms=NOW))
    assert b.timestamp_type == 1
    assert b.base_timestamp == NOW - 60_000  # create time of the first record is kept
    assert b.max_timestamp == NOW
    assert {r.timestamp for r in b.records()} == {NOW}


def test_delete_horizon_is_the_base_timestamp_and_records_keep_their_times() -> None:
    records = sample_records(3, base_ts=NOW - 5)
    horizon = NOW + 3_600_000
    b = RecordBatch(build_batch(records, delete_horizon_ms=horizon, now_ms=NOW))
    assert b.has_delete_horizon
    assert b.base_timestamp == horizon == b.delete_horizon_ms
    assert b.max_timestamp == records[-1].timestamp
    assert [r.timestamp for r in b.records()] == [r.timestamp for r in records]


def test_empty_batch_left_by_compaction_has_no_records() -> None:
    buf = bytearray(build_batch(sample_records(1), now_ms=NOW))
    del buf[HEADER_SIZE:]
    struct.pack_into(">i", buf, LENGTH, HEADER_SIZE - LOG_OVERHEAD)
    struct.pack_into(">i", buf, LAST_OFFSET_DELTA, 4)  # the original offset range is kept
    struct.pack_into(">i", buf, RECORDS_COUNT, 0)
    fix_crc(buf)
    b = RecordBatch(buf)
    b.ensure_valid()
    assert b.records() == []
    assert b.last_offset == 4


def test_batch_in_the_middle_of_a_buffer() -> None:
    first = build_batch(sample_records(2), now_ms=NOW)
    second = build_batch(sample_records(3), base_offset=2, compression="zstd", now_ms=NOW)
    buf = first + second
    b = RecordBatch(buf, len(first))
    assert b.position == len(first)
    assert b.base_offset == 2
    b.ensure_valid()
    assert [r.offset for r in b.records()] == [2, 3, 4]
    assert bytes(b.view()) == second


# --- control batches ------------------------------------------------------------------------


@pytest.mark.parametrize("marker", [ABORT, COMMIT])
def test_control_batch(marker: int) -> None:
    data = build_control_batch(marker, producer_id=4242, producer_epoch=7, coordinator_epoch=13,
                               base_offset=99, timestamp=NOW, partition_leader_epoch=3)
    b = RecordBatch(data)
    b.ensure_valid()
    assert b.is_control and b.is_transactional
    assert b.attributes == 0x30
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (4242, 7, -1)
    assert (b.base_offset, b.record_count, b.last_offset_delta) == (99, 1, 0)
    assert b.base_timestamp == b.max_timestamp == NOW
    assert b.partition_leader_epoch == 3
    (record,) = b.records()
    assert record.key == struct.pack(">hh", 0, marker)
    assert record.value == struct.pack(">hi", 0, 13)
    assert (record.offset, record.timestamp) == (99, NOW)
    control = b.control_record()
    assert control == ControlRecord(type=marker, version=0, coordinator_epoch=13)
    assert control.is_transaction_marker
    assert control.type_name == ("ABORT" if marker == ABORT else "COMMIT")


def test_data_batch_has_no_control_record() -> None:
    assert RecordBatch(build_batch(sample_records(1), now_ms=NOW)).control_record() is None


def test_control_batch_without_timestamp_uses_the_clock() -> None:
    import time

    before = time.time_ns() // 1_000_000
    b = RecordBatch(build_control_batch(COMMIT, producer_id=1, producer_epoch=0))
    after = time.time_ns() // 1_000_000
    assert before <= b.max_timestamp <= after


def test_control_record_codec() -> None:
    assert encode_control_key(COMMIT) == b"\x00\x00\x00\x01"
    assert encode_control_value(-2) == b"\x00\x00\xff\xff\xff\xfe"
    assert decode_control_record(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x05") == (0, 0, 5)
    # a newer value version is read as version 0; extra bytes are ignored
    assert decode_control_record(b"\x00\x01\x00\x01", b"\x00\x03\x00\x00\x00\x05xx") == (1, 1, 5)
    other = decode_control_record(b"\x00\x00\x00\x02", b"anything")
    assert other == (LEADER_CHANGE, 0, -1)
    assert not other.is_transaction_marker and other.type_name == "LEADER_CHANGE"
    assert decode_control_record(b"\x00\x00\x00\x63", None).type_name == "UNKNOWN(99)"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, b"\x00" * 6, "key"),
        (b"\x00\x00\x00", b"\x00" * 6, "key"),
        (b"\xff\xff\x00\x01", b"\x00" * 6, "version -1"),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00", "COMMIT marker value"),
        (b"\x00\x00\x00\x00", None, "ABORT marker value"),
    ],
)
def test_control_record_rejects_malformed(key: bytes | None, value: bytes | None,
                                          message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decode_control_record(key, value)


def test_control_batch_with_a_short_key_names_the_batch() -> None:
    buf = bytearray(build_batch([Record(key=b"\x00", value=b"", timestamp=NOW)], base_offset=8,
                                now_ms=NOW))
    struct.pack_into(">h", buf, ATTRIBUTES, 0x30)
    fix_crc(buf)
    with pytest.raises(CorruptRecordError, match=r"batch at offset 8 .*control record check failed"):
        RecordBatch(buf).control_record()


def test_control_types_are_rejected_by_the_builder() -> None:
    with pytest.raises(ValueError, match="ABORT"):
        build_control_batch(LEADER_CHANGE, producer_id=1, producer_epoch=0)


# --- corruption ----------------------------------------------------------------------------


@pytest.mark.parametrize("where", [ATTRIBUTES, BASE_TIMESTAMP + 3, RECORDS_COUNT, HEADER_SIZE + 5,
                                   -1])
def test_flipped_byte_fails_the_crc_and_names_the_offset(where: int) -> None:
    buf = bytearray(build_batch(sample_records(3), base_offset=4321, now_ms=NOW))
    stored = RecordBatch(buf).crc
    buf[where] ^= 0x40
    b = RecordBatch(buf)
    assert not b.is_valid()
    computed = b.compute_crc()
    with pytest.raises(CorruptRecordError) as info:
        b.ensure_valid()
    message = str(info.value)
    assert "offset 4321" in message
    assert f"{stored:#010x}" in message and f"{computed:#010x}" in message


def test_base_offset_and_leader_epoch_are_outside_the_crc() -> None:
    buf = bytearray(build_batch(sample_records(2), now_ms=NOW))
    buf[0:8] = struct.pack(">q", 10**12)
    buf[12:16] = struct.pack(">i", 55)
    batch = RecordBatch(buf)
    batch.ensure_valid()
    assert batch.is_valid() and batch.crc == crc32c(bytes(buf[ATTRIBUTES:]))
    assert (batch.base_offset, batch.partition_leader_epoch) == (10**12, 55)
    buf[ATTRIBUTES] ^= 0x40                      # a byte inside the CRC's range does count
    assert not RecordBatch(buf).is_valid()


def test_crc_and_length_of_a_built_batch_match_the_bytes() -> None:
    data = build_batch(sample_records(3), compression="gzip", now_ms=NOW)
    assert struct.unpack_from(">I", data, CRC)[0] == crc32c(data[ATTRIBUTES:])
    assert struct.unpack_from(">i", data, LENGTH)[0] == len(data) - LOG_OVERHEAD
    assert RecordBatch(data).compute_crc() == crc32c(data[ATTRIBUTES:])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (RECORDS_COUNT, -1, "negative record count -1"),
        (LAST_OFFSET_DELTA, -1, "negative lastOffsetDelta"),
        (LAST_OFFSET_DELTA, 1, "declares 3 records but its lastOffsetDelta 1"),
    ],
)
def test_ensure_valid_checks_counts(field: int, value: int, message: str) -> None:
    buf = bytearray(build_batch(sample_records(3), base_offset=70, now_ms=NOW))
    struct.pack_into(">i", buf, field, value)
    fix_crc(buf)
    b = RecordBatch(buf)
    assert b.is_valid()  # the CRC is fine; the counts are not
    with pytest.raises(CorruptRecordError, match=message) as info:
        b.ensure_valid()
    assert "offset 70" in str(info.value)


def test_negative_count_fails_records() -> None:
    buf = bytearray(build_batch(sample_records(3), now_ms=NOW))
    struct.pack_into(">i", buf, RECORDS_COUNT, -3)
    with pytest.raises(CorruptRecordError, match="CRC check failed"):  # the CRC comes first
        RecordBatch(buf).records()
    fix_crc(buf)
    with pytest.raises(CorruptRecordError, match="negative record count"):
        RecordBatch(buf).records()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("count", [2, 4])
def test_record_count_disagreeing_with_the_records(codec: str, count: int) -> None:
    buf = bytearray(build_batch(sample_records(3), compression=codec, base_offset=11, now_ms=NOW))
    struct.pack_into(">i", buf, RECORDS_COUNT, count)
    with pytest.raises(CorruptRecordError, match="batch at offset 11"):
        RecordBatch(buf).records()


def test_batch_length_longer_than_the_records() -> None:
    buf = bytearray(build_batch(sample_records(3), base_offset=6, now_ms=NOW)) + b"\x00\x00\x00"
    struct.pack_into(">i", buf, LENGTH, len(buf) - LOG_OVERHEAD)
    fix_crc(buf)
    b = RecordBatch(buf)
    b.ensure_valid()  # the header alone cannot tell
    with pytest.raises(CorruptRecordError, match="batch at offset 6"):
        b.records()


def test_batch_length_shorter_than_the_records() -> None:
    buf = bytearray(build_batch(sample_records(3), base_offset=6, now_ms=NOW))[:-3]
    struct.pack_into(">i", buf, LENGTH, len(buf) - LOG_OVERHEAD)
    fix_crc(buf)
    with pytest.raises(CorruptRecordError, match="batch at offset 6"):
        RecordBatch(buf).records()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_corrupt_compressed_body_raises_corrupt_record_error(codec: str) -> None:
    buf = bytearray(build_batch(sample_records(20), compression=codec, base_offset=3, now_ms=NOW))
    body = HEADER_SIZE + 8
    buf[body:body + 16] = b"\xa5" * 16
    fix_crc(buf)
    with pytest.raises(CorruptRecordError, match=f"batch at offset 3 .*{codec}"):
        RecordBatch(buf).records()


def test_unknown_codec_id_raises_corrupt_record_error() -> None:
    buf = bytearray(build_batch(sample_records(1), now_ms=NOW))
    struct.pack_into(">h", buf, ATTRIBUTES, 5)
    fix_crc(buf)
    b = RecordBatch(buf)
    assert b.compression == 5
    with pytest.raises(CorruptRecordError, match="unknown compression codec id 5"):
        b.records()


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_wrong_magic(magic: int) -> None:
    buf = bytearray(build_batch(sample_records(1), base_offset=17, now_ms=NOW))
    buf[MAGIC] = magic & 0xFF
    with pytest.raises(UnsupportedMagicError, match=f"magic {magic}"):
        RecordBatch(buf)
    with pytest.raises(UnsupportedMagicError):  # also when the buffer is shorter than a header
        RecordBatch(buf[:MAGIC + 1])
    with pytest.raises(UnsupportedMagicError):  # iteration does not hide it
        list(iter_batches(buf))


@pytest.mark.parametrize("length", [48, 0, -12, -100])
def test_batch_length_below_the_header_is_corrupt(length: int) -> None:
    buf = bytearray(build_batch(sample_records(1), now_ms=NOW))
    struct.pack_into(">i", buf, LENGTH, length)
    with pytest.raises(CorruptRecordError, match=f"batchLength {length}") as info:
        RecordBatch(buf)
    assert not isinstance(info.value, TruncatedBatchError)
    with pytest.raises(CorruptRecordError, match="batchLength"):
        RecordBatch(buf[:30])
    with pytest.raises(CorruptRecordError, match="batchLength"):
        list(iter_batches(buf))


def test_every_cut_of_a_batch_is_truncated() -> None:
    data = build_batch(sample_records(2), base_offset=5, now_ms=NOW)
    for cut in range(len(data)):
        piece = data[:cut]
        with pytest.raises(TruncatedBatchError):
            RecordBatch(piece)
        assert list(iter_batches(piece)) == []
        if cut:
            with pytest.raises(TruncatedBatchError):
                list(iter_batches(piece, strict=True))
    assert RecordBatch(data).size_in_bytes == len(data)


def test_truncation_message_names_position_and_sizes() -> None:
    data = build_batch(sample_records(2), base_offset=5, now_ms=NOW)
    with pytest.raises(TruncatedBatchError, match=f"offset 5.*{len(data)} bytes.*{len(data) - 1}"):
        RecordBatch(data[:-1])


def test_position_outside_the_buffer() -> None:
    with pytest.raises(ValueError):
        RecordBatch(b"\x00" * 10, 11)
    with pytest.raises(ValueError):
        RecordBatch(b"\x00" * 10, -1)


def test_header_only_batch() -> None:
    data = build_batch(sample_records(3), base_offset=40, now_ms=NOW)
    b = RecordBatch(data[:HEADER_SIZE], header_only=True)
    assert (b.base_offset, b.record_count, b.size_in_bytes) == (40, 3, len(data))
    for body_method in (b.records, b.view, b.compute_crc, b.ensure_valid):
        with pytest.raises(TruncatedBatchError, match="header-only"):
            body_method()
    full = RecordBatch(data, header_only=True)  # header_only with everything there works fully
    full.ensure_valid()
    assert len(full.records()) == 3
    with pytest.raises(TruncatedBatchError):
        RecordBatch(data[:HEADER_SIZE - 1], header_only=True)


# --- iteration and zero copy -----------------------------------------------------------------


def make_log(n: int = 4) -> bytes:
    parts, offset = [], 0
    for i in range(n):
        records = sample_records(i + 1)
        parts.append(build_batch(records, base_offset=offset, compression=CODECS[i % 5],
                                 now_ms=NOW))
        offset += len(records)
    return b"".join(parts)


def test_iter_batches_walks_every_batch() -> None:
    log = make_log(5)
    batches = list(iter_batches(log, strict=True))
    assert [b.base_offset for b in batches] == [0, 1, 3, 6, 10]
    assert [b.compression for b in batches] == [0, 1, 2, 3, 4]
    assert sum(b.size_in_bytes for b in batches) == len(log)
    assert [b.position for b in batches] == [0] + [
        sum(x.size_in_bytes for x in batches[:i]) for i in range(1, 5)]
    offsets = [r.offset for b in batches for r in b.records()]
    assert offsets == list(range(15))


def test_iter_batches_position_and_end() -> None:
    log = make_log(4)
    batches = list(iter_batches(log))
    second, third = batches[1], batches[2]
    got = list(iter_batches(log, second.position, third.position + third.size_in_bytes))
    assert [b.base_offset for b in got] == [second.base_offset, third.base_offset]
    # an end inside the third batch: a fetch cut at its max bytes
    cut = third.position + 10
    assert [b.base_offset for b in iter_batches(log, 0, cut)] == [0, 1]
    with pytest.raises(TruncatedBatchError):
        list(iter_batches(log, 0, cut, strict=True))
    assert list(iter_batches(log, len(log))) == []
    assert [b.base_offset for b in iter_batches(log, 0, len(log) + 100)] == [0, 1, 3, 6]


def test_iter_batches_over_bytearray_is_zero_copy() -> None:
    buf = bytearray(make_log(3))
    batches = list(iter_batches(buf))
    last = batches[-1]
    view = last.view()
    assert view.obj is buf
    assert view.readonly is False
    assert len(view) == last.size_in_bytes
    # a change to the buffer shows through the view (and breaks the CRC)
    buf[last.position + HEADER_SIZE + 2] ^= 0xFF
    assert view[HEADER_SIZE + 2] == buf[last.position + HEADER_SIZE + 2]
    assert not last.is_valid()
    view.release()


def test_iter_batches_with_end_still_views_the_original_buffer() -> None:
    buf = bytearray(make_log(3))
    first = next(iter_batches(buf, 0, len(buf) - 1))
    with first.view() as view:
        assert view.obj is buf


def test_iter_batches_over_memoryview() -> None:
    buf = bytearray(make_log(3))
    outer = memoryview(buf)
    batches = list(iter_batches(outer))
    assert len(batches) == 3
    with batches[1].view() as view:
        assert view.obj is buf
    assert [len(b.records()) for b in batches] == [1, 2, 3]


def test_iter_batches_over_mmap(tmp_path: Path) -> None:
    log = make_log(5)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(log)
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 0) as mapped:
        batches = list(iter_batches(mapped, strict=True))
        assert len(batches) == 5
        for b in batches:
            b.ensure_valid()
        view = batches[2].view()
        assert view.obj is mapped
        assert [r.offset for r in batches[4].records()] == [10, 11, 12, 13, 14]
        mapped[batches[2].position + HEADER_SIZE] ^= 0x01  # visible through the view
        assert view[HEADER_SIZE] == mapped[batches[2].position + HEADER_SIZE]
        assert not batches[2].is_valid()
        view.release()
    # no view was left exported: the mmap closed cleanly above


def test_crc_and_records_do_not_keep_exports_on_an_mmap(tmp_path: Path) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(make_log(2))
    with path.open("rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        for b in iter_batches(mapped):
            b.ensure_valid()
            b.records()
        mapped.close()  # would raise BufferError if a memoryview were still exported
    assert mapped.closed


# --- in-place patchers --------------------------------------------------------------------


def test_set_base_offset_and_epoch_keep_the_crc() -> None:
    first = build_batch(sample_records(1), now_ms=NOW)
    buf = bytearray(first + build_batch(sample_records(3), compression="lz4", now_ms=NOW))
    set_base_offset(buf, len(first), 1000)
    set_partition_leader_epoch(buf, len(first), 12)
    b = RecordBatch(buf, len(first))
    b.ensure_valid()
    assert (b.base_offset, b.last_offset, b.partition_leader_epoch) == (1000, 1002, 12)
    assert [r.offset for r in b.records()] == [1000, 1001, 1002]
    assert RecordBatch(buf).base_offset == 0  # the neighbour is untouched


@pytest.mark.parametrize("codec", CODECS)
def test_set_log_append_time(codec: str) -> None:
    records = sample_records(3)
    buf = bytearray(build_batch(records, compression=codec, is_transactional=True,
                                producer_id=3, producer_epoch=1, base_sequence=0, now_ms=NOW))
    before = RecordBatch(buf)
    set_log_append_time(buf, 0, NOW + 5)
    b = RecordBatch(buf)
    b.ensure_valid()
    assert b.timestamp_type == 1
    assert b.max_timestamp == NOW + 5
    assert b.base_timestamp == before.base_timestamp
    assert b.attributes == before.attributes | 0x08  # codec and transactional bits kept
    assert b.crc != before.crc
    assert [r.timestamp for r in b.records()] == [NOW + 5] * 3


def test_set_log_append_time_is_a_no_op_when_already_set() -> None:
    buf = bytearray(build_batch(sample_records(2), timestamp_type=1, now_ms=NOW))
    original = bytes(buf)
    set_log_append_time(buf, 0, NOW)
    assert bytes(buf) == original


def test_patchers_work_on_mmap_and_memoryview(tmp_path: Path) -> None:
    path = tmp_path / "seg.log"
    path.write_bytes(build_batch(sample_records(2), now_ms=NOW))
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 0) as mapped:
        set_base_offset(mapped, 0, 77)
        set_log_append_time(mapped, 0, NOW + 9)
        mapped.flush()
    b = RecordBatch(path.read_bytes())
    b.ensure_valid()
    assert (b.base_offset, b.max_timestamp, b.timestamp_type) == (77, NOW + 9, 1)
    buf = bytearray(path.read_bytes())
    with memoryview(buf) as view:
        set_partition_leader_epoch(view, 0, 4)
    assert RecordBatch(buf).partition_leader_epoch == 4


def test_patchers_refuse_read_only_buffers() -> None:
    data = build_batch(sample_records(1), now_ms=NOW)
    with pytest.raises(TypeError):
        set_base_offset(data, 0, 1)  # type: ignore[arg-type]


def test_repr_names_the_offsets() -> None:
    text = repr(RecordBatch(build_batch(sample_records(3), base_offset=8, now_ms=NOW)))
    assert "offsets=[8, 10]" in text and "count=3" in text


def test_package_exports() -> None:
    import tierlog.records as package

    assert sorted(package.__all__) == sorted([
        "Record", "RecordBatch", "iter_batches", "build_batch", "build_control_batch",
        "ControlRecord", "ABORT", "COMMIT", "compress", "decompress", "codec_id", "codec_name",
        "HEADER_SIZE", "LOG_OVERHEAD"])
    assert all(getattr(package, name) is not None for name in package.__all__)


# --- real Kafka segment files -----------------------------------------------------------------


KAFKA_LOGS = {
    "TestTopicPatient-0": (3, 3),
    "__consumer_offsets-6": (13, 13),
    "__cluster_metadata-0": (4814, 4929),
}


@pytest.mark.parametrize("partition", sorted(KAFKA_LOGS))
def test_real_kafka_segments_parse_and_rebuild_byte_for_byte(kafka_logdir: Path,
                                                              partition: str) -> None:
    path = kafka_logdir / partition / "00000000000000000000.log"
    expected_batches, expected_records = KAFKA_LOGS[partition]
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        batches = list(iter_batches(mapped, strict=True))
        assert len(batches) == expected_batches
        assert sum(b.size_in_bytes for b in batches) == len(mapped)
        total = 0
        next_offset = 0
        for b in batches:
            b.ensure_valid()
            assert b.base_offset == next_offset
            next_offset = b.next_offset
            records = b.records()
            total += len(records)
            assert [r.offset for r in records] == list(range(b.base_offset, b.next_offset))
            if b.is_control:
                assert b.control_record().type == LEADER_CHANGE
                continue
            # tierlog writes the very bytes the Kafka broker wrote
            rebuilt = build_batch(
                records, base_offset=b.base_offset, partition_leader_epoch=b.partition_leader_epoch,
                producer_id=b.producer_id, producer_epoch=b.producer_epoch,
                base_sequence=b.base_sequence, is_transactional=b.is_transactional,
                timestamp_type=b.timestamp_type, compression=b.compression,
            )
            with b.view() as original:
                assert rebuilt == original
        assert total == expected_records
