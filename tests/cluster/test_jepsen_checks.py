"""The harness's checkers (support.jepsen_checks): each passes a clean history (crafted, and
drawn by hypothesis) and names a crafted violation; replica_batches reads a log's batches back
byte for byte, read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.jepsen_checks import (
    Acked,
    Read,
    Txn,
    check_acknowledged_present,
    check_no_lost_reads,
    check_order,
    check_replicas_identical,
    check_transactions_atomic,
    latency_percentiles,
    replica_batches,
)

from tierlog import Log, Record
from tierlog.records.builder import build_batch

T0 = ("t", 0)
T1 = ("t", 1)


def read_of(*values: bytes, tp: tuple[str, int] = T0, start: int = 0) -> Read:
    return {tp: [(start + i, v) for i, v in enumerate(values)]}


# -- (1) acknowledged records present exactly once ---------------------------------------------

def test_present_passes_a_clean_history_with_unacknowledged_extras() -> None:
    acked = [("t", 0, b"a"), ("t", 0, b"c"), ("t", 1, b"x")]
    read = {**read_of(b"a", b"b", b"c"), **read_of(b"x", tp=T1)}
    assert check_acknowledged_present(acked, read) == []


def test_present_names_a_lost_acknowledged_record() -> None:
    violations = check_acknowledged_present([("t", 0, b"a"), ("t", 0, b"b")], read_of(b"a"))
    assert violations == ["t-0: acknowledged value b'b' is not in the log"]


def test_present_names_a_record_in_the_wrong_partition_as_lost() -> None:
    violations = check_acknowledged_present([("t", 1, b"a")], read_of(b"a"))
    assert violations == ["t-1: acknowledged value b'a' is not in the log"]


def test_present_names_duplicates_acknowledged_or_not() -> None:
    violations = check_acknowledged_present([("t", 0, b"a")], read_of(b"a", b"u", b"a", b"u"))
    assert violations == [
        "t-0: acknowledged value b'a' is in the log 2 times (offsets [0, 2])",
        "t-0: unacknowledged value b'u' is in the log 2 times (offsets [1, 3])",
    ]


def test_present_refuses_a_history_that_acknowledges_one_record_twice() -> None:
    with pytest.raises(ValueError, match="unique"):
        check_acknowledged_present([("t", 0, b"a"), ("t", 0, b"a")], read_of(b"a"))


# -- (2) per producer and partition, send order ------------------------------------------------

def test_order_passes_interleaved_producers() -> None:
    sent = {("p1", "t", 0): [b"a1", b"a2"], ("p2", "t", 0): [b"b1", b"b2"]}
    assert check_order(sent, read_of(b"b1", b"a1", b"b2", b"a2")) == []


def test_order_names_two_records_of_one_producer_swapped() -> None:
    sent = {("p1", "t", 0): [b"a1", b"a2", b"a3"]}
    violations = check_order(sent, read_of(b"a1", b"a3", b"a2"))
    assert violations == [("t-0: producer 'p1' sent b'a2' before b'a3', but the log has them at "
                          "offsets 2 and 1")]


def test_order_leaves_lost_records_to_the_presence_check() -> None:
    sent = {("p1", "t", 0): [b"a1", b"a2", b"a3"]}
    assert check_order(sent, read_of(b"a1", b"a3")) == []


# -- (3) no read vanished ----------------------------------------------------------------------

def test_no_lost_reads_passes_reads_that_stayed() -> None:
    observed = [("t", 0, 1, b"b"), ("t", 0, 1, b"b"), ("t", 0, 0, b"a")]
    assert check_no_lost_reads(observed, read_of(b"a", b"b", b"c")) == []


def test_no_lost_reads_names_a_read_that_was_truncated_away_or_replaced() -> None:
    observed = [("t", 0, 2, b"c"), ("t", 0, 1, b"b"), ("t", 1, 0, b"z")]
    violations = check_no_lost_reads(observed, read_of(b"a", b"B"))
    assert violations == [
        "t-0: a consumer read b'b' at offset 1, where the final log holds b'B'",
        "t-0: a consumer read b'c' at offset 2, where the final log holds nothing",
        "t-1: a consumer read b'z' at offset 0, where the final log holds nothing",
    ]


# -- (4) replicas byte-identical below the high watermark ---------------------------------------

def batch(base: int, *values: bytes, epoch: int = 0) -> tuple[int, bytes]:
    records = [Record(value=v) for v in values]
    return base, build_batch(records, base_offset=base, partition_leader_epoch=epoch, now_ms=1)


def test_replicas_pass_when_identical_below_the_high_watermark() -> None:
    shared = [batch(0, b"a", b"b"), batch(2, b"c")]
    replicas = {1: [*shared, batch(3, b"only the leader has it")], 2: shared,
                3: shared[1:]}  # node 3 deleted its first segment: compared from offset 2
    assert check_replicas_identical(replicas, high_watermark=3) == []


def test_replicas_name_a_batch_that_differs() -> None:
    replicas = {1: [batch(0, b"a"), batch(1, b"b", epoch=1)],
                2: [batch(0, b"a"), batch(1, b"b", epoch=2)]}
    violations = check_replicas_identical(replicas, high_watermark=2, partition="t-0")
    assert len(violations) == 1
    assert violations[0].startswith("t-0: the replicas differ in the batch at offset 1 "
                                    "(2 versions; node 1: ")


def test_replicas_name_one_that_ends_below_the_high_watermark() -> None:
    replicas = {1: [batch(0, b"a"), batch(1, b"b")], 2: [batch(0, b"a")]}
    assert check_replicas_identical(replicas, high_watermark=2) == [
        "node 2 ends at offset 1, below the high watermark 2",
        "the batch at offset 1 is missing on node(s) 2",
    ]


def test_replicas_name_batches_cut_differently() -> None:
    replicas = {1: [batch(0, b"a", b"b")], 2: [batch(0, b"a"), batch(1, b"b")]}
    violations = check_replicas_identical(replicas, high_watermark=2)
    assert "the batch at offset 1 is missing on node(s) 1" in violations
    assert any(v.startswith("the replicas differ in the batch at offset 0") for v in violations)


def test_replicas_name_bytes_that_are_not_a_batch() -> None:
    base, data = batch(0, b"a")
    replicas = {1: [(base, data)], 2: [(base, data[:30])], 3: [(5, data)]}
    violations = check_replicas_identical(replicas, high_watermark=1)
    assert any(v.startswith("node 2: the batch given at offset 0 is unreadable") for v in violations)
    assert any(v.startswith("node 3: the batch given at offset 5 is not one whole batch")
               for v in violations)


# -- (5) transactions atomic to read_committed readers -------------------------------------------

def txn(outcome: str, *values: bytes, name: str = "") -> Txn:
    return Txn(outcome, tuple(("t", 0, v) for v in values), name)  # type: ignore[arg-type]


def test_transactions_pass_whole_commits_and_invisible_aborts() -> None:
    txns = [txn("committed", b"c1", b"c2"), txn("aborted", b"a1"), txn("unknown", b"u1", b"u2"),
            txn("unknown", b"v1")]
    assert check_transactions_atomic(txns, read_of(b"c1", b"u1", b"c2", b"u2")) == []


def test_transactions_name_a_visible_abort_a_partial_commit_and_a_torn_unknown() -> None:
    txns = [txn("aborted", b"a1", b"a2", name="tx-1"), txn("committed", b"c1", b"c2"),
            txn("unknown", b"u1", b"u2")]
    violations = check_transactions_atomic(txns, read_of(b"a1", b"c1", b"u2"))
    assert violations == [
        "tx-1 was aborted, but a read_committed reader got 1 of its 2 records",
        "transaction #1 was committed, but a read_committed reader got only 1 of its 2 records",
        ("transaction #2 (outcome unknown) is partly visible to a read_committed reader: 1 of "
        "its 2 records"),
    ]


def test_transactions_name_a_record_read_twice() -> None:
    violations = check_transactions_atomic([txn("committed", b"c1")], read_of(b"c1", b"c1"))
    assert violations == ["transaction #0 (committed): records read twice: [('t', 0, b'c1')]"]


# -- latency percentiles ------------------------------------------------------------------------

def test_latency_percentiles_by_nearest_rank() -> None:
    assert latency_percentiles(range(1, 101)) == (50, 99)
    assert latency_percentiles([7.5]) == (7.5, 7.5)
    assert latency_percentiles([3, 1, 2]) == (2, 3)
    with pytest.raises(ValueError, match="at least one"):
        latency_percentiles([])


# -- hypothesis: drawn clean histories pass every check; one fault each is caught ----------------

@st.composite
def clean_histories(draw: st.DrawFn) -> tuple[list[Acked], dict[tuple[str, int, int],
                                                                list[bytes]], Read]:
    """Producers send numbered values to two partitions; the log interleaves them in send order
    per producer; some sends are unacknowledged (present once or absent)."""
    acked: list[Acked] = []
    sent: dict[tuple[str, int, int], list[bytes]] = {}
    queues: dict[tuple[str, int], list[list[bytes]]] = {T0: [], T1: []}
    for producer in range(draw(st.integers(1, 3))):
        for tp in (T0, T1):
            landed: list[bytes] = []
            for n in range(draw(st.integers(0, 8))):
                value = f"{producer}/{tp[1]}/{n}".encode()
                fate = draw(st.sampled_from(["acked", "unacked-in", "unacked-out"]))
                if fate == "acked":
                    acked.append((*tp, value))
                    sent.setdefault((str(producer), *tp), []).append(value)
                if fate != "unacked-out":
                    landed.append(value)
            queues[tp].append(landed)
    read: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
    for tp, per_producer in queues.items():
        log: list[bytes] = []
        while any(per_producer):
            producer_queue = draw(st.sampled_from([q for q in per_producer if q]))
            log.append(producer_queue.pop(0))
        read[tp] = list(enumerate(log))
    return acked, sent, read


@settings(max_examples=60, deadline=None)
@given(clean_histories())
def test_drawn_clean_histories_pass_every_check(history: tuple[
        list[Acked], dict[tuple[str, int, int], list[bytes]], Read]) -> None:
    acked, sent, read = history
    assert check_acknowledged_present(acked, read) == []
    assert check_order(sent, read) == []
    observed = [(*tp, offset, value) for tp, records in read.items() for offset, value in records]
    assert check_no_lost_reads(observed, read) == []
    committed = [Txn("committed", tuple(a for a in acked if a[1] == p)) for p in (0, 1)]
    assert check_transactions_atomic(committed, read) == []


@settings(max_examples=60, deadline=None)
@given(clean_histories(), st.data())
def test_drawn_histories_with_one_fault_are_caught(history: tuple[
        list[Acked], dict[tuple[str, int, int], list[bytes]], Read], data: st.DataObject) -> None:
    acked, sent, read = history
    tp = data.draw(st.sampled_from(sorted(t for t, r in read.items() if r)) if any(read.values())
                   else st.nothing())
    records: Sequence[tuple[int, bytes]] = read[tp]
    offset, value = data.draw(st.sampled_from(records))
    lost = {**read, tp: [r for r in records if r[0] != offset]}
    doubled = {**read, tp: [*records, (len(records), value)]}
    assert check_acknowledged_present(acked, doubled) != []
    assert check_no_lost_reads([(*tp, offset, value)], lost) != []
    if (*tp, value) in acked:
        assert check_acknowledged_present(acked, lost) != []
        assert check_transactions_atomic([Txn("committed", tuple(acked))], lost) != []
    same_producer = [vs for (_, *key), vs in sent.items() if tuple(key) == tp and len(vs) > 1]
    if same_producer:
        first, second = same_producer[0][:2]
        swapped = [(o, second if v == first else first if v == second else v)
                   for o, v in records]
        assert check_order(sent, {**read, tp: swapped}) != []


# -- replica_batches -----------------------------------------------------------------------------

def test_replica_batches_reads_a_log_back_byte_for_byte_without_writing(tmp_path: Path) -> None:
    written = [batch(0, b"a", b"b", epoch=3), batch(2, b"c", epoch=3), batch(3, b"d", epoch=4)]
    with Log.for_partition(tmp_path, "t", 0, {"segment.bytes": 200}) as log:
        for _, data in written:
            log.append(data, assign_offsets=False)
        assert len(log.segments) > 1  # the read crosses segments
        files = {p: p.stat().st_mtime_ns for p in (tmp_path / "t-0").iterdir()}
        assert replica_batches(tmp_path, "t", 0) == written  # beside the live owner
        assert replica_batches(tmp_path, "t", 0, upto=3) == written[:2]
        assert {p: p.stat().st_mtime_ns for p in (tmp_path / "t-0").iterdir()} == files
    replicas = {1: replica_batches(tmp_path, "t", 0), 2: written}
    assert check_replicas_identical(replicas, high_watermark=4) == []
