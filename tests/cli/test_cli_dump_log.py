"""``tierlog dump-log`` on the real Kafka 3.7 files and on tierlog's own, checked against
kafka-python's independent parse and the facts of what was written."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch
from support.cli_runner import tierlog, user_error

from tierlog import Record
from tierlog.manager.log_manager import LogManager

SEGMENT = "00000000000000000000"


def _kafka_python_batches(path: Path) -> list[tuple[int, DefaultRecordBatch]]:
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
        out.append((pos, DefaultRecordBatch(data[pos:pos + size])))
        pos += size
    return out


def _expected_line(position: int, b: DefaultRecordBatch) -> str:
    def flag(v: bool) -> str:
        return "true" if v else "false"
    return (f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.records_count} "
            f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} "
            f"producerId: {b.producer_id} producerEpoch: {b.producer_epoch} "
            f"partitionLeaderEpoch: {b.leader_epoch} isTransactional: {flag(b.is_transactional)} "
            f"isControl: {flag(b.is_control_batch)} deleteHorizonMs: OptionalLong.empty "
            f"position: {position} CreateTime: {b.max_timestamp} size: {b.size_in_bytes} "
            f"magic: 2 compresscodec: none crc: {b.crc} isvalid: true")


@pytest.mark.parametrize("partition", ["TestTopicPatient-0", "__consumer_offsets-6"])
def test_batch_headers_match_kafka_python(kafka_logdir: Path, partition: str) -> None:
    path = kafka_logdir / partition / f"{SEGMENT}.log"
    lines = tierlog("dump-log", path).stdout.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    assert lines[2:] == [_expected_line(pos, b) for pos, b in _kafka_python_batches(path)]


def test_cluster_metadata_log_counts_and_control_record(kafka_logdir: Path) -> None:
    path = kafka_logdir / "__cluster_metadata-0" / f"{SEGMENT}.log"
    out = tierlog("dump-log", "--deep-iteration", path).stdout
    batches = [line for line in out.splitlines() if line.startswith("baseOffset:")]
    records = [line for line in out.splitlines() if line.startswith("| offset:")]
    assert len(batches) == 4814 and all(line.endswith("isvalid: true") for line in batches)
    assert len(records) == sum(b.records_count for _, b in _kafka_python_batches(path))
    assert records[0].endswith("headerKeys: [] controlType: LEADER_CHANGE(2)")
    verified = tierlog("dump-log", "--verify", path).stdout.splitlines()
    assert verified[-1] == f"{path}: 4814 batches, {len(records)} records, all valid"


def test_print_data_log_shows_records_like_kafka(kafka_logdir: Path) -> None:
    path = kafka_logdir / "TestTopicPatient-0" / f"{SEGMENT}.log"
    out = tierlog("dump-log", "--print-data-log", path).stdout
    first = out.split("\n| ", 1)[1]
    assert first.startswith("offset: 0 CreateTime: 1769792698283 keySize: -1 valueSize: 1831 "
                            "sequence: 0 headerKeys: [] payload: {")
    assert '"resourceType" : "Patient"' in out
    bare = tierlog("dump-log", "--print-data-log", "--skip-record-metadata", path).stdout
    assert "\n| payload: {" not in bare and "keySize" not in bare and "payload: {" in bare


def test_kafka_index_time_index_and_snapshot(kafka_logdir: Path) -> None:
    directory = kafka_logdir / "__consumer_offsets-6"
    done = tierlog("dump-log", directory / f"{SEGMENT}.index", directory / f"{SEGMENT}.timeindex",
                   directory / "00000000000000000013.snapshot")
    assert done.stdout.splitlines() == [
        f"Dumping {directory / f'{SEGMENT}.index'}",
        "offset: 3 position: 4730", "offset: 7 position: 9571",
        f"Dumping {directory / f'{SEGMENT}.timeindex'}",
        "timestamp: 1769791783399 offset: 3", "timestamp: 1769792518093 offset: 7",
        "timestamp: 1769793578176 offset: 12",
        f"Dumping {directory / '00000000000000000013.snapshot'}",
    ]
    assert done.stderr == ""  # no mismatch with the .log
    sane = tierlog("dump-log", "--index-sanity-check", directory).stdout
    assert sane.count("passed sanity check.") == 2


def test_a_corrupted_batch_is_reported_and_fails_verify(kafka_logdir: Path, tmp_path: Path) -> None:
    path = tmp_path / f"{SEGMENT}.log"
    shutil.copy(kafka_logdir / "TestTopicPatient-0" / f"{SEGMENT}.log", path)
    batches = _kafka_python_batches(path)
    position = batches[1][0]
    data = bytearray(path.read_bytes())
    data[position + 100] ^= 0xFF  # inside the second batch's records
    path.write_bytes(bytes(data))
    lines = tierlog("dump-log", path).stdout.splitlines()[2:]
    assert [line.endswith("isvalid: true") for line in lines] == [True, False, True]
    error = user_error("dump-log", "--verify", path)
    assert f"batch at position {position} (offsets 1-1) is invalid: stored crc" in error


def test_trailing_garbage_and_bad_index_are_reported(tmp_path: Path, kafka_logdir: Path) -> None:
    source = kafka_logdir / "__consumer_offsets-6"
    log_path = tmp_path / f"{SEGMENT}.log"
    log_path.write_bytes((source / f"{SEGMENT}.log").read_bytes() + b"\x00" * 7)
    assert "Found 7 invalid bytes at the end of 00000000000000000000.log" in tierlog(
        "dump-log", log_path).stdout
    index = tmp_path / f"{SEGMENT}.index"
    # offsets 3 and 7 with each other's positions: wrong batches, and out of order
    index.write_bytes(bytes.fromhex("00000007 0000127a 00000003 00002563"))
    done = tierlog("dump-log", index)
    assert done.stdout.splitlines()[1:] == ["offset: 7 position: 4730", "offset: 3 position: 9571"]
    assert done.stderr.splitlines() == [f"Mismatches in :{index.absolute()}",
                                        "  Index offset: 7, log offset: 3",
                                        "  Index offset: 3, log offset: 7"]
    assert "2 entries do not point at the batch" in user_error("dump-log", "--verify", index)
    error = user_error("dump-log", "--index-sanity-check", index)
    assert "offset index" in error and "is corrupt" in error


def test_missing_files_and_no_files(tmp_path: Path) -> None:
    assert "nothing.log: No such file" in user_error("dump-log", tmp_path / "nothing.log")
    assert "at least one FILE" in user_error("dump-log")


def test_tierlogs_own_segments_transactions_and_snapshots(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager.open(data, {"segment.bytes": 4096, "index.interval.bytes": 512}) as mgr:
        log = mgr.create_topic("own", 1)[0]
        appended = 0
        for n, codec in enumerate(["gzip", "snappy", "lz4", "zstd", "none"] * 6):
            log.append_records([Record(key=b"k%d" % n, value=b"v" * 200, headers=[("h", b"1")])
                                for _ in range(5)], compression=codec)
            appended += 1
        log.append_records([Record(value=b"t%d" % i) for i in range(3)], producer_id=7,
                           producer_epoch=0, base_sequence=0, transactional=True)
        log.append_marker(7, 0, commit=False)
        appended += 2
        segments = len(log.segments)
        end = log.log_end_offset
    directory = data / "own-0"
    out = tierlog("dump-log", "--deep-iteration", directory).stdout
    batches = [line for line in out.splitlines() if line.startswith("baseOffset:")]
    assert len(batches) == appended and segments > 1
    assert out.count("Log starting offset:") == segments
    assert all(line.endswith("isvalid: true") for line in batches)
    assert batches[-1].startswith(f"baseOffset: {end - 1} lastOffset: {end - 1} count: 1")
    assert "producerId: 7 producerEpoch: 0" in batches[-1] and "isControl: true" in batches[-1]
    assert f"| offset: {end - 1} " in out and "endTxnMarker: ABORT coordinatorEpoch: 0" in out
    assert {re.search(r"compresscodec: (\w+)", b).group(1) for b in batches} == {
        "none", "gzip", "snappy", "lz4", "zstd"}
    assert (f"version: 0 producerId: 7 firstOffset: {end - 4} lastOffset: {end - 1} "
            f"lastStableOffset: ") in out
    snapshot = [line for line in out.splitlines() if line.startswith("producerId: 7 ")]
    assert snapshot and "firstSequence: 0 lastSequence: 2" in snapshot[-1]
    verified = tierlog("dump-log", "--verify", directory)
    assert "invalid" not in verified.stdout and verified.stderr == ""


@pytest.mark.parametrize("records", [2, 60])
def test_a_live_partitions_preallocated_indexes_are_not_damage(tmp_path: Path,
                                                               records: int) -> None:
    """The active segment of a live owner has its indexes preallocated to
    segment.index.bytes (zero-filled): as Kafka's DumpLogSegments, the zeroed tail is unused
    space, whether the index holds entries (60 records) or none yet (2 records)."""
    owner = LogManager.open(tmp_path, {"index.interval.bytes": 256}, start_scheduler=False)
    try:
        log = owner.create_topic("t", 1)[0]
        for i in range(records):
            log.append_records([Record(value=b"v%02d" % i + b"." * 80)])
        active = log.segments.active
        index, time_index = active.offset_index, active.time_index
        assert index.length > index.size_in_bytes  # preallocated, as beside a live server
        expected = index.entries
        assert (expected > 0) == (records == 60)
        directory = tmp_path / "t-0"
        verified = tierlog("dump-log", "--verify", directory)
        assert (f"{index.path} is empty." if not expected else
                f"{index.path}: {expected} entries, no mismatches") in verified.stdout
        assert f"{time_index.path}: {time_index.entries} entries, no problems" in verified.stdout
        assert verified.stderr == ""
        listed = tierlog("dump-log", index.path).stdout.splitlines()[1:]
        assert listed == ([f"offset: {e.offset} position: {e.position}"
                           for e in map(index.entry, range(expected))]
                          or [f"{index.path} is empty."])
        sane = tierlog("dump-log", "--index-sanity-check", index.path, time_index.path).stdout
        assert (f"{index.path} is empty." if not expected else
                f"{index.path} passed sanity check.") in sane
        assert f"{time_index.path} passed sanity check." in sane
    finally:
        owner.close()


def test_a_non_zero_entry_after_the_zeroed_tail_start_is_still_damage(tmp_path: Path) -> None:
    """Only an all-zero tail is unused space: an entry that breaks the order, even behind
    zeroed slots, is reported."""
    index = tmp_path / f"{SEGMENT}.index"
    index.write_bytes(bytes.fromhex("00000007 0000127a") + bytes(16)
                      + bytes.fromhex("00000003 00002563") + bytes(800))
    error = user_error("dump-log", "--index-sanity-check", index)
    assert "is corrupt" in error and "entry 1 " in error
