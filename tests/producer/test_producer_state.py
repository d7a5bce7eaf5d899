"""ProducerStateManager, ProducerAppendInfo and the snapshot format, following Kafka's rules."""

from __future__ import annotations

import struct

import crc32c
import pytest

from tierlog.common.int_bounds import INT32_MAX
from tierlog.errors import (
    CorruptSnapshotError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    TransactionCoordinatorFencedError,
)
from tierlog.producer.append import (
    ABORT_MARKER,
    COMMIT_MARKER,
    NUM_BATCHES_TO_RETAIN,
    CompletedTxn,
    increment_sequence,
)
from tierlog.producer.snapshot import (
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
)
from tierlog.producer.state import ProducerStateManager

NOW = 1_700_000_000_000
EMPTY_SNAPSHOT = bytes.fromhex("0001 48674bc7 00000000")


@pytest.fixture
def psm(tmp_path):
    return ProducerStateManager(tmp_path, time_ms=lambda: NOW)


def append(psm, pid, epoch, first_seq, count, offset, *, txn=False, origin="client", ts=NOW):
    """Append one data batch of ``count`` records at ``offset`` as the Log would."""
    info = psm.prepare_update(pid, origin)
    last_seq = increment_sequence(first_seq, count - 1) if first_seq >= 0 else -1
    info.append_data_batch(epoch, first_seq, last_seq, ts, offset, offset + count - 1, txn)
    psm.update(info)
    psm.update_map_end_offset(offset + count)


def marker(psm, pid, epoch, offset, *, commit=True, coordinator_epoch=0, origin="coordinator"):
    info = psm.prepare_update(pid, origin)
    control = COMMIT_MARKER if commit else ABORT_MARKER
    completed = info.append_end_txn_marker(control, epoch, offset, NOW, coordinator_epoch)
    psm.update(info)
    psm.update_map_end_offset(offset + 1)
    return completed


# -- snapshot format -----------------------------------------------------------------------


def test_empty_snapshot_bytes():
    assert encode_snapshot([]) == EMPTY_SNAPSHOT
    assert decode_snapshot(EMPTY_SNAPSHOT) == []


def test_kafka_fixture_snapshot_reads_and_reencodes(kafka_logdir):
    path = kafka_logdir / "__consumer_offsets-6" / "00000000000000000013.snapshot"
    assert read_snapshot(path) == []
    assert encode_snapshot(read_snapshot(path)) == path.read_bytes()
    psm = ProducerStateManager(path.parent, time_ms=lambda: NOW)
    assert psm.latest_snapshot_offset == 13
    psm.truncate_and_reload(0, 13, NOW)
    assert psm.map_end_offset == 13
    assert dict(psm.active_producers) == {}
    assert path.exists()


def test_entry_layout_and_crc():
    entry = SnapshotEntry(7, 3, 41, 1000, 4, NOW, 2, 990)
    data = encode_snapshot([entry])
    assert len(data) == 10 + 46
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1)
    assert crc == crc32c.crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == tuple(entry)
    assert decode_snapshot(data) == [entry]


def _recrc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 2, crc32c.crc32c(bytes(data[6:])))
    return bytes(data)


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda d: d[:-1],  # a torn write
        lambda d: d[:-3] + bytes([d[-3] ^ 0x40]) + d[-2:],  # a flipped bit
        lambda d: _recrc(bytearray(d[:-5])),  # valid CRC, entry cut short
        lambda d: _recrc(bytearray(d) + b"\0"),  # valid CRC, trailing byte
        lambda d: b"\x00\x02" + d[2:],  # unknown version
        lambda d: d[:5],  # shorter than the header
    ],
)
def test_corrupt_snapshot_is_rejected_naming_the_file(tmp_path, corrupt):
    data = encode_snapshot([SnapshotEntry(7, 3, 41, 1000, 4, NOW, 2, -1)])
    path = tmp_path / "00000000000000000010.snapshot"
    path.write_bytes(corrupt(data))
    with pytest.raises(CorruptSnapshotError, match=r"00000000000000000010\.snapshot"):
        read_snapshot(path)


# -- idempotence ---------------------------------------------------------------------------


