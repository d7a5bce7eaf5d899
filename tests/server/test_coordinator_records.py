"""The coordinators' internal records, byte for byte against Kafka's schemas, the partition
of a key (Java's String.hashCode), the producer-id blocks and the settings parser."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.errors import ConfigError, CorruptCheckpointError, CorruptRecordError
from tierlog.server.coordinator.coordinator_config import setting_int
from tierlog.server.coordinator.coordinator_wire import java_string_hash, partition_for
from tierlog.server.coordinator.group import offsets_topic_records as orec
from tierlog.server.coordinator.txn import txn_log_records as trec
from tierlog.server.coordinator.txn.txn_producer_ids import ProducerIdBlocks


def s16(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def test_offset_commit_key_is_kafkas_layout() -> None:
    key = orec.OffsetKey("grp", "topic", 7)
    expected = struct.pack(">h", 1) + s16("grp") + s16("topic") + struct.pack(">i", 7)
    assert orec.encode_key(key) == expected
    assert orec.decode_key(expected) == key
    # Version 0 has the same fields.
    assert orec.decode_key(struct.pack(">h", 0) + expected[2:]) == key


def test_group_metadata_key_is_kafkas_layout() -> None:
    assert orec.encode_key(orec.GroupKey("grp")) == struct.pack(">h", 2) + s16("grp")
    assert orec.decode_key(struct.pack(">h", 2) + s16("grp")) == orec.GroupKey("grp")


def test_offset_commit_value_v3_and_v1() -> None:
    value = orec.OffsetValue(42, "meta", 1000, leader_epoch=5)
    expected = (struct.pack(">hqi", 3, 42, 5) + s16("meta") + struct.pack(">q", 1000))
    assert orec.encode_offset_value(value) == expected
    assert orec.decode_offset_value(expected) == value
    with_expiry = orec.OffsetValue(42, "", 1000, -1, 2000)
    v1 = struct.pack(">hq", 1, 42) + s16("") + struct.pack(">qq", 1000, 2000)
    assert orec.encode_offset_value(with_expiry) == v1
    assert orec.decode_offset_value(v1) == with_expiry


def test_offset_commit_value_v4_is_flexible() -> None:
    # offset, leaderEpoch, compact string "m" (len+1 = 2), commitTimestamp, no tagged fields.
    v4 = struct.pack(">hqi", 4, 9, 2) + b"\x02m" + struct.pack(">q", 77) + b"\x00"
    assert orec.decode_offset_value(v4) == orec.OffsetValue(9, "m", 77, 2)


def test_group_metadata_value_v3_layout() -> None:
    member = orec.MemberMetadata("m1", "client", "/127.0.0.1", 10000, 30000, b"sub", b"asg",
                                 None)
    value = orec.GroupValue("consumer", 3, "range", "m1", 123, (member,))
    expected = (struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 3) + s16("range")
                + s16("m1") + struct.pack(">q", 123) + struct.pack(">i", 1)
                + s16("m1") + struct.pack(">h", -1) + s16("client") + s16("/127.0.0.1")
                + struct.pack(">ii", 30000, 10000) + struct.pack(">i", 3) + b"sub"
                + struct.pack(">i", 3) + b"asg")
    assert orec.encode_group_value(value) == expected
    assert orec.decode_group_value(expected) == value
    # The flexible version 4 round-trips too.
    assert orec.decode_group_value(orec.encode_group_value(value, 4)) == value


def test_empty_group_value() -> None:
    value = orec.GroupValue("consumer", 4, None, None, 5, ())
    assert orec.decode_group_value(orec.encode_group_value(value)) == value


def test_transaction_log_layout() -> None:
    assert trec.encode_key("tx") == struct.pack(">h", 0) + s16("tx")
    value = trec.TxnValue(1000, 3, 60000, trec.TxnStatus.ONGOING,
                          (("a", (0, 2)), ("b", (1,))), 555, 444)
    expected = (struct.pack(">hqhib", 0, 1000, 3, 60000, 1) + struct.pack(">i", 2)
                + s16("a") + struct.pack(">iii", 2, 0, 2) + s16("b") + struct.pack(">ii", 1, 1)
                + struct.pack(">qq", 555, 444))
    assert trec.encode_value(value) == expected
    assert trec.decode_value(expected) == value
    assert trec.decode_key(trec.encode_key("tx")) == "tx"


@pytest.mark.parametrize("data, what", [
    (b"\x00", "truncated"),
    (struct.pack(">h", 9) + s16("g"), "unknown version"),
    (struct.pack(">h", 2) + s16("g") + b"x", "trailing"),
    (struct.pack(">h", 1) + struct.pack(">h", -1) + s16("t") + struct.pack(">i", 0), "null"),
])
def test_bad_keys_are_named_errors(data: bytes, what: str) -> None:
    with pytest.raises(CorruptRecordError, match=what):
        orec.decode_key(data)


def test_bad_txn_status_is_a_named_error() -> None:
    bad = struct.pack(">hqhib", 0, 1, 0, 1, 42) + struct.pack(">i", 0) + struct.pack(">qq", 0, 0)
    with pytest.raises(CorruptRecordError, match="unknown status 42"):
        trec.decode_value(bad)


@given(st.text(max_size=40), st.integers(min_value=0, max_value=2**63 - 1),
       st.integers(min_value=-1, max_value=2**31 - 1), st.text(max_size=40),
       st.integers(min_value=-1, max_value=2**62))
def test_offset_records_round_trip(group: str, offset: int, epoch: int, meta: str,
                                   ts: int) -> None:
    key = orec.OffsetKey(group, meta, epoch)
    assert orec.decode_key(orec.encode_key(key)) == key
    value = orec.OffsetValue(offset, meta, ts, epoch)
    assert orec.decode_offset_value(orec.encode_offset_value(value)) == value


@pytest.mark.parametrize("text, expected", [
    ("", 0), ("a", 97), ("abc", 96354), ("console-consumer-1", None),
    ("polygenelubricants", -2147483648), ("\u00e9t\u00e9", None), ("\U0001f600", None),
])
def test_java_string_hash(text: str, expected: int | None) -> None:
    def java(s: str) -> int:  # the definition: s[0]*31^(n-1) + ... over UTF-16 code units
        units = [int.from_bytes(s.encode("utf-16-be")[i:i + 2], "big")
                 for i in range(0, len(s.encode("utf-16-be")), 2)]
        h = sum(u * 31 ** (len(units) - 1 - i) for i, u in enumerate(units)) % 2**32
        return h - 2**32 if h >= 2**31 else h
    assert java_string_hash(text) == java(text)
    if expected is not None:
        assert java_string_hash(text) == expected


@given(st.text(max_size=64), st.integers(min_value=1, max_value=200))
def test_partition_for_is_kafkas(key: str, n: int) -> None:
    h = java_string_hash(key)
    expected = (0 if h == -2**31 else abs(h)) % n
    assert partition_for(key, n) == expected and 0 <= expected < n


def test_min_int_hash_maps_to_partition_zero() -> None:
    assert partition_for("polygenelubricants", 7) == 0


def test_producer_ids_never_repeat_across_restarts(tmp_path) -> None:
    path = tmp_path / "producer-id-block"
    first = ProducerIdBlocks(path, block_size=10)
    seen = [first.allocate() for _ in range(15)]
    assert seen == list(range(15))
    # A crash: the next run starts after every reserved block, not after the last id used.
    second = ProducerIdBlocks(path, block_size=10)
    nxt = second.allocate()
    assert nxt == 20 and nxt not in seen
    third = ProducerIdBlocks(path, floor=500, block_size=10)
    assert third.allocate() == 500


def test_producer_id_block_file_corrupt_is_named(tmp_path) -> None:
    path = tmp_path / "producer-id-block"
    path.write_text("garbage")
    with pytest.raises(CorruptCheckpointError, match="producer-id-block"):
        ProducerIdBlocks(path)


def test_setting_int() -> None:
    assert setting_int({}, "k", 5) == 5
    assert setting_int({"k": "7"}, "k", 5) == 7
    with pytest.raises(ConfigError, match="k"):
        setting_int({"k": "x"}, "k", 5)
    with pytest.raises(ConfigError, match="k"):
        setting_int({"k": 0}, "k", 5, 1)
