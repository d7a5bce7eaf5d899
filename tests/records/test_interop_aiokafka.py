"""Byte compatibility with aiokafka's v2 record batches, both its Cython and pure-Python builders
and readers, for all five codecs (aiokafka frames snappy/lz4/zstd with its own code).
"""

from __future__ import annotations

import struct

import pytest
from aiokafka import codec as aiokafka_codec
from aiokafka.record import default_records as aio
from aiokafka.record import memory_records as aio_memory
from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER, ControlRecord

from tierlog.records import ABORT, COMMIT, Record, RecordBatch, build_batch, build_control_batch
from tierlog.records.batch import HEADER_SIZE, iter_batches, set_base_offset

CODECS = [0, 1, 2, 3, 4]
NOW = 1_700_000_000_000

READERS = {"cython": aio.DefaultRecordBatch, "python": aio._DefaultRecordBatchPy}
BUILDERS = {"cython": aio.DefaultRecordBatchBuilder, "python": aio._DefaultRecordBatchBuilderPy}


def test_aiokafka_has_every_codec_and_its_cython_extension() -> None:
    assert aiokafka_codec.has_gzip() and aiokafka_codec.has_snappy()
    assert aiokafka_codec.has_lz4() and aiokafka_codec.has_zstd()
    assert aio.DefaultRecordBatch is not aio._DefaultRecordBatchPy


def sample() -> list[Record]:
    """Compressible values (aiokafka drops compression that does not shrink the batch), null and
    empty keys/values, null header values, unicode header keys, timestamps going backwards."""
    out = []
    for i in range(50):
        key = None if i % 6 == 2 else b"" if i % 10 == 7 else f"k{i}".encode()
        value = None if i % 9 == 4 else b"" if i % 14 == 3 else (b"aiokafka %d " % i) * 25
        headers = [("ключ-🗝", b"v%d" % i), ("null", None)] if i % 4 == 1 else []
        out.append(Record(key=key, value=value, headers=headers, timestamp=NOW - (i * 53) % 700))
    return out


def aiokafka_batch(kind: str, records: list[Record], codec: int, *, transactional: bool = False,
                   producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    builder = BUILDERS[kind](
        magic=2, compression_type=codec, is_transactional=transactional,
        producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2],
        batch_size=1 << 22,
    )
    for i, r in enumerate(records):
        assert builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value,
                              headers=list(r.headers)) is not None
    return bytes(builder.build())


# --- aiokafka writes, tierlog reads -----------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(BUILDERS))
@pytest.mark.parametrize("codec", CODECS)
def test_tierlog_reads_aiokafka_batches(kind: str, codec: int) -> None:
    records = sample()
    data = bytearray(aiokafka_batch(kind, records, codec, transactional=True,
                                    producer=(77, 5, 1000)))
    set_base_offset(data, 0, 2**40)
    b = RecordBatch(data)
    b.ensure_valid()
    assert b.compression == codec, "aiokafka kept the batch compressed"
    assert b.is_transactional and not b.is_control
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence) == (77, 5, 1000,
                                                                                   1049)
    assert (b.record_count, b.last_offset) == (50, 2**40 + 49)
    assert b.base_timestamp == records[0].timestamp
    assert b.max_timestamp == max(r.timestamp for r in records)
    for i, (g, r) in enumerate(zip(b.records(), records, strict=True)):
        assert (g.offset, g.timestamp, g.key, g.value) == (2**40 + i, r.timestamp, r.key, r.value)
        assert g.headers == tuple(r.headers)


@pytest.mark.parametrize("kind", sorted(BUILDERS))
@pytest.mark.parametrize("codec", CODECS)
def test_same_bytes_as_aiokafka_when_uncompressed_and_same_records_section(kind: str,
                                                                           codec: int) -> None:
    records = sample()
    theirs = aiokafka_batch(kind, records, codec)
    ours = build_batch(records, compression=codec, now_ms=NOW)  # both write leader epoch -1
    if codec == 0:
        assert ours == theirs
    else:
        assert ours[21:61] == theirs[21:61]
        mine = RecordBatch(ours).records()
        assert RecordBatch(theirs).records() == mine


