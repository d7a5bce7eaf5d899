"""truncate_to, truncate_fully_and_start_at and delete_records_before keep segments, indexes,
producer state, the epoch cache, the high watermark, the recovery point and reads consistent,
in memory and after reopening."""

from __future__ import annotations

import pytest
from support.log_invariants import (
    aborted_txns,
    check_indexes,
    check_offsets_contiguous,
    log_batches,
)

from tierlog import Log, Record
from tierlog.errors import OffsetOutOfRangeError
from tierlog.producer.snapshot import read_snapshot
from tierlog.records import build_batch

CONFIG = {"segment.bytes": 2048, "index.interval.bytes": 100}


def _batch(pid, seq, n=3, txn=False):
    return build_batch([Record(key=b"k", value=b"v" * 40)] * n, producer_id=pid,
                       producer_epoch=0, base_sequence=seq, is_transactional=txn,
                       now_ms=1_700_000_000_000)


def _fill(log: Log, batches: int = 30) -> None:
    """Batches of 3 records from idempotent producer 7, leader epoch i // 10, timestamps that
    mostly rise (every fifth batch is the newest so far by far)."""
    base_ts = 1_700_000_000_000
    for i in range(batches):
        ts = base_ts + i * 10 + (10_000 if i % 5 == 4 else 0)
        log.append(build_batch([Record(key=b"k%d" % i, value=b"v" * 60, timestamp=ts + j)
                                for j in range(3)], producer_id=7, producer_epoch=0,
                               base_sequence=i * 3, now_ms=base_ts), leader_epoch=i // 10)


def _snapshot_offsets(log: Log) -> list[int]:
    return sorted(int(p.name[:20]) for p in log.directory.glob("*.snapshot"))


@pytest.fixture
def log(tmp_path, clock):
    with Log.open(tmp_path / "t-0", CONFIG, time_ms=clock, auto_high_watermark=True) as log:
        _fill(log)
        log.flush()
        assert len(log.segments) >= 4
        yield log


def test_truncate_inside_the_active_segment(log):
    active = log.segments.active
    target = active.base_offset + 4  # inside the second batch of the segment
    assert log.truncate_to(target)
    assert log.log_end_offset == active.base_offset + 3  # whole batches only
    assert log.high_watermark == log.recovery_point == log.log_end_offset
    check_offsets_contiguous(log)
    check_indexes(log, recovered=False)
    assert log.producer_state.last_entry(7).last_seq == log.log_end_offset - 1
    assert all(o <= log.log_end_offset for o in _snapshot_offsets(log))
    assert not log.segments.active.offset_index.is_full()
    leo = log.log_end_offset
    assert log.append(_batch(7, leo)).first_offset == leo


def test_truncate_into_an_earlier_segment_deletes_the_later_ones(log):
    bases = log.segments.base_offsets()
    target = bases[1] + 6
    assert log.truncate_to(target)
    assert log.segments.base_offsets() == bases[:2]
    assert log.log_end_offset == target
    for base in bases[2:]:
        assert not (log.directory / f"{base:020d}.log").exists()
        assert not list(log.directory.glob(f"{base:020d}.*"))
    check_indexes(log, recovered=False)
    # The old segment is active again: its indexes take appends, it rolls as usual.
    for i in range(10):
        log.append(_batch(7, target + i * 3))
    check_offsets_contiguous(log)
    check_indexes(log, recovered=False)
    assert len(log.segments) > 2


def test_truncate_restores_the_max_timestamp_from_the_data(tmp_path, clock):
    """The time index is sparse: after truncation the max timestamp must come from the
    batches after the last surviving index entry too (Kafka's readLargestTimestamp)."""
    config = {"index.interval.bytes": 1 << 20}  # no index entries in the active segment
    with Log.open(tmp_path / "t-0", config, time_ms=clock) as log:
        for ts in (500, 900, 700, 800, 950):
            log.append_records([Record(value=b"v", timestamp=clock.now + ts)] * 2)
        assert log.segments.active.time_index.entries == 0
        log.truncate_to(8)
        segment = log.segments.active
        assert segment.max_timestamp_so_far == clock.now + 900
        assert segment.offset_of_max_timestamp_so_far == 3
        assert log.fetch_offset_by_timestamp(-3) == (clock.now + 900, 3)
        assert log.offset_for_timestamp(clock.now + 850) == 2
        log.roll()  # the rolled segment's final time index entry is that maximum
        check_indexes(log, recovered=False)
        assert segment.time_index.last_entry == (clock.now + 900, 3)


def test_truncate_beyond_the_end_is_a_no_op_but_trims_the_epoch_cache(log):
    leo = log.log_end_offset
    log.leader_epoch_cache.assign(9, leo)  # a leader that wrote nothing in its epoch
    assert not log.truncate_to(leo)
    assert log.leader_epoch_cache.latest_epoch == 2
    assert (log.directory / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n1 30\n2 60\n"


def test_truncate_updates_epochs_and_producer_state(log):
    assert log.truncate_to(40)
    assert [tuple(e) for e in log.leader_epoch_cache.entries()] == [(0, 0), (1, 30)]
    assert log.producer_state.last_entry(7).last_seq == 38
    # A batch that was truncated away is not a duplicate any more: it is appended again.
    again = log.append(_batch(7, 39))
    assert not again.duplicate and again.first_offset == 39
    assert log.append(_batch(7, 39)).duplicate


def test_truncating_an_abort_marker_reopens_its_transaction(tmp_path, clock):
    with Log.open(tmp_path / "t-0", CONFIG, time_ms=clock, auto_high_watermark=True) as log:
        log.append_records([Record(value=b"x")] * 2)
        first = log.append(_batch(9, 0, txn=True)).first_offset
        marker = log.append_marker(9, 0, commit=False).first_offset
        log.append_records([Record(value=b"y")])
        assert aborted_txns(log) == [(9, first, marker, marker + 1)]
        assert log.truncate_to(marker)
        assert aborted_txns(log) == []
        assert log.last_stable_offset == first
        log.append_marker(9, 0, commit=True)
        assert log.last_stable_offset == log.log_end_offset
        assert [r.offset for r in log.read(0, isolation="read_committed").records()] == \
            [0, 1, 2, 3, 4]


def test_truncate_below_the_log_start_offset_moves_it_down(log):
    log.delete_records_before(50)
    bases = log.segments.base_offsets()
    assert log.truncate_to(45)
    assert log.log_start_offset == log.log_end_offset == 45
    assert log.segments.first.base_offset == bases[0]


def test_truncate_fully_and_start_at(log, tmp_path, clock):
    log.truncate_fully_and_start_at(1000)
    assert log.segments.base_offsets() == [1000]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.recovery_point) \
        == (1000, 1000, 1000, 1000)
    assert log.leader_epoch_cache.entries() == []
    assert dict(log.producer_state.active_producers) == {}
    assert _snapshot_offsets(log) == []
    assert sorted(p.name for p in log.directory.glob("*.log")) == ["00000000000000001000.log"]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(999)
    assert log.append_records([Record(value=b"new")], leader_epoch=5).first_offset == 1000
    log.close()
    with Log.open(log.directory, CONFIG, time_ms=clock, had_clean_shutdown=True) as reopened:
        assert (reopened.log_start_offset, reopened.log_end_offset) == (1000, 1001)
        assert [tuple(e) for e in reopened.leader_epoch_cache.entries()] == [(5, 1000)]


def test_delete_records_before(log):
    hw = log.high_watermark
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        log.delete_records_before(hw + 1)
    assert log.delete_records_before(35) == 35
    assert log.log_start_offset == 35
    with pytest.raises(OffsetOutOfRangeError, match="offset 34 is out of range"):
        log.read(34)
    assert next(r.offset for r in log.read(35).records()) == 35
    assert log.fetch_offset_by_timestamp(-2).offset == 35
    assert [tuple(e) for e in log.leader_epoch_cache.entries()] == [(1, 35), (2, 60)]
    assert log.delete_records_before(20) == 35  # never moves back
    assert log.producer_state.last_entry(7).last_seq == 89  # producers are unaffected


@pytest.mark.parametrize("clean", [True, False])
def test_state_after_truncation_survives_reopening(tmp_path, clock, clean):
    directory = tmp_path / "t-0"
    with Log.open(directory, CONFIG, time_ms=clock, auto_high_watermark=True) as log:
        _fill(log)
        log.truncate_to(52)
        leo, epochs = log.log_end_offset, log.leader_epoch_cache.entries()
        batches = [bytes(b.view()) for b in log_batches(log)]
        last_seq = log.producer_state.last_entry(7).last_seq
    with Log.open(directory, CONFIG, time_ms=clock, had_clean_shutdown=clean) as log:
        assert log.log_end_offset == leo
        assert log.leader_epoch_cache.entries() == epochs
        assert [bytes(b.view()) for b in log_batches(log)] == batches
        assert log.producer_state.last_entry(7).last_seq == last_seq
        check_indexes(log)
        for path in directory.glob("*.snapshot"):
            assert int(path.name[:20]) <= leo
            read_snapshot(path)
