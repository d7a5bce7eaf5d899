"""Byte compatibility with kafka-python's v2 record batch writer and reader, for all five codecs.

kafka-python compresses with its own libraries (stdlib zlib, python-snappy, python-lz4 on
liblz4, zstandard on libzstd), so its batches check tierlog's codec framing both ways.
"""

from __future__ import annotations

import struct

import pytest
from kafka import codec as kafka_codec
from kafka.record import MemoryRecords, MemoryRecordsBuilder
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from tierlog.records import (
    ABORT,
    COMMIT,
    Record,
    RecordBatch,
    build_batch,
    build_control_batch,
    iter_batches,
)
from tierlog.records.batch import HEADER_SIZE, set_base_offset, set_partition_leader_epoch
from tierlog.records.compression import decompress

CODECS = [0, 1, 2, 3, 4]
NOW = 1_700_000_000_000


def test_kafka_python_has_every_codec_here() -> None:
    # a missing codec module would make the codec tests below fail, not skip
    assert kafka_codec.has_gzip() and kafka_codec.has_snappy()
    assert kafka_codec.has_lz4() and kafka_codec.has_zstd()


def sample() -> list[Record]:
    """Compressible values (kafka-python drops compression that does not shrink the batch),
    with null/empty keys and values, null header values, unicode header keys, and
    timestamps that go backwards."""
    out = []
    for i in range(60):
        key = None if i % 7 == 3 else b"" if i % 11 == 5 else f"key-{i}".encode()
        value = None if i % 13 == 4 else b"" if i % 17 == 6 else (b"payload %d " % i) * 30
        headers = [("trace", b"t%d" % i), ("ünïcødé-🔑", None), ("", b"")] if i % 3 == 0 else []
        out.append(Record(key=key, value=value, headers=headers,
                          timestamp=NOW + (i * 37) % 500 - 250))
    return out


def kafka_python_batch(records: list[Record], codec: int, *, transactional: bool = False,
                       producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional,
        producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2],
        batch_size=1 << 22,
    )
    for i, r in enumerate(records):
        assert builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value,
                              headers=list(r.headers)) is not None
    return bytes(builder.build())


def assert_kafka_python_reads(data: bytes, records: list[Record], base_offset: int,
                              codec: int, timestamp_type: int = 0) -> DefaultRecordBatch:
    theirs = DefaultRecordBatch(data)
    ours = RecordBatch(data)
    assert theirs.validate_crc()
    assert theirs.crc == ours.crc
    assert theirs.magic == 2
    assert theirs.base_offset == ours.base_offset == base_offset
    assert theirs.leader_epoch == ours.partition_leader_epoch
    assert theirs.attributes == ours.attributes
    assert theirs.compression_type == codec
    assert theirs.timestamp_type == timestamp_type
    assert theirs.is_transactional == ours.is_transactional
    assert theirs.is_control_batch == ours.is_control
    assert theirs.last_offset_delta == ours.last_offset_delta == len(records) - 1
    assert theirs.first_timestamp == ours.base_timestamp
    assert theirs.max_timestamp == ours.max_timestamp
    assert theirs.producer_id == ours.producer_id
    assert theirs.producer_epoch == ours.producer_epoch
    assert theirs.base_sequence == ours.base_sequence
    assert theirs.last_sequence == ours.last_sequence
    assert theirs.records_count == len(records)
    assert theirs.size_in_bytes == len(data)
    got = list(theirs)
    assert len(got) == len(records)
    for i, (g, r) in enumerate(zip(got, records, strict=True)):
        assert g.offset == base_offset + i
        assert g.timestamp == (ours.max_timestamp if timestamp_type else r.timestamp)
        assert g.timestamp_type == timestamp_type
        assert g.key == r.key
        assert g.value == r.value
        assert g.headers == list(r.headers)
    return theirs


# --- kafka-python writes, tierlog reads ----------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_tierlog_reads_kafka_python_batches(codec: int) -> None:
    records = sample()
    data = kafka_python_batch(records, codec)
    b = RecordBatch(data)
    b.ensure_valid()
    assert b.compression == codec, "kafka-python kept the batch compressed"
    assert (b.base_offset, b.record_count, b.last_offset_delta) == (0, 60, 59)
    assert b.base_timestamp == records[0].timestamp
    assert b.max_timestamp == max(r.timestamp for r in records)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1)
    got = b.records()
    for i, (g, r) in enumerate(zip(got, records, strict=True)):
        assert (g.offset, g.timestamp, g.key, g.value) == (i, r.timestamp, r.key, r.value)
        assert g.headers == tuple(r.headers)


@pytest.mark.parametrize("codec", CODECS)
def test_tierlog_reads_kafka_python_transactional_batches(codec: int) -> None:
    records = sample()
    data = bytearray(kafka_python_batch(records, codec, transactional=True,
                                        producer=(123_456, 7, 2**31 - 10)))
    # the broker assigns the offset and epoch in place; the CRC stays valid
    set_base_offset(data, 0, 5000)
    set_partition_leader_epoch(data, 0, 3)
    b = RecordBatch(data)
    b.ensure_valid()
    assert b.is_transactional and not b.is_control
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (123_456, 7, 2**31 - 10)
    assert b.last_sequence == 49  # wrapped past int32 max
    assert (b.base_offset, b.partition_leader_epoch) == (5000, 3)
    assert [r.offset for r in b.records()] == list(range(5000, 5060))