def test_duplicates_are_found_among_the_last_five_batches(psm):
    for i in range(6):
        append(psm, 1, 0, i * 5, 5, 100 + i * 5)
    entry = psm.last_entry(1)
    assert len(entry.batch_metadata) == NUM_BATCHES_TO_RETAIN
    assert psm.find_duplicate_batch(1, 0, 0, 4) is None  # evicted
    for i in range(1, 6):
        dup = psm.find_duplicate_batch(1, 0, i * 5, i * 5 + 4)
        assert dup is not None
        assert (dup.first_offset, dup.last_offset, dup.timestamp) == (100 + i * 5, 104 + i * 5, NOW)
    assert psm.find_duplicate_batch(1, 1, 25, 29) is None  # other epoch
    assert psm.find_duplicate_batch(1, 0, 25, 28) is None  # other range
    assert psm.find_duplicate_batch(2, 0, 25, 29) is None  # unknown producer


def test_out_of_order_sequences(psm):
    append(psm, 1, 0, 0, 3, 0)
    for first_seq in (4, 2, 0):
        with pytest.raises(OutOfOrderSequenceError, match="producer 1 at offset 3"):
            append(psm, 1, 0, first_seq, 1, 3)
    append(psm, 1, 0, 3, 1, 3)
    assert psm.last_entry(1).last_seq == 3
    # Replicated batches were validated by the leader: a gap is accepted.
    append(psm, 1, 0, 10, 1, 4, origin="replication")
    assert psm.last_entry(1).last_seq == 10


def test_sequences_within_one_append_are_checked_against_each_other(psm):
    append(psm, 1, 0, 0, 5, 0)
    info = psm.prepare_update(1, "client")
    info.append_data_batch(0, 5, 9, NOW, 5, 9, False)
    with pytest.raises(OutOfOrderSequenceError):
        info.append_data_batch(0, 11, 12, NOW, 10, 11, False)
    info = psm.prepare_update(1, "client")
    info.append_data_batch(0, 5, 9, NOW, 5, 9, False)
    info.append_data_batch(0, 10, 11, NOW, 10, 11, False)
    assert [b.last_seq for b in psm.last_entry(1).batch_metadata] == [4]  # not applied yet
    psm.update(info)
    assert [b.last_seq for b in psm.last_entry(1).batch_metadata] == [4, 9, 11]


def test_a_producer_without_epoch_may_use_any_sequence(psm):
    # Kafka accepts any sequence while the producer had no state before this append.
    info = psm.prepare_update(9, "client")
    info.append_data_batch(0, 42, 43, NOW, 0, 1, False)
    info.append_data_batch(0, 50, 50, NOW, 2, 2, False)
    psm.update(info)
    assert psm.last_entry(9).last_seq == 50


def test_epoch_fencing(psm):
    append(psm, 1, 2, 0, 1, 0)
    with pytest.raises(ProducerFencedError, match="producer 1"):
        append(psm, 1, 1, 1, 1, 1)
    with pytest.raises(ProducerFencedError):
        marker(psm, 1, 1, 1)
    # A bumped epoch must restart the sequence at 0 and forgets the old batches.
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        append(psm, 1, 3, 1, 1, 1)
    append(psm, 1, 3, 0, 1, 1)
    entry = psm.last_entry(1)
    assert entry.producer_epoch == 3
    assert [b.last_seq for b in entry.batch_metadata] == [0]
    # Replication only logs a stale epoch.
    append(psm, 1, 2, 5, 1, 2, origin="replication")


def test_sequence_wraps_at_int32_max(psm):
    append(psm, 1, 0, INT32_MAX - 2, 2, 0)  # sequences MAX-2, MAX-1
    append(psm, 1, 0, INT32_MAX, 3, 2)  # MAX, 0, 1
    batch = psm.last_entry(1).batch_metadata[-1]
    assert (batch.first_seq, batch.last_seq) == (INT32_MAX, 1)
    assert psm.find_duplicate_batch(1, 0, INT32_MAX, 1) == batch
    append(psm, 1, 0, 2, 1, 5)
    with pytest.raises(OutOfOrderSequenceError):
        append(psm, 1, 0, 0, 1, 6)


def test_sequence_zero_follows_int32_max(psm):
    append(psm, 1, 0, INT32_MAX, 1, 0)
    append(psm, 1, 0, 0, 1, 1)
    assert psm.last_entry(1).last_seq == 0


# -- transactions --------------------------------------------------------------------------


