"""ProducerBatchRun (tierlog.producer.state): the one rule that feeds batches to producer state,
used by the append, by a segment's recovery and by the rebuild from segments. Checked on its
own (validation changes nothing until apply; aborted transactions reach the callback with
their last stable offset) and across the three paths, which must agree on random workloads."""

from __future__ import annotations

import random

import pytest
from support.log_invariants import aborted_txns

from tierlog import Log, Record
from tierlog.errors import OutOfOrderSequenceError
from tierlog.index import AbortedTxn
from tierlog.producer.append import ProducerBatchRun
from tierlog.producer.state import ProducerStateManager
from tierlog.records import build_batch, build_control_batch
from tierlog.records.batch import RecordBatch

_TS = 1_700_000_000_000


def _data(pid, seq, offset, n=1, txn=False):
    records = [Record(key=b"k", value=b"v%d" % i) for i in range(n)]
    return RecordBatch(build_batch(records, base_offset=offset, producer_id=pid,
                                   producer_epoch=0, base_sequence=seq, is_transactional=txn,
                                   now_ms=_TS))


def _marker(pid, offset, commit):
    return RecordBatch(build_control_batch(1 if commit else 0, producer_id=pid,
                                           producer_epoch=0, base_offset=offset, timestamp=_TS))


def _state(psm):
    return ({pid: e.to_snapshot_entry() for pid, e in psm.active_producers.items()},
            psm.first_undecided_offset())


def test_add_validates_without_changing_the_manager(tmp_path):
    psm = ProducerStateManager(tmp_path)
    first = ProducerBatchRun(psm, "client")
    first.add(_data(1, 0, 0, n=2))
    first.add(_data(-1, -1, 2))  # no producer id: ignored
    assert _state(psm) == ({}, None)
    first.apply()
    before = _state(psm)
    run = ProducerBatchRun(psm, "client")
    run.add(_data(1, 2, 3, txn=True))
    with pytest.raises(OutOfOrderSequenceError):
        run.add(_data(1, 9, 4, txn=True))  # checked against the run's earlier batch
    with pytest.raises(OutOfOrderSequenceError):
        ProducerBatchRun(psm, "client").add(_data(1, 3, 3))  # and against the manager
    assert _state(psm) == before
    run.apply()
    entry = psm.last_entry(1)
    assert (entry.last_seq, entry.last_data_offset, entry.current_txn_first_offset) == (2, 3, 3)
    assert psm.first_undecided_offset() == 3


def test_apply_reports_aborted_transactions_with_their_last_stable_offset(tmp_path):
    psm = ProducerStateManager(tmp_path)
    seen: list[AbortedTxn] = []
    run = ProducerBatchRun(psm, "replication")
    for batch in (_data(1, 0, 0, txn=True), _data(2, 0, 1, txn=True), _marker(1, 2, False),
                  _data(3, 0, 3, txn=True), _marker(3, 4, True)):
        run.add(batch)
    run.apply(seen.append)
    # Producer 2's transaction is still open from offset 1: the LSO of 1's abort stops there.
    assert seen == [AbortedTxn(1, 0, 2, 1)]
    assert psm.first_undecided_offset() == 1
    assert psm.first_unstable_offset() == 0  # completed, but not yet below the high watermark


@pytest.mark.parametrize("seed", range(6))
def test_append_recovery_and_rebuild_agree(tmp_path, clock, seed):
    """The producer state and transaction index the append path builds are rebuilt exactly by
    an unclean open that recovers every segment (runs of one batch) and by one that recovers
    only the last segment, replaying the earlier ones from no snapshot (segment runs). (The
    completed transactions a reopen assumes below the high watermark are not compared.)"""
    rng = random.Random(seed)
    directory = tmp_path / "t-0"
    seq = dict.fromkeys((1, 2, 3, 7), 0)
    open_txns: set[int] = set()
    with Log.open(directory, {"segment.bytes": 1024}, time_ms=clock) as log:
        for _ in range(120):
            pid = rng.choice((1, 2, 3, 7))
            if pid in open_txns and rng.random() < 0.35:
                log.append_marker(pid, 0, commit=rng.random() < 0.5)
                open_txns.discard(pid)
                continue
            n = rng.randint(1, 3)
            log.append(build_batch([Record(value=b"x")] * n, producer_id=pid, producer_epoch=0,
                                   base_sequence=seq[pid], is_transactional=pid != 7,
                                   now_ms=_TS))
            seq[pid] += n
            if pid != 7:
                open_txns.add(pid)
        expected = (_state(log.producer_state), aborted_txns(log))
        end = log.log_end_offset
        assert len(log.segments) > 3
    for recovery_point in (0, end):
        for snapshot in directory.glob("*.snapshot"):
            snapshot.unlink()
        with Log.open(directory, {"segment.bytes": 1024}, time_ms=clock,
                      had_clean_shutdown=False, recovery_point=recovery_point) as log:
            assert log.log_end_offset == end
            assert (_state(log.producer_state), aborted_txns(log)) == expected
