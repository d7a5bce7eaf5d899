"""Idempotent and transactional producers through Log.append: duplicates, sequence and epoch
errors, transactions checked against a model, the last stable offset, the transaction index,
and producer state across crashes and damaged snapshots."""

from __future__ import annotations

import hashlib
import random
import shutil
import struct

import pytest
from support.log_invariants import TxnModel, aborted_txns, log_batches

from tierlog import Log, Record
from tierlog.errors import (
    OutOfOrderSequenceError,
    ProducerFencedError,
    TransactionCoordinatorFencedError,
)
from tierlog.records import build_batch


def _files(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def _batch(pid, seq, n=2, epoch=0, txn=False, tag=b""):
    records = [Record(key=b"%d-%d" % (pid, seq + i), value=tag + b"v%d" % i) for i in range(n)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=txn, now_ms=1_700_000_000_000)


@pytest.fixture
def log(tmp_path, clock):
    with Log.open(tmp_path / "t-0", {"segment.bytes": 2048}, time_ms=clock,
                  auto_high_watermark=True) as log:
        yield log


def test_duplicates_of_the_last_five_batches_return_their_offsets_and_write_nothing(log):
    sent = [_batch(7, i * 3, n=3) for i in range(7)]
    infos = [log.append(b) for b in sent]
    leo, files = log.log_end_offset, _files(log.directory)
    for original, batch in list(zip(infos, sent, strict=True))[-5:]:
        dup = log.append(batch)
        assert dup.duplicate
        assert (dup.first_offset, dup.last_offset) == (original.first_offset, original.last_offset)
        assert log.log_end_offset == leo and _files(log.directory) == files
    # The sixth newest is forgotten: re-sending it is out of sequence, and changes nothing.
    with pytest.raises(OutOfOrderSequenceError, match="producer 7"):
        log.append(sent[1])
    assert _files(log.directory) == files


def test_duplicate_detection_survives_rolls_and_reopening(tmp_path, clock):
    directory = tmp_path / "t-0"
    sent = [_batch(7, i * 4, n=4, tag=b"x" * 300) for i in range(10)]
    with Log.open(directory, {"segment.bytes": 2048}, time_ms=clock) as log:
        infos = [log.append(b) for b in sent]
        assert len(log.segments) > 2
    last, info = sent[-1], infos[-1]
    for clean, seq in ((True, 40), (False, 42)):
        with Log.open(directory, {"segment.bytes": 2048}, time_ms=clock,
                      had_clean_shutdown=clean) as log:
            # A reloaded producer remembers its last batch (a snapshot keeps one, as Kafka's).
            dup = log.append(last)
            assert dup.duplicate and dup.first_offset == info.first_offset
            last = _batch(7, seq)
            info = log.append(last)
            assert not info.duplicate


@pytest.mark.parametrize("seq", [1, 3, 100, -5])
def test_out_of_order_sequence_leaves_the_log_unchanged(log, seq):
    log.append(_batch(7, 0, n=2))
    files, leo = _files(log.directory), log.log_end_offset
    with pytest.raises(OutOfOrderSequenceError):
        log.append(_batch(7, 2 + seq, n=2))
    assert _files(log.directory) == files and log.log_end_offset == leo
    assert log.append(_batch(7, 2)).first_offset == leo


def test_stale_epochs_are_fenced_and_change_nothing(log):
    log.append(_batch(7, 0, epoch=0))
    log.append(_batch(7, 0, epoch=1))
    files = _files(log.directory)
    with pytest.raises(ProducerFencedError, match="older than the last seen epoch 1"):
        log.append(_batch(7, 2, epoch=0))
    with pytest.raises(OutOfOrderSequenceError, match="must be 0"):
        log.append(_batch(7, 5, epoch=2))
    # Transaction markers are fenced by the producer epoch and the coordinator epoch.
    log.append(_batch(9, 0, epoch=3, txn=True))
    log.append_marker(9, 3, commit=True, coordinator_epoch=4)
    log.append(_batch(9, 2, epoch=3, txn=True))
    files = _files(log.directory)
    with pytest.raises(ProducerFencedError):
        log.append_marker(9, 2, commit=False, coordinator_epoch=4)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_marker(9, 3, commit=False, coordinator_epoch=3)
    assert _files(log.directory) == files
    assert log.last_stable_offset < log.log_end_offset


def test_last_stable_offset_follows_open_transactions_and_the_high_watermark(tmp_path, clock):
    with Log.open(tmp_path / "t-0", time_ms=clock) as log:
        log.append_records([Record(value=b"plain")] * 5)
        a = log.append(_batch(1, 0, txn=True)).first_offset  # 5
        log.append_records([Record(value=b"plain")] * 2)
        b = log.append(_batch(2, 0, txn=True)).first_offset  # 9
        assert log.last_stable_offset == 0  # the high watermark has not moved
        log.update_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == a
        commit = log.append_marker(1, 0, commit=True).first_offset
        # Decided, but the marker is not below the high watermark yet.
        log.update_high_watermark(commit)
        assert log.last_stable_offset == a
        log.update_high_watermark(commit + 1)
        assert log.last_stable_offset == b
        abort = log.append_marker(2, 0, commit=False).first_offset
        log.update_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == log.high_watermark == abort + 1
        assert aborted_txns(log) == [(2, b, abort, abort + 1)]


def test_txnindex_holds_kafka_entries(tmp_path, clock):
    with Log.open(tmp_path / "t-0", time_ms=clock, auto_high_watermark=True) as log:
        first_a = log.append(_batch(1, 0, txn=True)).first_offset
        first_b = log.append(_batch(2, 0, txn=True)).first_offset
        abort_a = log.append_marker(1, 0, commit=False).first_offset
        commit_b = log.append_marker(2, 0, commit=True).first_offset
        first_a2 = log.append(_batch(1, 2, txn=True)).first_offset
        abort_a2 = log.append_marker(1, 0, commit=False).first_offset
        path = log.segments.active.txn_index.path
    raw = path.read_bytes()
    # version | producer id | first offset | last offset (the marker) | last stable offset
    assert raw == (struct.pack(">hqqqq", 0, 1, first_a, abort_a, first_b)
                   + struct.pack(">hqqqq", 0, 1, first_a2, abort_a2, abort_a2 + 1))
    assert commit_b < first_a2


def test_records_skip_aborted_and_control_by_default(log):
    log.append(_batch(1, 0, txn=True, tag=b"aborted"))
    log.append_records([Record(value=b"plain")])
    log.append_marker(1, 0, commit=False)
    log.append(_batch(1, 2, txn=True, tag=b"kept"))
    log.append_marker(1, 0, commit=True)
    res = log.read(0, isolation="read_committed")
    assert [r.value for r in res.records()] == [b"plain", b"keptv0", b"keptv1"]
    everything = [r.offset for r in res.records(include_aborted=True, include_control=True)]
    assert everything == list(range(log.log_end_offset))
    uncommitted = log.read(0, isolation="read_uncommitted")
    assert uncommitted.aborted_transactions is None
    assert len(list(uncommitted.records())) == 5


class _Workload:
    """A random mix of plain, idempotent and transactional appends (three transactional
    producers interleaved), markers, and high watermark moves, applied to a log."""

    def __init__(self, log: Log, seed: int) -> None:
        self.log = log
        self.rng = random.Random(seed)
        self.seq = dict.fromkeys((1, 2, 3, 7), 0)
        self.open: set[int] = set()

    def step(self) -> None:
        rng, log = self.rng, self.log
        r = rng.random()
        if r < 0.45:
            pid = rng.choice((1, 2, 3))
            if pid in self.open and rng.random() < 0.4:
                log.append_marker(pid, 0, commit=rng.random() < 0.5)
                self.open.discard(pid)
                return
            self._send(pid, txn=True)
            self.open.add(pid)
        elif r < 0.65:
            self._send(7, txn=False)
        elif r < 0.9:
            log.append_records([Record(value=b"p%d" % rng.randrange(100))] * rng.randint(1, 3),
                               rng.choice(("none", "zstd")))
        else:
            ends = [b.next_offset for b in log_batches(log)]
            log.update_high_watermark(rng.choice([log.high_watermark, *ends[-3:]]))

    def _send(self, pid: int, txn: bool) -> None:
        n = self.rng.randint(1, 4)
        self.log.append(_batch(pid, self.seq[pid], n=n, txn=txn))
        self.seq[pid] += n


def _check_against_model(log: Log, rng: random.Random) -> None:
    batches = log_batches(log)
    model = TxnModel()
    for batch in batches:
        model.apply(batch)
    assert aborted_txns(log) == model.aborted
    hw = log.high_watermark
    # Kafka: a completed transaction stays unstable until the high watermark passes its marker.
    unstable = list(model.open.values())
    for _pid, first, marker, _ in model.aborted:
        if marker >= hw:
            unstable.append(first)
    for batch in batches:
        if batch.is_control and batch.is_transactional and batch.base_offset >= hw:
            unstable += [f for f in _txn_first_offsets(batches, batch)]
    lso = min([*unstable, hw])
    assert log.last_stable_offset == lso
    for start in sorted({0, lso, *rng.sample(range(max(lso, 1)), min(lso, 5))}):
        expected = [o for b in batches if not b.is_control
                    for o in range(b.base_offset, b.next_offset)
                    if start <= o < lso and o not in model.aborted_offsets]
        got, offset = [], start
        while offset < lso:
            res = log.read(offset, max_bytes=600, isolation="read_committed")
            got += [r.offset for r in res.records()]
            offset = max(b.next_offset for b in res.batches())
        assert got == expected, start


def _txn_first_offsets(batches, marker):
    """First offset of the transaction a marker ends."""
    first = None
    for batch in batches:
        if batch.base_offset >= marker.base_offset:
            break
        if batch.producer_id == marker.producer_id and batch.is_transactional:
            if batch.is_control:
                first = None
            elif first is None:
                first = batch.base_offset
    return [first] if first is not None else []


@pytest.mark.parametrize("seed", range(12))
def test_random_transactional_workloads_match_the_model(tmp_path, clock, seed):
    directory = tmp_path / "t-0"
    rng = random.Random(seed)
    config = {"segment.bytes": rng.choice((1024, 4096, 1 << 20))}
    with Log.open(directory, config, time_ms=clock) as log:
        work = _Workload(log, seed)
        for i in range(120):
            work.step()
            if i % 10 == 0:
                _check_against_model(log, rng)
        _check_against_model(log, rng)
        log.update_high_watermark(log.log_end_offset)
        hw = log.high_watermark
        crashed = tmp_path / "crashed" / "t-0"
        shutil.copytree(directory, crashed)
    for path, clean in ((directory, True), (crashed, False)):
        with Log.open(path, config, time_ms=clock, had_clean_shutdown=clean) as reopened:
            reopened.update_high_watermark(hw)
            _check_against_model(reopened, rng)


def test_open_transaction_survives_a_crash_and_commits_afterwards(tmp_path, clock):
    directory = tmp_path / "t-0"
    log = Log.open(directory, {"segment.bytes": 1024}, time_ms=clock, auto_high_watermark=True)
    log.append_records([Record(value=b"before")] * 3)
    first = log.append(_batch(4, 0, n=3, txn=True, tag=b"t" * 200)).first_offset
    for i in range(1, 6):
        log.append(_batch(4, i * 3, n=3, txn=True, tag=b"t" * 200))
    log.append_records([Record(value=b"plain after")])
    assert len(log.segments) > 2 and log.last_stable_offset == first
    crashed = tmp_path / "crashed" / "t-0"
    shutil.copytree(directory, crashed)  # as a SIGKILL leaves it: no snapshot at the end
    log.close()
    with Log.open(crashed, {"segment.bytes": 1024}, time_ms=clock,
                  auto_high_watermark=True) as recovered:
        assert not recovered.recovery.clean_shutdown
        assert recovered.last_stable_offset == first
        assert [r.value for r in recovered.read(0, isolation="read_committed").records()] == \
            [b"before"] * 3
        recovered.append_marker(4, 0, commit=True)
        assert recovered.last_stable_offset == recovered.log_end_offset
        values = []
        offset = 0
        while offset < recovered.last_stable_offset:
            res = recovered.read(offset, isolation="read_committed")
            values += [r.value for r in res.records()]
            offset = max(b.next_offset for b in res.batches())
        assert len(values) == 3 + 18 + 1


def _producer_log(directory, clock):
    with Log.open(directory, {"segment.bytes": 1024}, time_ms=clock) as log:
        for i in range(12):
            log.append(_batch(7, i * 2, tag=b"s" * 150))
            log.append(_batch(8, i, n=1, tag=b"s" * 150))
        assert len(log.producer_state.snapshot_files()) >= 3
        return log.log_end_offset


@pytest.mark.parametrize("damage", ["corrupt-newest", "truncate-newest", "corrupt-all"])
def test_corrupt_snapshot_falls_back_to_an_older_one(tmp_path, clock, caplog, damage):
    directory = tmp_path / "t-0"
    leo = _producer_log(directory, clock)
    snapshots = sorted(directory.glob("*.snapshot"))
    doomed = snapshots if damage == "corrupt-all" else snapshots[-1:]
    for path in doomed:
        data = bytearray(path.read_bytes())
        if damage == "truncate-newest":
            del data[-5:]
        else:
            data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    with Log.open(directory, {"segment.bytes": 1024}, time_ms=clock,
                  had_clean_shutdown=True) as log:
        assert "failed to load producer snapshot" in caplog.text
        assert log.producer_state.last_entry(7).last_seq == 23
        assert log.producer_state.last_entry(8).last_seq == 11
        assert log.append(_batch(7, 22)).duplicate
        assert log.append(_batch(8, 12, n=1)).first_offset == leo
    # The newest snapshot is valid again (rewritten at the log end by the reload).
    from tierlog.producer.snapshot import read_snapshot
    for path in directory.glob("*.snapshot"):
        read_snapshot(path)
