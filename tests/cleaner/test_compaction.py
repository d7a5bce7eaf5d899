"""Cleaner / CompactPolicy: Kafka's log compaction, checked against a dict model of the log."""

from __future__ import annotations

import threading

import pytest
from support.compaction_workload import (
    TOPIC_DIR,
    Workload,
    committed_view,
    open_log,
    read_all,
    read_batches,
)

from tierlog import Log, Record
from tierlog.cleaner.cleaner_checkpoint import CleanerCheckpoints
from tierlog.cleaner.compactor import Cleaner, CompactionResult, CompactPolicy
from tierlog.cleaner.rewrite import empty_batch, rewrite_batch
from tierlog.common.filenames import CLEANER_OFFSET_CHECKPOINT
from tierlog.errors import OutOfOrderSequenceError
from tierlog.records import RecordBatch, build_batch
from tierlog.records.compression import CODEC_NAMES


def check_compacted(log: Log, pre: list[Record], workload: Workload, end_offset: int) -> None:
    """Offsets kept and unchanged, no duplicates, exactly the latest per key below the cleaned
    end offset, untouched above it, and the committed view equal to the model."""
    post = read_all(log)
    offsets = [r.offset for r in post]
    assert offsets == sorted(set(offsets)), "duplicate or out-of-order offsets"
    before = {r.offset: r for r in pre}
    for record in post:
        assert record == before[record.offset], f"record at offset {record.offset} changed"
    assert [o for o in offsets if o < end_offset] == workload.expected_below(end_offset)
    assert [r for r in post if r.offset >= end_offset] == [r for r in pre if r.offset >= end_offset]
    assert committed_view(log) == workload.latest()


def check_batch_metadata(pre: list[RecordBatch], post: list[RecordBatch]) -> None:
    """Every batch keeps its offsets, producer fields, flags and (when not empty) its codec."""
    originals = {b.base_offset: b for b in pre}
    for batch in post:
        batch.ensure_valid()
        original = originals[batch.base_offset]
        fields = ("last_offset", "producer_id", "producer_epoch", "base_sequence",
                  "is_transactional", "is_control", "partition_leader_epoch", "timestamp_type")
        assert [getattr(batch, f) for f in fields] == [getattr(original, f) for f in fields]
        if batch.record_count:
            assert batch.compression == original.compression


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_workloads_keep_exactly_the_latest_value_per_key(tmp_path, clock, seed):
    log = open_log(tmp_path / TOPIC_DIR, clock)
    workload = Workload(log, clock, seed).run(250).finish()
    log.roll()
    pre, pre_batches = read_all(log), read_batches(log)
    assert committed_view(log) == workload.latest()

    result = Cleaner().clean_log(log, clock.now, force=True)

    assert result.skipped is None and result.end_offset == log.segments.active.base_offset
    assert result.records_removed > 0 and result.bytes_after < result.bytes_before
    check_compacted(log, pre, workload, result.end_offset)
    post_batches = read_batches(log)
    check_batch_metadata(pre_batches, post_batches)
    assert {b.compression for b in post_batches if b.record_count and not b.is_control} \
        == {CODEC_NAMES[c] for c in workload.codecs_used}

    # A second round over the cleaned log plus new dirty data.
    workload.run(150).finish()
    log.roll()
    pre = read_all(log)
    second = Cleaner().clean_log(log, clock.now, force=True)
    assert second.first_dirty_offset == result.end_offset
    check_compacted(log, pre, workload, second.end_offset)

    # And the files on disk say the same after a reopen (as after a crash).
    expected = read_all(log)
    log.close()
    with open_log(tmp_path / TOPIC_DIR, clock) as reopened:
        assert read_all(reopened) == expected
        assert committed_view(reopened) == workload.latest()


