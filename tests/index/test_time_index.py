"""TimeIndex: preallocation, maybe_append rules, the reserved roll slot, lookups (warm and
cold), truncation, sanity checks and byte compatibility with a real Kafka ``.timeindex``."""

from __future__ import annotations

import bisect
import io
import random
import struct
from pathlib import Path

import pytest

from tierlog.errors import (
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidIndexOffsetError,
)
from tierlog.index import TimeIndex, TimestampOffset

TEN_MIB = 10 * 1024 * 1024
BASE = 500
T0 = 1_700_000_000_000
NAME = "00000000000000000500.timeindex"


def make_index(tmp_path: Path, entries: list[tuple[int, int]], max_size: int | None = None,
               name: str = NAME) -> TimeIndex:
    index = TimeIndex(tmp_path / name, BASE,
                      max_size if max_size is not None else 12 * (len(entries) + 2))
    for timestamp, offset in entries:
        index.maybe_append(timestamp, offset)
    assert index.entries == len(entries)
    return index


def spaced_entries(count: int, seed: int = 5) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    timestamp, offset, out = T0, BASE, []
    for _ in range(count):
        timestamp += rng.randrange(1, 50)
        offset += rng.randrange(0, 4)  # offsets may repeat: only timestamps must grow
        out.append((timestamp, offset))
    return out


def write_raw(path: Path, pairs: list[tuple[int, int]]) -> None:
    path.write_bytes(b"".join(struct.pack(">qi", t, r) for t, r in pairs))


# -- preallocation, close, reopen --------------------------------------------------------


def test_new_file_is_preallocated_to_max_size_rounded_down(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / NAME, BASE, 1000)
    assert index.length == 996 == (tmp_path / NAME).stat().st_size
    assert index.max_entries == 83 and index.entries == 0
    assert index.last_entry == TimestampOffset(-1, BASE)
    index.close()
    assert (tmp_path / NAME).stat().st_size == 0


def test_close_trims_and_reopen_keeps_entries(tmp_path: Path) -> None:
    entries = spaced_entries(40)
    make_index(tmp_path, entries, max_size=TEN_MIB).close()
    assert (tmp_path / NAME).stat().st_size == 40 * 12
    index = TimeIndex(tmp_path / NAME, BASE, TEN_MIB)
    assert index.entries == 40 and index.last_entry == entries[-1]
    assert [index.entry(i) for i in range(40)] == entries
    index.close()


def test_byte_layout_matches_kafka(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(T0, 500), (T0 + 7, 503), (2**62, BASE + 2**31 - 1)])
    index.close()
    expected = (struct.pack(">qi", T0, 0) + struct.pack(">qi", T0 + 7, 3)
                + struct.pack(">qi", 2**62, 2**31 - 1))
    assert (tmp_path / NAME).read_bytes() == expected


# -- maybe_append ------------------------------------------------------------------------


def test_maybe_append_only_adds_larger_timestamps(tmp_path: Path) -> None:
    index = make_index(tmp_path, [], max_size=240)
    index.maybe_append(-1, 500)  # NO_TIMESTAMP never enters the index
    assert index.entries == 0
    index.maybe_append(T0, 501)
    index.maybe_append(T0, 502)  # same timestamp: ignored (roll/close repeat the last one)
    assert index.entries == 1 and index.last_entry == (T0, 501)
    index.maybe_append(T0 + 1, 502)
    index.maybe_append(T0 + 2, 502)  # same offset, later timestamp: appended
    assert index.entries == 3 and index.last_entry == (T0 + 2, 502)


def test_maybe_append_rejects_going_backwards(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(T0, 510)], max_size=240)
    with pytest.raises(InvalidIndexOffsetError, match=r"offset 509.*\.timeindex"):
        index.maybe_append(T0 + 5, 509)
    with pytest.raises(InvalidIndexOffsetError, match=f"timestamp {T0 - 1}"):
        index.maybe_append(T0 - 1, 511)
    assert index.entries == 1


def test_maybe_append_relative_offset_overflow(tmp_path: Path) -> None:
    index = make_index(tmp_path, [], max_size=240)
    with pytest.raises(IndexOffsetOverflowError):
        index.maybe_append(T0, BASE + 2**31)
    with pytest.raises(IndexOffsetOverflowError):
        index.maybe_append(T0, BASE - 1)
    assert index.entries == 0


