"""The real Kafka 3.7 broker directory opens with tierlog and agrees with Kafka's own files."""

from __future__ import annotations

import shutil

import pytest
from kafka.record.default_records import DefaultRecordBatch

from tierlog import Log
from tierlog.index import OffsetIndex, TimeIndex

PARTITIONS = ["TestTopicPatient-0", "__consumer_offsets-6", "__cluster_metadata-0"]


def _kafka_python_records(log_bytes: bytes):
    """Parse a .log file with kafka-python, an independent implementation."""
    out, pos = [], 0
    while pos < len(log_bytes):
        length = int.from_bytes(log_bytes[pos + 8:pos + 12], "big") + 12
        batch = DefaultRecordBatch(log_bytes[pos:pos + length])
        assert batch.validate_crc()
        for record in batch:
            out.append((record.offset, record.timestamp, record.key, record.value,
                        tuple((k, v) for k, v in record.headers)))
        pos += length
    return out


def _all(log):
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        got = list(log.read(offset).records(include_control=True))
        if not got:
            break
        out.extend(got)
        offset = got[-1].offset + 1
    return out


@pytest.mark.parametrize("partition", PARTITIONS)
def test_every_record_reads_back_as_kafka_python_parses_it(kafka_logdir, partition):
    directory = kafka_logdir / partition
    expected = _kafka_python_records((directory / "00000000000000000000.log").read_bytes())
    with Log.open(directory) as log:
        got = _all(log)
        assert log.log_end_offset > expected[-1][0]
    assert [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in got] == expected


def test_fixture_recovery_truncates_nothing(kafka_logdir):
    for partition in PARTITIONS:
        with Log.open(kafka_logdir / partition) as log:
            assert log.recovery.bytes_truncated == 0
            assert log.recovery.segments_deleted == []


def test_index_lookups_agree_with_the_index_files_kafka_wrote(kafka_logdir):
    directory = kafka_logdir / "__consumer_offsets-6"
    kafka_index = (directory / "00000000000000000000.index").read_bytes()
    kafka_timeindex = (directory / "00000000000000000000.timeindex").read_bytes()
    # Kafka's own index files answer lookups ...
    kafka_offsets = OffsetIndex(directory / "00000000000000000000.index", 0, writable=False)
    kafka_times = TimeIndex(directory / "00000000000000000000.timeindex", 0, writable=False)
    with Log.open(directory, had_clean_shutdown=True) as log:
        segment = log.segments.active
        for offset in range(log.log_end_offset):
            kafka_pos = kafka_offsets.lookup(offset).position
            assert segment.offset_index.lookup(offset).position == kafka_pos
            found = segment.translate_offset(offset)
            assert found is not None and found.offset >= offset
        for entry in range(kafka_times.entries):
            ts, off = kafka_times.entry(entry)
            assert segment.time_index.lookup(ts).offset == off
    kafka_offsets.close()
    kafka_times.close()
    # ... and tierlog, rebuilding the indexes from the .log alone, writes the same bytes.
    rebuilt = kafka_logdir / "rebuilt" / "__consumer_offsets-6"
    rebuilt.mkdir(parents=True)
    shutil.copy(directory / "00000000000000000000.log", rebuilt)
    with Log.open(rebuilt) as log:
        assert "00000000000000000000.log" in log.recovery.indexes_rebuilt
    assert (rebuilt / "00000000000000000000.index").read_bytes() == kafka_index
    assert (rebuilt / "00000000000000000000.timeindex").read_bytes() == kafka_timeindex


def test_fixture_snapshot_and_epoch_checkpoint_load(kafka_logdir):
    directory = kafka_logdir / "__consumer_offsets-6"
    with Log.open(directory, had_clean_shutdown=True) as log:
        assert log.leader_epoch_cache.latest_epoch == 0
        assert log.log_end_offset == 13
    patient = kafka_logdir / "TestTopicPatient-0"
    # The broker wrote this in January 2026: open it "then", or the idle producers expire
    # (producer.id.expiration.ms) exactly as Kafka would expire them.
    with Log.open(patient, time_ms=lambda: 1_769_793_578_165 + 1000) as log:
        assert log.topic == "TestTopicPatient"
        assert log.topic_id == "B3_HiNPgSQ6oxG9ZZ6ED5A"
        # Producer ids 1-3 wrote this topic idempotently; their state is rebuilt from the log.
        assert set(log.producer_state.active_producers) >= {1}
