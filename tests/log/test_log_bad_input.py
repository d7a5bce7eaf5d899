"""Bad input: each malformed append raises a named tierlog error and leaves the log exactly as it was."""

from __future__ import annotations

import hashlib
import struct

import crc32c
import pytest
from support.hot_path import TWINS, use_hot_path

from tierlog import Log, Record
from tierlog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTopicError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    TruncatedBatchError,
    UnsupportedMagicError,
)
from tierlog.records import build_batch, build_control_batch
from tierlog.records._codec import encode_records
from tierlog.records.compression import codec_id, compress


def _snapshot(directory):
    """Name, size and content hash of every file: 'exactly as it was'."""
    return {
        p.name: (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(directory.iterdir())
    }


@pytest.fixture
def log(tmp_path, clock):
    with Log.open(tmp_path / "orders-0", {"max.message.bytes": 4096}, time_ms=clock) as log:
        log.append_records([Record(key=b"a", value=b"1"), Record(key=b"b", value=b"2")])
        yield log


def _good_batch(n=3, **kwargs):
    return bytearray(build_batch([Record(key=b"k%d" % i, value=b"v" * 10) for i in range(n)],
                                 **kwargs))


def _assert_rejected(log, data, error, match, **kwargs):
    before = _snapshot(log.directory)
    leo = log.log_end_offset
    with pytest.raises(error, match=match):
        log.append(bytes(data), **kwargs)
    assert log.log_end_offset == leo
    assert _snapshot(log.directory) == before
    # The log still works afterwards.
    assert log.append(bytes(_good_batch())).first_offset == leo


def test_corrupt_crc_names_the_batch(log):
    data = _good_batch()
    data[-1] ^= 0xFF
    _assert_rejected(log, data, CorruptRecordError, "(?i)stored crc")


def test_truncated_batch(log):
    data = _good_batch()
    for cut in (1, 12, 60):
        _assert_rejected(log, data[:cut], TruncatedBatchError,
                         f"{cut} trailing bytes at position 0 are not a whole batch header")
    for cut in (61, len(data) - 1):
        _assert_rejected(log, data[:cut], TruncatedBatchError,
                         f"declares {len(data)} bytes but only {cut} are available")


def test_wrong_magic(log):
    data = _good_batch()
    data[16] = 1
    _assert_rejected(log, data, UnsupportedMagicError, "magic")


def _with_crc(data: bytearray) -> bytearray:
    """``data`` with a CRC that matches it again: only the framing is wrong now."""
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return data


def _lengthened(data: bytearray, extra: int) -> bytearray:
    longer = data + b"\x00" * extra
    struct.pack_into(">i", longer, 8, len(longer) - 12)
    return longer


def test_batch_length_disagreeing_with_its_records(log):
    data = _good_batch()
    # The CRC covers the length's consequences: a changed length alone breaks it.
    _assert_rejected(log, _lengthened(data, 8), CorruptRecordError, "stored crc")
    shorter = bytearray(data)
    struct.pack_into(">i", shorter, 8, len(data) - 12 - 8)
    _assert_rejected(log, shorter, CorruptRecordError, "stored crc")


@pytest.fixture(params=TWINS)
def writer(request, monkeypatch):
    """The plain-batch hot path (C accelerators or Python twins) the log uses."""
    use_hot_path(monkeypatch, request.param)
    return request.param


@pytest.mark.parametrize("epoch", [1 << 31, -2])
def test_a_leader_epoch_outside_int32_is_refused_on_every_path(log, writer, epoch):
    """The hot path would have to patch it into the batch, the general path too: neither may
    write, and both say the same."""
    log.append(bytes(_good_batch()))  # the segment is armed for the hot path now
    _assert_rejected(log, _good_batch(), ValueError, f"leader epoch {epoch} is not -1 or",
                     leader_epoch=epoch)
    with pytest.raises(ValueError, match=f"leader epoch {epoch} is not"):
        log.append_records([Record(key=b"k", value=b"v")], compression="zstd",
                           leader_epoch=epoch)
    with pytest.raises(ValueError, match=f"leader epoch {epoch} is not"):
        log.leader_epoch = epoch
    assert log.leader_epoch is None


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_crc_valid_batch_whose_records_disagree_with_its_header(log, writer, compression):
    """A producer can compute a CRC over nonsense: Kafka's broker still walks every record,
    and so does tierlog by default (record.validation=full), on the hot path too."""
    records = [Record(key=b"k%d" % i, value=b"v" * 10) for i in range(3)]
    if compression == "none":
        data = _good_batch()
        _assert_rejected(log, _with_crc(_lengthened(data, 8)), CorruptRecordError,
                         r"position 0\): record framing check failed: record 3 at byte \d+: "
                         r"8 bytes remain after 3 records")
        more = bytearray(data)
        struct.pack_into(">i", more, 57, 4)  # recordCount
        struct.pack_into(">i", more, 23, 3)  # lastOffsetDelta, so the header agrees with itself
        _assert_rejected(log, _with_crc(more), CorruptRecordError,
                         "record 3 at byte \\d+: only 3 of 4 records fit the data")
    # Offsets a producer never writes: 0, 2, 3.
    gapped = [Record(key=r.key, value=r.value, offset=o) for r, o in zip(records, (0, 2, 3), strict=True)]
    section = encode_records(gapped, 0, 0, 0)[0]
    if compression != "none":
        section = compress(codec_id(compression), section)
    data = bytearray(build_batch(records, compression=compression))
    data[61:] = section
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">i", data, 27, 0)  # baseTimestamp 0: encode_records' timestamps are 0-based
    _assert_rejected(log, _with_crc(data), CorruptRecordError,
                     "record 1 at byte \\d+: offset delta 2 where a producer writes 1")


