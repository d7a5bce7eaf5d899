"""tierlog.index.entries, the one home of the index entry layouts, the lookup rule and the
sanity rules: checked against bisect over many random entry arrays, and the live
(memory-mapped) indexes and the tier reader's views of the same bytes answer alike."""

from __future__ import annotations

import bisect
import random
from pathlib import Path

import pytest

from tierlog.errors import CorruptIndexError
from tierlog.index import AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex
from tierlog.index.entries import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    TXN_ENTRY_SIZE,
    check_offset_entries,
    check_time_entries,
    largest_lower_bound,
    smallest_upper_bound,
)
from tierlog.index.transaction_index import decode_aborted_txns
from tierlog.reader._indexes import OffsetIndexView, TimeIndexView

SEEDS = range(40)
BASE = 1_000


def _keys(rng: random.Random, strict: bool) -> list[int]:
    count = rng.choice([0, 1, 2, 3, 7, 64, 300, 2_000])
    keys, key = [], rng.randrange(-5, 5)
    for _ in range(count):
        key += rng.randrange(1 if strict else 0, 4)
        keys.append(key)
    return keys


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("strict", [True, False])
def test_the_searches_agree_with_bisect(seed: int, strict: bool) -> None:
    rng = random.Random(seed)
    keys = _keys(rng, strict)
    values = [rng.randrange(1 << 20) for _ in keys]
    data = OFFSET_ENTRY.pack([f for pair in zip(keys, values, strict=True) for f in pair])
    n = len(keys)
    for target in range((keys[0] - 2) if keys else -3, (keys[-1] + 3) if keys else 3):
        lower = largest_lower_bound(data, OFFSET_ENTRY.key, OFFSET_ENTRY.size, 0, target, 0, n)
        assert lower == bisect.bisect_right(keys, target) - 1
        upper = smallest_upper_bound(data, OFFSET_ENTRY.key, OFFSET_ENTRY.size, 0, target, n)
        if lower >= 0 and keys[lower] == target:
            assert upper == lower  # Kafka: the last of a run equal to the target
        else:
            first = bisect.bisect_left(keys, target)
            assert upper == (first if first < n else -1)
        if n > 2:  # a narrowed range answers for that range only
            lo, hi = sorted(rng.sample(range(n + 1), 2))
            sub = largest_lower_bound(data, OFFSET_ENTRY.key, OFFSET_ENTRY.size, 0, target,
                                      lo, hi)
            assert sub == bisect.bisect_right(keys, target, lo, hi) - 1


@pytest.mark.parametrize("seed", SEEDS)
def test_the_live_index_and_the_readers_view_answer_alike(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    count = rng.choice([0, 1, 5, 100, 1_500, 3_000])  # past the 8 KiB warm section and fences
    index = OffsetIndex(tmp_path / "x.index", BASE, max_index_size=(count + 1) * 8)
    time_index = TimeIndex(tmp_path / "x.timeindex", BASE, max_index_size=(count + 2) * 12)
    offset, position, timestamp = BASE, 0, 10_000
    for _ in range(count):
        offset += rng.randrange(1, 5)
        position += rng.randrange(1, 300)
        timestamp += rng.randrange(1, 50)
        index.append(offset, position)
        time_index.maybe_append(timestamp, offset)
    index.flush()
    time_index.flush()
    view = OffsetIndexView(index.path.read_bytes()[:index.size_in_bytes], BASE, "x.index")
    time_view = TimeIndexView(time_index.path.read_bytes()[:time_index.size_in_bytes], BASE,
                              "x.timeindex")
    for target in [BASE - 1, *(rng.randrange(BASE, offset + 5) for _ in range(300))]:
        assert view.start_position(target) == index.lookup(target).position
    entries = [time_index.entry(i) for i in range(time_index.entries)]
    stamps = [e.timestamp for e in entries]
    for target in (rng.randrange(9_990, timestamp + 10) for _ in range(300)):
        below, reaching = time_view.bracket(target)
        found = time_index.lookup(target - 1)  # the last entry stamped before the target
        assert below == (None if found.timestamp < 0 else found.offset)
        first = bisect.bisect_left(stamps, target)  # the first entry stamped at or after it
        assert reaching == (entries[first].offset if first < len(entries) else None)
    index.close()
    time_index.close()


def test_a_view_refuses_what_the_live_sanity_check_refuses(tmp_path: Path) -> None:
    data = OFFSET_ENTRY.pack([0, 0, 5, 10, 5, 20])  # offset 5 twice
    path = tmp_path / "bad.index"
    path.write_bytes(data)
    live = OffsetIndex(path, BASE, writable=False)
    with pytest.raises(CorruptIndexError) as from_file:
        live.sanity_check()
    live.close()
    with pytest.raises(CorruptIndexError) as from_view:
        OffsetIndexView(data, BASE, str(path))
    assert str(from_view.value) == str(from_file.value)
    assert "entry 2 of 3" in str(from_view.value)


@pytest.mark.parametrize(("fields", "problem"), [
    ([5, 0, 3, 1], "timestamp 3 is not above the previous entry's 5"),
    ([5, 4, 6, 3], "below the previous entry's offset"),
    ([5, -1], "below the base offset"),
    ([-1, 0], "timestamp -1 is not above"),
])
def test_time_entries_are_checked_as_a_file_is(fields: list[int], problem: str) -> None:
    data = TIME_ENTRY.pack(fields)
    with pytest.raises(CorruptIndexError, match=problem):
        check_time_entries(data, len(fields) // 2, BASE, "obj.timeindex")
    with pytest.raises(CorruptIndexError, match=r"time index obj\.timeindex is corrupt"):
        TimeIndexView(data, BASE, "obj.timeindex")


@pytest.mark.parametrize("length", [1, 7, 9, 13])
def test_a_torn_entry_names_the_object(length: int) -> None:
    with pytest.raises(CorruptIndexError, match=rf"obj\.index is corrupt: {length} bytes"):
        OffsetIndexView(bytes(length), BASE, "obj.index")
    with pytest.raises(CorruptIndexError, match=r"obj\.txnindex is corrupt: 35 bytes"):
        decode_aborted_txns(bytes(TXN_ENTRY_SIZE + 1), "obj.txnindex")


def test_check_offset_entries_accepts_a_valid_index_in_many_chunks() -> None:
    fields = [f for i in range(10_000) for f in (i * 2, i * 3)]
    check_offset_entries(OFFSET_ENTRY.pack(fields), 10_000, BASE, "big.index")


def test_fetched_and_stored_transaction_indexes_decode_alike(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "t.txnindex", 0)
    txns = [AbortedTxn(7, i * 10, i * 10 + 5, i * 10 + 3) for i in range(20)]
    for txn in txns:
        index.append(txn)
    data = index.path.read_bytes()
    assert decode_aborted_txns(data, "t") == index.all_aborted_txns() == txns
    bad = bytearray(data)
    bad[TXN_ENTRY_SIZE + 1] = 3  # entry 1: version 3
    with pytest.raises(CorruptIndexError, match=r"t\.txnindex is corrupt: entry at byte 34 has "
                                                "version 3"):
        decode_aborted_txns(bytes(bad), "t.txnindex")