# --- tierlog writes, aiokafka reads -----------------------------------------------------------


def assert_aiokafka_reads(reader: type, data: bytes, records: list[Record], base_offset: int,
                          codec: int, timestamp_type: int = 0) -> None:
    theirs = reader(data)
    ours = RecordBatch(data)
    assert theirs.validate_crc()
    assert theirs.crc == ours.crc
    assert theirs.magic == 2
    assert theirs.base_offset == base_offset
    assert theirs.attributes == ours.attributes
    assert theirs.compression_type == codec
    assert theirs.timestamp_type == timestamp_type
    assert theirs.is_transactional == ours.is_transactional
    assert theirs.is_control_batch == ours.is_control
    assert theirs.last_offset_delta == len(records) - 1
    assert theirs.next_offset == base_offset + len(records)
    assert theirs.first_timestamp == ours.base_timestamp
    assert theirs.max_timestamp == ours.max_timestamp
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (
        ours.producer_id, ours.producer_epoch, ours.base_sequence)
    got = list(theirs)
    assert len(got) == len(records)
    for i, (g, r) in enumerate(zip(got, records, strict=True)):
        assert g.offset == base_offset + i
        assert g.timestamp == (ours.max_timestamp if timestamp_type else r.timestamp)
        assert g.timestamp_type == timestamp_type
        assert g.key == r.key
        assert g.value == r.value
        assert list(g.headers) == list(r.headers)


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_reads_tierlog_batches(reader: str, codec: int) -> None:
    records = sample()
    for transactional in (False, True):
        data = build_batch(records, compression=codec, base_offset=31_337, producer_id=404,
                           producer_epoch=2, base_sequence=17, is_transactional=transactional,
                           partition_leader_epoch=12, now_ms=NOW)
        assert_aiokafka_reads(READERS[reader], data, records, 31_337, codec)


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_reads_tierlog_log_append_time_batches(reader: str, codec: int) -> None:
    records = sample()
    data = build_batch(records, compression=codec, timestamp_type=1, now_ms=NOW + 60_000)
    assert_aiokafka_reads(READERS[reader], data, records, 0, codec, timestamp_type=1)


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize(("marker", "expected"), [(ABORT, ABORT_MARKER), (COMMIT, COMMIT_MARKER)])
def test_aiokafka_reads_tierlog_control_batches(reader: str, marker: int,
                                                expected: ControlRecord) -> None:
    data = build_control_batch(marker, producer_id=8, producer_epoch=1, coordinator_epoch=3,
                               base_offset=90, timestamp=NOW)
    theirs = READERS[reader](data)
    assert theirs.validate_crc()
    assert theirs.is_control_batch and theirs.is_transactional
    assert (theirs.producer_id, theirs.producer_epoch) == (8, 1)
    (record,) = list(theirs)
    assert (record.offset, record.timestamp) == (90, NOW)
    assert ControlRecord.parse(record.key) == expected
    assert struct.unpack(">hi", record.value) == (0, 3)


@pytest.mark.parametrize("memory", [aio_memory.MemoryRecords, aio_memory._MemoryRecordsPy])
def test_aiokafka_walks_a_tierlog_log_of_every_codec(memory: type) -> None:
    records = sample()
    parts, offset = [], 0
    for codec in CODECS:
        parts.append(build_batch(records, compression=codec, base_offset=offset, now_ms=NOW))
        offset += len(records)
    parts.append(build_control_batch(ABORT, producer_id=1, producer_epoch=0, base_offset=offset,
                                     timestamp=NOW))
    log = b"".join(parts)
    walker = memory(log)
    seen = []
    while walker.has_next():
        batch = walker.next_batch()
        assert batch.validate_crc()
        seen.append((batch.base_offset, batch.compression_type, batch.is_control_batch,
                     len(list(batch))))
    assert seen == [(50 * c, c, False, 50) for c in CODECS] + [(250, 0, True, 1)]
    assert [b.base_offset for b in iter_batches(log, strict=True)] == [0, 50, 100, 150, 200, 250]
    assert len(log) > HEADER_SIZE * 6