def test_trusting_the_crc_accepts_what_it_covers(tmp_path, clock, writer):
    """record.validation=crc trusts producers: it does not walk the records (and says so)."""
    data = _with_crc(_lengthened(_good_batch(), 8))
    with Log.open(tmp_path / "t-0", {"record.validation": "crc"}, time_ms=clock) as log:
        log.append_records([Record(key=b"a", value=b"1")])
        assert log.append(bytes(data)).first_offset == 1
        with pytest.raises(CorruptRecordError, match="8 bytes remain after 3 records"):
            list(log.read(1).records())


def test_last_offset_delta_disagreeing_with_record_count(log):
    data = _good_batch()
    struct.pack_into(">i", data, 23, 7)  # lastOffsetDelta; the CRC covers it, so fix the CRC
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    _assert_rejected(log, data, CorruptRecordError, "lastOffsetDelta 7 disagrees")


def test_oversized_batch(log):
    data = bytearray(build_batch([Record(value=b"x" * 5000)]))
    _assert_rejected(log, data, RecordBatchTooLargeError, "max.message.bytes")


def test_non_increasing_offsets_for_follower_appends(log):
    stale = _good_batch(base_offset=0)
    _assert_rejected(log, stale, OffsetsOutOfOrderError, "offset 0", assign_offsets=False)
    two = _good_batch(base_offset=10) + _good_batch(base_offset=11)
    _assert_rejected(log, two, OffsetsOutOfOrderError, "offset 11", assign_offsets=False)


def test_a_bad_second_batch_rejects_the_whole_append(log):
    bad = _good_batch()
    bad[-1] ^= 1
    _assert_rejected(log, _good_batch() + bad, CorruptRecordError, "(?i)stored crc")


def test_control_batch_from_a_client_is_rejected(log):
    marker = build_control_batch(1, producer_id=5, producer_epoch=0)
    _assert_rejected(log, marker, InvalidRecordError, "control")


def test_trailing_garbage(log):
    _assert_rejected(log, _good_batch() + b"\x01\x02\x03", TruncatedBatchError, "trailing")


def test_empty_append(log):
    _assert_rejected(log, b"", InvalidRecordError, "zero bytes")


@pytest.mark.parametrize("topic", ["../x", "..", ".", "a/b", "", "x" * 250, "bad name", "t\x00"])
def test_illegal_topic_names(tmp_path, topic):
    with pytest.raises(InvalidTopicError):
        Log.for_partition(tmp_path / "logs", topic, 0)
    assert not (tmp_path / "x-0").exists()
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())


def test_directory_that_is_not_a_partition_dir(tmp_path):
    with pytest.raises(Exception, match="partition directory"):
        Log.open(tmp_path / "no_partition_suffix")