def test_last_slot_is_reserved_for_the_roll_entry(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(T0, 500), (T0 + 1, 501)], max_size=36)
    assert index.max_entries == 3 and index.entries == 2
    assert index.is_full()  # one slot early
    with pytest.raises(IndexFullError, match="full"):
        index.maybe_append(T0 + 2, 502)
    index.maybe_append(T0 + 2, 502, skip_full_check=True)
    assert index.entries == 3 and index.last_entry == (T0 + 2, 502)
    index.maybe_append(T0 + 2, 502, skip_full_check=True)  # a repeat needs no slot
    with pytest.raises(IndexFullError, match="no slot"):
        index.maybe_append(T0 + 3, 503, skip_full_check=True)


# -- lookups -----------------------------------------------------------------------------


def test_lookup_below_at_between_and_above(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(T0, 505), (T0 + 10, 510), (T0 + 20, 520)])
    assert index.lookup(0) == TimestampOffset(-1, BASE)
    assert index.lookup(T0 - 1) == TimestampOffset(-1, BASE)
    assert index.lookup(T0) == (T0, 505)
    assert index.lookup(T0 + 9) == (T0, 505)
    assert index.lookup(T0 + 10) == (T0 + 10, 510)
    assert index.lookup(T0 + 10**9) == (T0 + 20, 520)


def test_lookup_empty(tmp_path: Path) -> None:
    assert make_index(tmp_path, []).lookup(T0) == TimestampOffset(-1, BASE)


def test_lookups_in_warm_and_cold_sections_match_a_plain_search(tmp_path: Path) -> None:
    entries = spaced_entries(3000)  # the warm tail is the last 682 entries
    index = make_index(tmp_path, entries)
    timestamps = [t for t, _ in entries]
    targets = range(T0 - 2, timestamps[-1] + 3)
    found = (bisect.bisect_right(timestamps, t) - 1 for t in targets)
    expected = [TimestampOffset(-1, BASE) if i < 0 else entries[i] for i in found]
    assert [index.lookup(t) for t in targets] == expected


# -- truncate, resize, reset ---------------------------------------------------------------


def test_truncate_to(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(T0, 505), (T0 + 1, 510), (T0 + 2, 510), (T0 + 3, 520)])
    index.truncate_to(600)
    assert index.entries == 4
    index.truncate_to(520)
    assert index.entries == 3 and index.last_entry == (T0 + 2, 510)
    index.truncate_to(510)  # both entries at offset 510 go
    assert index.entries == 1 and index.last_entry == (T0, 505)
    index.truncate_to(501)
    assert index.entries == 0 and index.last_entry == (-1, BASE)


@pytest.mark.parametrize("cut_slot", [0, 1, 700, 1500, 2317, 2999])
def test_truncate_to_in_warm_and_cold_sections(tmp_path: Path, cut_slot: int) -> None:
    entries = spaced_entries(3000)
    index = make_index(tmp_path, entries)
    cut = entries[cut_slot][1]
    index.truncate_to(cut)
    kept = [e for e in entries if e[1] < cut]
    assert index.entries == len(kept)
    assert index.last_entry == (kept[-1] if kept else (-1, BASE))


def test_resize_below_entries_refreshes_last_entry(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(T0, 505), (T0 + 1, 510), (T0 + 2, 520)], max_size=120)
    assert index.resize(24)
    assert index.entries == 2 and index.last_entry == (T0 + 1, 510)


def test_reset_empties_and_preallocates(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(T0, 505)], max_size=120)
    index.trim_to_valid_size()
    assert index.length == 12
    index.reset()
    assert index.entries == 0 and index.length == 120 and index.last_entry == (-1, BASE)
    index.maybe_append(T0 - 100, 501)  # earlier entries are gone: nothing to go back from
    assert index.lookup(T0) == (T0 - 100, 501)


def test_rename_and_delete(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(T0, 505)], max_size=120)
    target = tmp_path / (NAME + ".swap")
    index.rename_to(target)
    index.maybe_append(T0 + 1, 506)
    index.close()
    assert target.read_bytes() == struct.pack(">qiqi", T0, 5, T0 + 1, 6)
    assert index.delete_if_exists() and not target.exists()
    assert not index.delete_if_exists()