def _tombstone_log(tmp_path, clock, retention_ms: int) -> Log:
    log = open_log(tmp_path / TOPIC_DIR, clock, **{"delete.retention.ms": retention_ms})
    log.append_records([Record(b"a", b"1"), Record(b"b", b"1")])
    log.append_records([Record(b"a", None)], "lz4")
    log.append_records([Record(b"c", b"1")])
    log.roll()
    return log


def test_tombstone_gets_a_delete_horizon_then_goes_after_delete_retention(tmp_path, clock):
    log = _tombstone_log(tmp_path, clock, retention_ms=1000)
    cleaner = Cleaner()
    t0 = clock.now
    cleaner.clean_log(log, t0, force=True)
    assert [(r.offset, r.key, r.value) for r in read_all(log)] == \
        [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    tombstone_batch = next(b for b in read_batches(log) if b.base_offset == 2)
    assert tombstone_batch.delete_horizon_ms == t0 + 1000
    assert tombstone_batch.compression == CODEC_NAMES["lz4"]

    cleaner.clean_log(log, t0 + 999, force=True)
    assert [r.offset for r in read_all(log)] == [1, 2, 3]
    assert next(b for b in read_batches(log) if b.base_offset == 2).delete_horizon_ms == t0 + 1000

    cleaner.clean_log(log, t0 + 1000, force=True)
    assert [(r.offset, r.key) for r in read_all(log)] == [(1, b"b"), (3, b"c")]
    assert committed_view(log) == {b"b": b"1", b"c": b"1"}


def test_tombstone_in_a_batch_with_live_records_keeps_their_timestamps(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock)
    log.append_records([Record(b"x", b"1", timestamp=clock.now - 5),
                        Record(b"y", None, timestamp=clock.now - 3)], "zstd")
    log.roll()
    before = read_all(log)
    Cleaner().clean_log(log, clock.now, force=True)
    batch = read_batches(log)[0]
    assert batch.has_delete_horizon and batch.max_timestamp == clock.now - 3
    assert read_all(log) == before


def test_aborted_data_goes_and_its_marker_after_the_horizon(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock, **{"delete.retention.ms": 500})
    pid = 7
    log.append_records([Record(b"a", b"aborted")], producer_id=pid, producer_epoch=0,
                       base_sequence=0, transactional=True)
    log.append_marker(pid, 0, commit=False)  # offset 1
    log.append_records([Record(b"b", b"committed")], producer_id=pid, producer_epoch=0,
                       base_sequence=1, transactional=True)
    log.append_marker(pid, 0, commit=True)  # offset 3
    log.append_records([Record(b"c", b"plain")])
    log.roll()
    cleaner = Cleaner()

    cleaner.clean_log(log, clock.now, force=True)
    assert [r.offset for r in read_all(log)] == [2, 4]  # the aborted record is gone
    controls = [b for b in read_batches(log) if b.is_control]
    assert [b.base_offset for b in controls] == [1, 3]  # the ABORT marker stays this round...
    assert [t.first_offset for t in log.segments.first.txn_index.all_aborted_txns()] == [0]
    assert committed_view(log) == {b"b": b"committed", b"c": b"plain"}

    t1 = clock.now + 10
    cleaner.clean_log(log, t1, force=True)
    abort = next(b for b in read_batches(log) if b.base_offset == 1)
    assert abort.delete_horizon_ms == t1 + 500  # ...then gets a horizon, no data being left
    assert log.segments.first.txn_index.all_aborted_txns() == []

    cleaner.clean_log(log, t1 + 500, force=True)
    assert [b.base_offset for b in read_batches(log) if b.is_control] == [3]
    assert committed_view(log) == {b"b": b"committed", b"c": b"plain"}


def test_commit_marker_goes_once_its_transaction_has_no_data(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock, **{"delete.retention.ms": 500})
    pid = 8
    for sequence, value in enumerate((b"1", b"2")):
        log.append_records([Record(b"a", value)], producer_id=pid, producer_epoch=0,
                           base_sequence=sequence, transactional=True)
        log.append_marker(pid, 0, commit=True)  # offsets 1 and 3
    log.append_records([Record(b"z", b"plain")])
    log.roll()
    cleaner = Cleaner()
    now = clock.now
    cleaner.clean_log(log, now, force=True)  # a=1 goes; its marker saw it: stays
    assert [b.base_offset for b in read_batches(log) if b.is_control] == [1, 3]
    cleaner.clean_log(log, now + 1, force=True)  # no data left: horizon set
    assert [b.delete_horizon_ms for b in read_batches(log) if b.is_control] == [now + 501, None]
    cleaner.clean_log(log, now + 501, force=True)
    assert [b.base_offset for b in read_batches(log) if b.is_control] == [3]
    assert committed_view(log) == {b"a": b"2", b"z": b"plain"}


def test_idempotent_producers_last_batch_stays_as_an_empty_batch(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock)
    pid = 9
    log.append_records([Record(b"k", b"1")], "gzip", producer_id=pid, producer_epoch=3,
                       base_sequence=0)
    log.append_records([Record(b"k", b"2"), Record(b"j", b"2")], "gzip", producer_id=pid,
                       producer_epoch=3, base_sequence=1)
    log.append_records([Record(b"k", b"3"), Record(b"j", b"3")])
    log.append_records([Record(b"other", b"x")])
    log.roll()
    Cleaner().clean_log(log, clock.now, force=True)

    batches = read_batches(log)
    assert 0 not in [b.base_offset for b in batches]  # not the producer's last: gone
    empty = next(b for b in batches if b.base_offset == 1)
    assert (empty.record_count, empty.last_offset, empty.producer_id, empty.producer_epoch,
            empty.base_sequence, empty.compression) == (0, 2, pid, 3, 1, 0)
    log.close()
    for snapshot in (tmp_path / TOPIC_DIR).glob("*.snapshot"):
        snapshot.unlink()  # producer state must come from the log itself
    with open_log(tmp_path / TOPIC_DIR, clock) as reopened:
        with pytest.raises(OutOfOrderSequenceError):
            reopened.append_records([Record(b"k", b"4")], producer_id=pid, producer_epoch=3,
                                    base_sequence=5)
        info = reopened.append_records([Record(b"k", b"4")], producer_id=pid,
                                       producer_epoch=3, base_sequence=3)
        assert not info.duplicate


def test_open_transaction_stops_cleaning_at_the_last_stable_offset(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock)
    for i in range(3):
        log.append_records([Record(b"k", b"%d" % i)])
        log.roll()
    log.append_records([Record(b"k", b"open")], producer_id=5, producer_epoch=0,
                       base_sequence=0, transactional=True)  # offset 3, LSO
    log.append_records([Record(b"k", b"after")])
    log.roll()
    log.append_records([Record(b"k", b"later")])
    log.roll()
    untouched = {s.base_offset: s.path.read_bytes() for s in log.segments if s.base_offset >= 3}

    result = Cleaner().clean_log(log, clock.now, force=True)

    assert log.last_stable_offset == 3 and result.end_offset == 3
    assert [r.offset for r in read_all(log) if r.offset < 3] == [2]
    assert {s.base_offset: s.path.read_bytes() for s in log.segments
            if s.base_offset >= 3} == untouched


def test_active_segment_is_never_cleaned(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock, **{"segment.bytes": 1 << 20})
    for i in range(20):
        log.append_records([Record(b"k", b"%d" % i)])
    active = log.segments.active.path.read_bytes()
    result = Cleaner().clean_log(log, clock.now, force=True)
    assert result.skipped == "no closed segments to clean"
    assert log.segments.active.path.read_bytes() == active
    assert len(read_all(log)) == 20


def test_min_compaction_lag_holds_back_young_segments(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock, **{"min.compaction.lag.ms": 10_000})
    log.append_records([Record(b"k", b"old")])
    log.roll()
    clock.advance(20_000)
    log.append_records([Record(b"k", b"young")])
    log.roll()
    cleaner = Cleaner()

    result = cleaner.clean_log(log, clock.now + 5_000, force=True)
    assert result.end_offset == 1  # the young segment is uncleanable
    assert [r.value for r in read_all(log)] == [b"old", b"young"]

    result = cleaner.clean_log(log, clock.now + 10_001, force=True)
    assert result.end_offset == 2
    assert [r.value for r in read_all(log)] == [b"young"]


def _fill(log: Log, keys: range, rounds: int, size: int = 100) -> None:
    for r in range(rounds):
        for k in keys:
            log.append_records([Record(b"k%d" % k, b"%d" % r * size)])
    log.roll()


def test_dirty_ratio_decides_and_max_compaction_lag_forces(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock, **{"max.compaction.lag.ms": 60_000})
    policy = CompactPolicy(Cleaner())
    assert policy.name == "compact"
    _fill(log, range(50), rounds=4)
    first = policy.clean(log, clock.now)
    assert isinstance(first, CompactionResult) and first.skipped is None
    assert first.dirty_ratio == 1.0 and first.segments_cleaned > 0

    _fill(log, range(5), rounds=1)  # a little new dirty data
    clean = sum(s.size for s in log.segments if s.base_offset < first.end_offset)
    dirty = sum(s.size for s in log.segments.non_active() if s.base_offset >= first.end_offset)
    second = policy.clean(log, clock.now)
    assert second.dirty_ratio == pytest.approx(dirty / (clean + dirty)) and dirty > 0
    assert second.skipped is not None and "min.cleanable.dirty.ratio" in second.skipped
    assert second.segments_cleaned == 0

    clock.advance(60_001)  # the dirty data is now older than max.compaction.lag.ms
    third = policy.clean(log, clock.now)
    assert third.skipped is None and third.segments_cleaned > 0
    assert committed_view(log) == {b"k%d" % k: b"%d" % (0 if k < 5 else 3) * 100
                                   for k in range(50)}


def test_small_segments_are_merged_within_segment_bytes(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock, **{"segment.bytes": 2048})
    for i in range(40):
        log.append_records([Record(b"k%d" % (i % 8), b"v" * 20)])
        log.roll()
    assert len(log.segments) == 41
    result = Cleaner().clean_log(log, clock.now, force=True)
    assert result.segments_cleaned == 40
    cleaned = log.segments.non_active()
    assert len(cleaned) < 10
    assert all(s.size <= 2048 for s in cleaned)
    assert [r.offset for r in read_all(log)] == list(range(32, 40))


def test_groups_respect_the_relative_offset_limit(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock, **{"segment.bytes": 1 << 20})
    for base in (0, 1 << 30, (1 << 31) + 5):
        log.append(build_batch([Record(b"k", b"%d" % base)], base_offset=base,
                               now_ms=clock.now), assign_offsets=False)
    log.roll()
    assert log.segments.base_offsets() == [0, (1 << 31) + 5, (1 << 31) + 6]
    Cleaner().clean_log(log, clock.now, force=True)
    assert log.segments.base_offsets() == [0, (1 << 31) + 5, (1 << 31) + 6]
    assert [r.offset for r in read_all(log)] == [(1 << 31) + 5]


def test_cleaner_checkpoint_is_written_in_kafka_format_and_honoured(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock)
    for key, value in ((b"old", b"0"), (b"old", b"1"), (b"x", b"2"),
                       (b"k", b"3"), (b"k", b"4"), (b"k", b"5")):
        log.append_records([Record(key, value)])
        log.roll()
    checkpoint = tmp_path / CLEANER_OFFSET_CHECKPOINT
    # Offsets below the checkpoint count as clean: only keys of the dirty range are mapped,
    # so "old", duplicated below it, keeps both records.
    checkpoint.write_text("0\n1\ncompacted 0 3\n")
    result = Cleaner().clean_log(log, clock.now, force=True)
    assert result.first_dirty_offset == 3
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 5]
    assert checkpoint.read_text() == "0\n1\ncompacted 0 6\n"

    log.append_records([Record(b"k", b"6")])
    log.roll()
    again = Cleaner().clean_log(log, clock.now, force=True)
    assert (again.first_dirty_offset, again.end_offset) == (6, 7)
    assert checkpoint.read_text() == "0\n1\ncompacted 0 7\n"
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 6]