def test_transactions_and_first_unstable_offset(psm):
    assert psm.first_unstable_offset() is None
    append(psm, 1, 0, 0, 2, 10, txn=True)
    append(psm, 1, 0, 2, 2, 12, txn=True)  # same transaction continues
    append(psm, 2, 0, 0, 1, 14, txn=True)
    append(psm, 3, 0, 0, 1, 15)  # idempotent, not transactional
    assert psm.first_unstable_offset() == 10
    assert psm.last_entry(1).current_txn_first_offset == 10

    completed = marker(psm, 1, 0, 16, commit=True)
    assert completed == CompletedTxn(1, 10, 16, is_aborted=False)
    assert psm.last_stable_offset(completed) == 14  # producer 2's transaction is still open
    psm.complete_txn(completed)
    assert psm.last_entry(1).current_txn_first_offset is None
    assert psm.first_undecided_offset() == 14
    # Completed, but its marker is not yet below the high watermark.
    assert psm.first_unstable_offset() == 10
    psm.on_high_watermark_updated(17)
    assert psm.first_unstable_offset() == 14

    aborted = marker(psm, 2, 0, 17, commit=False)
    assert aborted == CompletedTxn(2, 14, 17, is_aborted=True)
    assert psm.last_stable_offset(aborted) == 18
    psm.complete_txn(aborted)
    psm.on_high_watermark_updated(18)
    assert psm.first_unstable_offset() is None


def test_transactional_rules(psm):
    append(psm, 1, 0, 0, 1, 0, txn=True)
    with pytest.raises(InvalidTxnStateError, match="transaction from offset 0"):
        append(psm, 1, 0, 1, 1, 1, txn=False)
    # A marker without an open transaction completes nothing.
    assert marker(psm, 5, 0, 2) is None
    with pytest.raises(ValueError):
        psm.complete_txn(CompletedTxn(5, 2, 2, False))
    # Coordinator fencing: a marker from an older coordinator epoch.
    psm.complete_txn(marker(psm, 1, 0, 3, coordinator_epoch=4))
    append(psm, 1, 0, 1, 1, 4, txn=True)
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(psm, 1, 0, 5, coordinator_epoch=3)
    assert marker(psm, 1, 0, 5, coordinator_epoch=3, origin="replication") is not None


def test_unknown_origin_and_producer_id(psm):
    with pytest.raises(ValueError, match="origin"):
        psm.prepare_update(1, "somewhere")
    info = psm.prepare_update(-1, "client")
    with pytest.raises(ValueError):
        psm.update(info)


# -- snapshots -----------------------------------------------------------------------------


def _state(psm):
    return {
        pid: (e.producer_epoch, e.last_seq, e.last_data_offset, e.last_offset_delta,
              e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset)
        for pid, e in psm.active_producers.items()
    }


def test_snapshot_round_trip_with_several_producers(tmp_path, psm):
    append(psm, 1, 0, 0, 3, 0)
    append(psm, 2, 5, 10, 2, 3, txn=True)
    append(psm, 3, 1, 0, 1, 5, txn=True)
    psm.complete_txn(marker(psm, 3, 1, 6, coordinator_epoch=7))
    append(psm, 4, 0, 0, 1, 7, ts=NOW - 5)
    append(psm, 5, 0, 0, 1, 8, txn=True)
    psm.complete_txn(marker(psm, 5, 1, 9, commit=False))  # the abort bumped the epoch
    path = psm.take_snapshot()
    assert path == tmp_path / "00000000000000000010.snapshot"
    assert psm.take_snapshot() is None  # already taken at this offset
    assert [e.producer_id for e in read_snapshot(path)] == [1, 2, 3, 4, 5]
    assert read_snapshot(path)[4].last_offset == -1  # no batch of epoch 1 yet

    loaded = ProducerStateManager(tmp_path, time_ms=lambda: NOW)
    loaded.truncate_and_reload(0, 10, NOW)
    assert loaded.map_end_offset == 10
    assert _state(loaded) == _state(psm)
    assert loaded.first_unstable_offset() == 3  # producer 2's open transaction
    # Duplicate detection survives for the last batch of each producer.
    assert loaded.find_duplicate_batch(1, 0, 0, 2).last_offset == 2
    # Producer 3's marker (same epoch) kept its last batch and set the coordinator epoch.
    assert loaded.last_entry(3).last_data_offset == 5
    assert loaded.last_entry(3).coordinator_epoch == 7
    assert loaded.last_entry(3).current_txn_first_offset is None
    assert loaded.last_entry(5).is_empty and loaded.last_entry(5).producer_epoch == 1
    append(loaded, 5, 1, 0, 1, 10)  # epoch 1 starts at sequence 0