def test_read_only(tmp_path: Path) -> None:
    make_index(tmp_path, [(T0, 505), (T0 + 5, 510)]).close()
    index = TimeIndex(tmp_path / NAME, BASE, TEN_MIB, writable=False)
    assert index.lookup(T0 + 6) == (T0 + 5, 510)
    index.sanity_check()
    index.maybe_append(T0 + 5, 510, skip_full_check=True)  # a repeat writes nothing
    with pytest.raises(io.UnsupportedOperation):
        index.maybe_append(T0 + 9, 511, skip_full_check=True)
    index.close()
    assert (tmp_path / NAME).stat().st_size == 24


# -- sanity checks -------------------------------------------------------------------------


def test_sanity_check_passes_a_good_index_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    entries = spaced_entries(5000)
    index = make_index(tmp_path, entries)
    index.flush()
    before = index.path.read_bytes()
    index.sanity_check()
    assert index.entries == 5000 and index.last_entry == TimestampOffset(*entries[-1])
    assert index.lookup(entries[2500][0]) == TimestampOffset(*entries[2500])
    index.flush()
    assert index.path.read_bytes() == before


def test_untrimmed_index_after_a_crash_fails(tmp_path: Path) -> None:
    index = make_index(tmp_path, spaced_entries(100), max_size=TEN_MIB)
    index.flush()
    crashed = tmp_path / "crashed.timeindex"
    crashed.write_bytes(index.path.read_bytes())
    index.close()
    reopened = TimeIndex(crashed, BASE, TEN_MIB)
    assert reopened.entries == TEN_MIB // 12
    assert reopened.last_entry == (0, BASE)
    with pytest.raises(CorruptIndexError, match=r"crashed\.timeindex.*entry 100 .*zeroed"):
        reopened.sanity_check()


def test_wholly_zeroed_index_fails(tmp_path: Path) -> None:
    (tmp_path / NAME).write_bytes(bytes(36))
    with pytest.raises(CorruptIndexError, match="entry 1 "):
        TimeIndex(tmp_path / NAME, BASE).sanity_check()


def test_length_not_a_multiple_fails(tmp_path: Path) -> None:
    (tmp_path / NAME).write_bytes(struct.pack(">qi", T0, 0) + bytes(8))
    with pytest.raises(CorruptIndexError, match="20 bytes"):
        TimeIndex(tmp_path / NAME, BASE).sanity_check()


@pytest.mark.parametrize(("pairs", "message"), [
    ([(T0, 0), (T0 - 1, 1)], "timestamp"),
    ([(T0, 0), (T0, 1)], "timestamp"),
    ([(T0, 5), (T0 + 1, 4)], "offset 504 is below the previous entry's offset 505"),
    ([(T0, -1)], "below the base offset"),
    ([(-5, 0)], "timestamp -5"),
])
def test_non_monotonic_entries_fail(tmp_path: Path, pairs: list[tuple[int, int]],
                                    message: str) -> None:
    write_raw(tmp_path / NAME, pairs)
    with pytest.raises(CorruptIndexError, match=message):
        TimeIndex(tmp_path / NAME, BASE).sanity_check()


def test_chunk_boundary_disorder_is_caught(tmp_path: Path) -> None:
    pairs = [(T0 + i, i) for i in range(5000)]
    pairs[4096] = (T0 + 4095, 4096)  # equal to the last timestamp of the first chunk
    write_raw(tmp_path / NAME, pairs)
    with pytest.raises(CorruptIndexError, match="entry 4096 "):
        TimeIndex(tmp_path / NAME, BASE).sanity_check()


# -- a real Kafka broker's file ------------------------------------------------------------


def test_reads_a_real_kafka_time_index(kafka_logdir: Path) -> None:
    path = kafka_logdir / "__consumer_offsets-6" / "00000000000000000000.timeindex"
    raw = path.read_bytes()
    expected = [TimestampOffset(t, r) for t, r in struct.iter_unpack(">qi", raw)]
    assert [o for _, o in expected] == [3, 7, 12]
    index = TimeIndex(path, 0, TEN_MIB)
    assert index.entries == 3 and index.last_entry == expected[-1]
    assert [index.entry(i) for i in range(3)] == expected
    index.sanity_check()
    (t1, o1), (t2, o2), (t3, o3) = expected
    assert index.lookup(t1 - 1) == (-1, 0)
    assert index.lookup(t1) == (t1, o1)
    assert index.lookup(t2 - 1) == (t1, o1)
    assert index.lookup(t2) == (t2, o2)
    assert index.lookup(t3 + 1) == (t3, o3)
    index.close()
    assert path.read_bytes() == raw