def test_checkpoint_outside_the_log_is_reset(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock)
    log.append_records([Record(b"k", b"1"), Record(b"k", b"2")])
    log.roll()
    checkpoint = tmp_path / CLEANER_OFFSET_CHECKPOINT
    checkpoint.write_text("0\n1\ncompacted 0 99\n")
    to_clean = Cleaner().log_to_clean(log, clock.now)
    assert to_clean.force_update_checkpoint and to_clean.first_dirty_offset == 0
    result = Cleaner().clean_log(log, clock.now)
    assert result.skipped is None and [r.offset for r in read_all(log)] == [1]


def test_rewrite_keeps_log_append_time_and_offsets_and_empty_batch_keeps_last_offset():
    records = [Record(b"k%d" % i, b"v%d" % i, headers=(("h", None),)) for i in range(5)]
    batch = RecordBatch(build_batch(records, compression="snappy", base_offset=100,
                                    timestamp_type=1, now_ms=777, producer_id=3,
                                    producer_epoch=1, base_sequence=10, is_transactional=True))
    kept = batch.records()[1::2]
    rewritten = RecordBatch(rewrite_batch(batch, kept, None))
    rewritten.ensure_valid()
    assert rewritten.records() == kept and [r.offset for r in kept] == [101, 103]
    assert (rewritten.max_timestamp, rewritten.timestamp_type, rewritten.last_offset,
            rewritten.compression) == (777, 1, 104, CODEC_NAMES["snappy"])
    empty = RecordBatch(empty_batch(batch))
    empty.ensure_valid()
    assert (empty.record_count, empty.base_offset, empty.last_offset, empty.base_timestamp,
            empty.max_timestamp, empty.compression, empty.is_transactional,
            empty.base_sequence) == (0, 100, 104, -1, 777, 0, True, 10)