@pytest.mark.parametrize("codec", CODECS)
def test_tierlog_reads_kafka_python_memory_records(codec: int) -> None:
    """Producer batches (offset deltas from 0), given their offsets as a broker would."""
    log = bytearray()
    offset = 100
    for n in (3, 40, 1):
        builder = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 20,
                                       transactional=True, producer_id=9, producer_epoch=1,
                                       base_sequence=offset)
        for i in range(n):
            builder.append(timestamp=NOW + i, key=b"k%d" % i, value=b"value " * 50,
                           headers=[("h", b"%d" % i)])
        builder.close()
        position = len(log)
        log += builder.buffer()
        set_base_offset(log, position, offset)
        offset += n
    batches = list(iter_batches(log, strict=True))
    assert [(b.base_offset, b.record_count) for b in batches] == [(100, 3), (103, 40), (143, 1)]
    for b in batches:
        b.ensure_valid()
        assert b.compression == codec
        assert b.base_sequence == b.base_offset
        for i, r in enumerate(b.records()):
            assert (r.offset, r.timestamp, r.key, r.headers) == (
                b.base_offset + i, NOW + i, b"k%d" % i, (("h", b"%d" % i),))


@pytest.mark.parametrize("codec", CODECS)
def test_same_records_section_as_kafka_python(codec: int) -> None:
    """tierlog encodes records exactly as kafka-python does; uncompressed batches match byte
    for byte, compressed ones decompress to the same records section."""
    records = sample()
    theirs = kafka_python_batch(records, codec)
    ours = build_batch(records, compression=codec, partition_leader_epoch=0, now_ms=NOW)
    if codec == 0:
        assert ours == theirs
    else:
        # compressors and levels differ (so do the length and CRC); the rest may not
        assert ours[21:61] == theirs[21:61]
        assert decompress(codec, ours[HEADER_SIZE:]) == decompress(codec, theirs[HEADER_SIZE:])
        assert kafka_codec_decode(codec, ours[HEADER_SIZE:]) == decompress(
            codec, theirs[HEADER_SIZE:])


def kafka_codec_decode(codec: int, data: bytes) -> bytes:
    decoders = {1: kafka_codec.gzip_decode, 2: kafka_codec.snappy_decode,
                3: kafka_codec.lz4_decode, 4: kafka_codec.zstd_decode}
    return bytes(decoders[codec](bytes(data)))


# --- tierlog writes, kafka-python reads ----------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_tierlog_batches(codec: int) -> None:
    records = sample()
    data = build_batch(records, compression=codec, base_offset=777, partition_leader_epoch=5,
                       now_ms=NOW)
    assert_kafka_python_reads(data, records, 777, codec)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_tierlog_idempotent_and_transactional_batches(codec: int) -> None:
    records = sample()
    for transactional in (False, True):
        data = build_batch(records, compression=codec, base_offset=10, producer_id=2**40,
                           producer_epoch=3, base_sequence=2**31 - 5,
                           is_transactional=transactional, now_ms=NOW)
        theirs = assert_kafka_python_reads(data, records, 10, codec)
        assert theirs.is_transactional is transactional
        assert theirs.has_producer_id and theirs.has_sequence
        assert theirs.last_sequence == 54


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_reads_tierlog_log_append_time_batches(codec: int) -> None:
    records = sample()
    data = build_batch(records, compression=codec, timestamp_type=1, now_ms=NOW + 10_000)
    theirs = assert_kafka_python_reads(data, records, 0, codec, timestamp_type=1)
    assert theirs.max_timestamp == NOW + 10_000


@pytest.mark.parametrize("codec", [0, 3])
def test_kafka_python_reads_tierlog_delete_horizon_batches(codec: int) -> None:
    # kafka-python ignores bit 6 but still finds each record's own timestamp
    records = sample()
    data = build_batch(records, compression=codec, delete_horizon_ms=NOW + 86_400_000,
                       now_ms=NOW)
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert theirs.attributes & 0x40
    assert [r.timestamp for r in theirs] == [r.timestamp for r in records]


@pytest.mark.parametrize("marker", [ABORT, COMMIT])
def test_kafka_python_reads_tierlog_control_batches(marker: int) -> None:
    data = build_control_batch(marker, producer_id=31, producer_epoch=4, coordinator_epoch=8,
                               base_offset=66, timestamp=NOW)
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert theirs.is_control_batch and theirs.is_transactional
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (31, 4, -1)
    (control,) = list(theirs)
    assert (control.offset, control.timestamp, control.version, control.type) == (
        66, NOW, 0, marker)
    assert control.abort is (marker == ABORT) and control.commit is (marker == COMMIT)
    assert struct.unpack(">hi", control.value) == (0, 8)


def test_kafka_python_walks_a_tierlog_log_of_every_codec() -> None:
    records = sample()
    parts, offset = [], 0
    for codec in CODECS:
        parts.append(build_batch(records, compression=codec, base_offset=offset, now_ms=NOW))
        offset += len(records)
    parts.append(build_control_batch(COMMIT, producer_id=1, producer_epoch=0,
                                     base_offset=offset, timestamp=NOW))
    memory = MemoryRecords(b"".join(parts))
    seen = []
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc()
        seen.append((batch.base_offset, batch.compression_type, batch.is_control_batch))
    assert seen == [(60 * c, c, False) for c in CODECS] + [(300, 0, True)]
