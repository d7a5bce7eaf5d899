"""TransactionIndex and AbortedTxn: byte layout, append order, Kafka's aborted-transaction
search for READ_COMMITTED fetches, truncation, file management and sanity checks."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest

from tierlog.errors import CorruptIndexError, InvalidIndexOffsetError
from tierlog.index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

NAME = "00000000000000000000.txnindex"
TXNS = [
    AbortedTxn(producer_id=0, first_offset=0, last_offset=10, last_stable_offset=11),
    AbortedTxn(producer_id=1, first_offset=5, last_offset=15, last_stable_offset=13),
    AbortedTxn(producer_id=2, first_offset=18, last_offset=35, last_stable_offset=25),
    AbortedTxn(producer_id=3, first_offset=32, last_offset=50, last_stable_offset=40),
]


def packed(txn: AbortedTxn, version: int = 0) -> bytes:
    return struct.pack(">hqqqq", version, txn.producer_id, txn.first_offset, txn.last_offset,
                       txn.last_stable_offset)


@pytest.fixture
def index(tmp_path: Path) -> TransactionIndex:
    idx = TransactionIndex(tmp_path / NAME, 0)
    for txn in TXNS:
        idx.append(txn)
    return idx


# -- AbortedTxn ----------------------------------------------------------------------------


def test_aborted_txn_byte_layout_and_round_trip() -> None:
    txn = AbortedTxn(-7, 2**40, 2**40 + 9, 2**62)
    data = txn.to_bytes()
    assert len(data) == 34
    assert data == struct.pack(">hqqqq", 0, -7, 2**40, 2**40 + 9, 2**62)
    assert AbortedTxn.from_bytes(b"xx" + data, 2) == txn


def test_aborted_txn_unknown_version() -> None:
    with pytest.raises(CorruptIndexError, match="version 1"):
        AbortedTxn.from_bytes(packed(TXNS[0], version=1))


def test_aborted_txn_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TXNS[0].last_offset = 3  # type: ignore[misc]


# -- file and appends ----------------------------------------------------------------------


def test_file_is_created_empty(tmp_path: Path) -> None:
    idx = TransactionIndex(tmp_path / NAME, 100)
    assert (tmp_path / NAME).exists() and (tmp_path / NAME).stat().st_size == 0
    assert idx.is_empty() and idx.all_aborted_txns() == []
    assert idx.collect_aborted_txns(0, 1000) == TxnIndexSearchResult([], False)
    idx.sanity_check()


def test_appends_write_kafka_bytes(index: TransactionIndex) -> None:
    assert index.path.read_bytes() == b"".join(packed(t) for t in TXNS)
    assert index.all_aborted_txns() == TXNS
    assert not index.is_empty()


def test_append_requires_increasing_last_offsets(index: TransactionIndex) -> None:
    with pytest.raises(InvalidIndexOffsetError, match=r"50.*\.txnindex"):
        index.append(AbortedTxn(9, 45, 50, 50))
    with pytest.raises(InvalidIndexOffsetError):
        index.append(AbortedTxn(9, 45, 49, 50))
    assert index.all_aborted_txns() == TXNS


def test_reopen_reads_entries_and_keeps_the_append_order(index: TransactionIndex,
                                                         tmp_path: Path) -> None:
    index.flush()
    index.close()
    reopened = TransactionIndex(tmp_path / NAME, 0)
    assert reopened.all_aborted_txns() == TXNS
    with pytest.raises(InvalidIndexOffsetError):
        reopened.append(AbortedTxn(9, 40, 50, 50))
    reopened.append(AbortedTxn(9, 40, 51, 51))
    assert len(reopened.all_aborted_txns()) == 5


# -- Kafka's search for a fetch ------------------------------------------------------------


@pytest.mark.parametrize(("fetch", "upper", "expected", "complete"), [
    # every transaction overlaps [0, 100) and no LSO reaches 100: look in later segments
    (0, 100, TXNS, False),
    # txn 3 starts at the upper bound (excluded); its LSO 40 >= 32 ends the search
    (0, 32, TXNS[:3], True),
    (0, 35, TXNS, True),
    # txn 0's last offset 10 is inside [10, 35)
    (10, 35, TXNS, True),
    (11, 35, TXNS[1:], True),
    (20, 41, TXNS[2:], False),
    # txn 0's LSO 11 >= 11 stops the scan right after it
    (0, 11, TXNS[:1], True),
    (51, 60, [], False),
])
def test_collect_aborted_txns(index: TransactionIndex, fetch: int, upper: int,
                              expected: list[AbortedTxn], complete: bool) -> None:
    assert index.collect_aborted_txns(fetch, upper) == TxnIndexSearchResult(expected, complete)


# -- truncate, reset, rename, delete -------------------------------------------------------


def test_truncate_to_drops_entries_at_or_above(index: TransactionIndex) -> None:
    index.truncate_to(51)
    assert index.all_aborted_txns() == TXNS
    index.truncate_to(35)
    assert index.all_aborted_txns() == TXNS[:2]
    assert index.path.stat().st_size == 2 * 34
    index.append(AbortedTxn(7, 16, 20, 20))  # above the new last offset 15
    index.truncate_to(0)
    assert index.is_empty() and index.path.stat().st_size == 0
    index.append(AbortedTxn(7, 1, 2, 2))


def test_reset(index: TransactionIndex) -> None:
    index.reset()
    assert index.is_empty() and index.path.exists() and index.path.stat().st_size == 0
    index.append(AbortedTxn(1, 0, 1, 1))
    assert index.all_aborted_txns() == [AbortedTxn(1, 0, 1, 1)]


def test_rename_and_delete(index: TransactionIndex, tmp_path: Path) -> None:
    target = tmp_path / (NAME + ".deleted")
    index.rename_to(target)
    assert index.path == target and target.exists() and not (tmp_path / NAME).exists()
    assert index.all_aborted_txns() == TXNS
    assert index.delete_if_exists() and not target.exists()
    assert not index.delete_if_exists()
    assert index.is_empty() and index.all_aborted_txns() == []


# -- sanity checks -------------------------------------------------------------------------


def test_sanity_check_passes_a_good_index_and_leaves_it_as_it_was(
        index: TransactionIndex) -> None:
    before = index.path.read_bytes()
    index.sanity_check()
    assert index.all_aborted_txns() == TXNS
    assert index.path.read_bytes() == before


def test_torn_tail_is_ignored_by_reads_and_fails_the_check(index: TransactionIndex,
                                                           tmp_path: Path) -> None:
    with open(index.path, "ab") as f:
        f.write(packed(AbortedTxn(8, 60, 70, 70))[:20])
    reopened = TransactionIndex(tmp_path / NAME, 0)
    assert reopened.all_aborted_txns() == TXNS
    with pytest.raises(CorruptIndexError, match=r"\.txnindex.*156 bytes"):
        reopened.sanity_check()


@pytest.mark.parametrize(("entries", "message"), [
    ([packed(TXNS[0], version=1)], "version 1"),
    ([packed(TXNS[1]), packed(TXNS[0])], "not above the previous"),
    ([packed(TXNS[0]), packed(TXNS[0])], "not above the previous"),
    ([packed(AbortedTxn(1, 30, 20, 30))], "first offset is above"),
    ([packed(AbortedTxn(1, 0, 4, 4))], "below the segment's start offset 5"),
])
def test_sanity_check_failures(tmp_path: Path, entries: list[bytes], message: str) -> None:
    (tmp_path / NAME).write_bytes(b"".join(entries))
    with pytest.raises(CorruptIndexError, match=message):
        TransactionIndex(tmp_path / NAME, 5).sanity_check()


def test_reading_an_unknown_version_raises(tmp_path: Path) -> None:
    (tmp_path / NAME).write_bytes(packed(TXNS[0]) + packed(TXNS[1], version=3))
    idx = TransactionIndex(tmp_path / NAME, 0)
    with pytest.raises(CorruptIndexError, match="byte 34 has version 3"):
        idx.collect_aborted_txns(0, 100)