def test_checkpoints_truncate_and_remove_only_their_partition(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock)
    checkpoint = tmp_path / CLEANER_OFFSET_CHECKPOINT
    checkpoint.write_text("0\n2\nother 0 50\ncompacted 0 40\n")
    checkpoints = CleanerCheckpoints()
    assert checkpoints.read(log) == 40
    checkpoints.maybe_truncate(log, 45)
    assert checkpoints.read(log) == 40
    checkpoints.maybe_truncate(log, 30)
    assert checkpoint.read_text() == "0\n2\nother 0 50\ncompacted 0 30\n"
    checkpoints.remove(log)
    assert checkpoint.read_text() == "0\n1\nother 0 50\n"
    assert checkpoints.read(log) is None


def test_appends_go_on_while_cleaning_and_a_second_run_is_skipped(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock, **{"segment.bytes": 2048})
    workload = Workload(log, clock, seed=9).run(200).finish()
    log.roll()
    expected = workload.latest()
    cleaner = Cleaner()
    nested: list[CompactionResult] = []
    stop = threading.Event()

    def append_meanwhile() -> None:
        i = 0
        while not stop.is_set() or i < 50:
            log.append_records([Record(b"new-%d" % i, b"x")])
            i += 1
        expected.update({b"new-%d" % n: b"x" for n in range(i)})

    appender = threading.Thread(target=append_meanwhile)
    cleaner.swap_hook = lambda step, name: nested.append(cleaner.clean_log(log, clock.now))
    appender.start()
    try:
        result = cleaner.clean_log(log, clock.now, force=True)
    finally:
        stop.set()
        appender.join()
    assert result.skipped is None and result.records_removed > 0
    assert nested and all(r.skipped == "the log is already being cleaned" for r in nested)
    assert committed_view(log) == expected