def test_corrupt_latest_snapshot_falls_back_to_the_older_one(tmp_path, psm):
    append(psm, 1, 0, 0, 10, 0)
    older = psm.take_snapshot()
    append(psm, 1, 0, 10, 10, 10)
    append(psm, 2, 0, 0, 1, 20)
    newer = psm.take_snapshot()
    data = bytearray(newer.read_bytes())
    data[-1] ^= 0xFF
    newer.write_bytes(bytes(data))

    loaded = ProducerStateManager(tmp_path, time_ms=lambda: NOW)
    loaded.truncate_and_reload(0, 21, NOW)
    assert loaded.map_end_offset == 10
    assert set(loaded.active_producers) == {1}
    assert loaded.last_entry(1).last_seq == 9
    assert not newer.exists()
    assert loaded.snapshot_files() == [older]


def test_all_snapshots_corrupt_starts_empty_at_log_start(tmp_path):
    (tmp_path / "00000000000000000010.snapshot").write_bytes(b"junk")
    psm = ProducerStateManager(tmp_path, time_ms=lambda: NOW)
    psm.truncate_and_reload(5, 20, NOW)
    assert psm.map_end_offset == 5
    assert psm.snapshot_files() == []


def test_truncate_and_reload_deletes_out_of_range_snapshots(tmp_path, psm):
    for offset in (0, 10, 20, 30):
        append(psm, 1, 0, offset, 10, offset)
        psm.take_snapshot()
    assert [p.name[:20] for p in psm.snapshot_files()] == [f"{o:020d}" for o in (10, 20, 30, 40)]
    psm.truncate_and_reload(10, 25, NOW)  # keeps (10, 25]
    assert psm.snapshot_files() == [tmp_path / "00000000000000000020.snapshot"]
    assert psm.map_end_offset == 20
    assert psm.last_entry(1).last_seq == 19
    assert sorted(p.name for p in tmp_path.glob("*.snapshot")) == ["00000000000000000020.snapshot"]


def test_pruning_and_full_truncation(tmp_path, psm):
    for offset in (0, 10, 20):
        append(psm, 1, 0, offset, 10, offset)
        psm.take_snapshot()
    assert (psm.oldest_snapshot_offset, psm.latest_snapshot_offset) == (10, 30)
    psm.delete_snapshots_before(20)
    assert (psm.oldest_snapshot_offset, psm.latest_snapshot_offset) == (20, 30)
    assert psm.fetch_snapshot(20) == tmp_path / "00000000000000000020.snapshot"
    psm.truncate_fully_and_start_at(50)
    assert psm.snapshot_files() == [] and list(tmp_path.glob("*.snapshot")) == []
    assert psm.map_end_offset == 50 and dict(psm.active_producers) == {}
    assert psm.latest_snapshot_offset is None
    append(psm, 1, 0, 0, 1, 50)  # a forgotten producer may start over
    assert psm.take_snapshot() == tmp_path / "00000000000000000051.snapshot"


def test_stray_snapshots_are_removed_except_a_clean_shutdown_one(tmp_path):
    for offset in (0, 5, 10, 15, 30):
        (tmp_path / f"{offset:020d}.snapshot").write_bytes(EMPTY_SNAPSHOT)
    (tmp_path / "notes.snapshot").write_bytes(b"")  # not an offset: ignored
    psm = ProducerStateManager(tmp_path, time_ms=lambda: NOW)
    psm.remove_stray_snapshots([0, 10, 20])
    assert [p.name[:20] for p in psm.snapshot_files()] == [f"{o:020d}" for o in (0, 10, 30)]
    psm.remove_stray_snapshots([0, 10, 40])  # 30 is below the last segment now
    assert [p.name[:20] for p in psm.snapshot_files()] == [f"{o:020d}" for o in (0, 10)]


def test_expired_producers(tmp_path):
    clock = [NOW]
    psm = ProducerStateManager(tmp_path, 1000, time_ms=lambda: clock[0])
    append(psm, 1, 0, 0, 1, 0, ts=NOW - 1000)
    append(psm, 2, 0, 0, 1, 1, ts=NOW - 999)
    append(psm, 3, 0, 0, 1, 2, ts=NOW - 5000, txn=True)  # open transactions never expire
    psm.take_snapshot()
    psm.remove_expired_producers()
    assert set(psm.active_producers) == {2, 3}
    # Expired producers are also skipped when loading a snapshot.
    loaded = ProducerStateManager(tmp_path, 1000, time_ms=lambda: clock[0])
    loaded.truncate_and_reload(0, 3, NOW + 1)
    assert set(loaded.active_producers) == {3}
    clock[0] += 10_000
    psm.remove_expired_producers()
    assert set(psm.active_producers) == {3}
