"""OffsetIndex: preallocation, appends, lookups (warm and cold), truncation, file management,
sanity checks and byte compatibility with a real Kafka broker's ``.index``."""

from __future__ import annotations

import bisect
import io
import random
import struct
import sys
from array import array
from pathlib import Path

import pytest

from tierlog.errors import (
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidIndexOffsetError,
)
from tierlog.index import OffsetIndex, OffsetPosition

TEN_MIB = 10 * 1024 * 1024
BASE = 1000


def make_index(tmp_path: Path, entries: list[tuple[int, int]], max_size: int | None = None,
               base: int = BASE, name: str = "00000000000000001000.index") -> OffsetIndex:
    index = OffsetIndex(tmp_path / name, base, max_size if max_size is not None else
                        max(8, 8 * len(entries)))
    for offset, position in entries:
        index.append(offset, position)
    return index


def spaced_entries(count: int, seed: int = 3) -> list[tuple[int, int]]:
    """Irregularly spaced offsets and positions, as batches of varying sizes give."""
    rng = random.Random(seed)
    offset, position, out = BASE, 0, []
    for _ in range(count):
        offset += rng.randrange(1, 9)
        position += rng.randrange(4096, 9000)
        out.append((offset, position))
    return out


def reference_lookups(entries: list[tuple[int, int]], targets: range) -> list[OffsetPosition]:
    offsets = [o for o, _ in entries]
    found = (bisect.bisect_right(offsets, t) - 1 for t in targets)
    return [OffsetPosition(BASE, 0) if i < 0 else OffsetPosition(*entries[i]) for i in found]


def write_raw(path: Path, pairs: list[tuple[int, int]]) -> None:
    path.write_bytes(b"".join(struct.pack(">ii", r, p) for r, p in pairs))


# -- preallocation, close, reopen --------------------------------------------------------


def test_new_file_is_preallocated_to_max_size_rounded_down(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE, 1003)
    assert (tmp_path / "a.index").stat().st_size == 1000 == index.length
    assert (index.entries, index.max_entries, index.size_in_bytes) == (0, 125, 0)
    assert not index.is_full()
    assert index.last_offset == BASE
    index.close()


def test_existing_empty_file_stays_empty_until_resized(tmp_path: Path) -> None:
    # Kafka preallocates only a file it creates: a trimmed empty index of a closed segment
    # must not come back as 10 MiB of zeros (it would be copied to the remote tier so).
    (tmp_path / "a.index").touch()
    index = OffsetIndex(tmp_path / "a.index", BASE, 80)
    assert index.length == 0 and index.entries == 0 and index.is_full()
    index.resize(80)
    assert index.length == 80 and index.max_entries == 10
    index.close()
    assert (tmp_path / "a.index").stat().st_size == 0


def test_max_index_size_below_one_entry_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"a\.index"):
        OffsetIndex(tmp_path / "a.index", BASE, 7)


def test_no_max_size_gives_an_empty_unmapped_index(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", BASE)
    assert index.length == 0 and index.max_entries == 0 and index.is_full()
    assert index.lookup(5000) == OffsetPosition(BASE, 0)
    index.sanity_check()
    index.flush()
    index.close()
    assert (tmp_path / "a.index").stat().st_size == 0


def test_close_trims_to_entries_and_is_idempotent(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1003, 0), (1010, 4200)], max_size=TEN_MIB)
    assert index.path.stat().st_size == TEN_MIB
    index.close()
    index.close()
    assert index.path.stat().st_size == 16 == index.length


def test_reopen_keeps_entries_and_is_full_until_resized(tmp_path: Path) -> None:
    entries = spaced_entries(50)
    make_index(tmp_path, entries, max_size=4096).close()
    index = OffsetIndex(tmp_path / "00000000000000001000.index", BASE, 4096)
    assert index.entries == 50 and index.last_offset == entries[-1][0]
    assert [index.entry(i) for i in range(50)] == entries
    assert index.is_full()  # Kafka: the owner grows the active segment's index back
    assert index.resize(4096) and index.max_entries == 512 and not index.is_full()
    index.append(entries[-1][0] + 1, entries[-1][1] + 1)
    assert index.entries == 51
    index.close()


def test_byte_layout_matches_kafka(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000001000.index", BASE, 64)
    for offset, position in [(1000, 0), (1003, 4127), (1000 + 2**31 - 1, 2**31 - 1)]:
        index.append(offset, position)
    index.close()
    expected = struct.pack(">ii", 0, 0) + struct.pack(">ii", 3, 4127) + struct.pack(
        ">ii", 2**31 - 1, 2**31 - 1)
    assert index.path.read_bytes() == expected


def test_flush_makes_entries_visible_in_the_file(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1001, 10), (1002, 20)], max_size=64)
    index.flush()
    assert index.path.read_bytes()[:16] == struct.pack(">iiii", 1, 10, 2, 20)
    index.close()


# -- lookups -----------------------------------------------------------------------------


def test_lookup_below_at_between_and_above_entries(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1005, 100), (1010, 200), (1020, 300)])
    assert index.lookup(0) == OffsetPosition(BASE, 0)
    assert index.lookup(1004) == OffsetPosition(BASE, 0)
    assert index.lookup(1005) == OffsetPosition(1005, 100)
    assert index.lookup(1009) == OffsetPosition(1005, 100)
    assert index.lookup(1010) == OffsetPosition(1010, 200)
    assert index.lookup(1020) == OffsetPosition(1020, 300)
    assert index.lookup(10**12) == OffsetPosition(1020, 300)


def test_lookup_empty_index_returns_base_and_zero(tmp_path: Path) -> None:
    index = make_index(tmp_path, [], max_size=64)
    assert index.lookup(BASE + 7) == OffsetPosition(BASE, 0)


def test_lookups_in_warm_and_cold_sections_match_a_plain_search(tmp_path: Path) -> None:
    # 5000 entries: the warm tail is the last 1024, the cold head spans many fence strides.
    entries = spaced_entries(5000)
    index = make_index(tmp_path, entries)
    targets = range(BASE - 2, entries[-1][0] + 3)
    assert [index.lookup(t) for t in targets] == reference_lookups(entries, targets)


def test_cold_lookups_stay_right_after_truncate_and_new_appends(tmp_path: Path) -> None:
    entries = spaced_entries(5000)
    index = make_index(tmp_path, entries)
    index.lookup(entries[10][0])  # a cold lookup reads keys of the cold head
    cut = entries[2000][0]
    index.truncate_to(cut)
    assert index.entries == 2000 and index.last_offset == entries[1999][0]
    # Rewrite the truncated slots with other offsets, then search them from the cold side.
    offset, position = entries[1999]
    fresh = entries[:2000]
    for _ in range(3000):
        offset, position = offset + 5, position + 5000
        fresh.append((offset, position))
        index.append(offset, position)
    targets = range(BASE, fresh[-1][0] + 2, 3)
    assert [index.lookup(t) for t in targets] == reference_lookups(fresh, targets)


# -- appends -----------------------------------------------------------------------------


def test_append_rejects_an_offset_not_above_the_last(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1005, 100)], max_size=64)
    with pytest.raises(InvalidIndexOffsetError, match=r"1005.*\.index"):
        index.append(1005, 200)
    with pytest.raises(InvalidIndexOffsetError):
        index.append(1004, 200)
    assert index.entries == 1


def test_append_to_a_full_index_raises(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1001, 1), (1002, 2)], max_size=16)
    assert index.is_full()
    with pytest.raises(IndexFullError, match="full"):
        index.append(1003, 3)


def test_relative_offset_overflow(tmp_path: Path) -> None:
    index = make_index(tmp_path, [], max_size=64)
    assert index.relative_offset(BASE + 2**31 - 1) == 2**31 - 1
    assert index.can_append_offset(BASE) and index.can_append_offset(BASE + 2**31 - 1)
    assert not index.can_append_offset(BASE + 2**31) and not index.can_append_offset(BASE - 1)
    with pytest.raises(IndexOffsetOverflowError, match=r"2147484648.*base offset 1000"):
        index.relative_offset(BASE + 2**31)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(BASE - 1, 0)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(BASE + 2**31, 0)
    assert index.entries == 0


def test_append_rejects_a_position_outside_int32(tmp_path: Path) -> None:
    index = make_index(tmp_path, [], max_size=64)
    with pytest.raises(ValueError, match="position"):
        index.append(1001, -1)
    with pytest.raises(ValueError, match="position"):
        index.append(1001, 2**31)


def test_entry_out_of_range(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1001, 1)], max_size=64)
    assert index.entry(0) == OffsetPosition(1001, 1)
    with pytest.raises(IndexError, match="entry 1"):
        index.entry(1)


# -- fetch upper bound ---------------------------------------------------------------------


def test_fetch_upper_bound_offset(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1005, 100), (1010, 200), (1020, 300)])
    start = OffsetPosition(1005, 100)
    assert index.fetch_upper_bound_offset(start, 50) == OffsetPosition(1010, 200)
    assert index.fetch_upper_bound_offset(start, 100) == OffsetPosition(1010, 200)
    assert index.fetch_upper_bound_offset(start, 101) == OffsetPosition(1020, 300)
    assert index.fetch_upper_bound_offset(OffsetPosition(BASE, 0), 0) == OffsetPosition(1005, 100)
    assert index.fetch_upper_bound_offset(start, 201) is None


def test_fetch_upper_bound_offset_in_cold_section(tmp_path: Path) -> None:
    entries = spaced_entries(3000)
    index = make_index(tmp_path, entries)
    positions = [p for _, p in entries]
    for i in (0, 1, 17, 999, 1500):
        want = positions[i] + 1
        j = bisect.bisect_left(positions, want)
        got = index.fetch_upper_bound_offset(OffsetPosition(*entries[i]), 1)
        assert got == OffsetPosition(*entries[j])


# -- truncate, resize, reset, rename, delete ----------------------------------------------


def test_truncate_to(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1005, 100), (1010, 200), (1020, 300)])
    index.truncate_to(2000)
    assert index.entries == 3
    index.truncate_to(1020)  # exact: drops it
    assert index.entries == 2 and index.last_offset == 1010
    index.truncate_to(1007)  # between: drops the larger ones only
    assert index.entries == 1 and index.last_offset == 1005
    index.truncate_to(1001)  # below every entry
    assert index.entries == 0 and index.last_offset == BASE
    index.append(1002, 50)
    assert index.lookup(1003) == OffsetPosition(1002, 50)


def test_resize_grows_shrinks_and_reports_change(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1001, 1), (1002, 2), (1003, 3)], max_size=64)
    assert not index.resize(64) and not index.resize(70)  # 70 rounds down to 64
    assert index.resize(1024) and index.length == 1024 and index.max_entries == 128
    assert index.path.stat().st_size == 1024
    assert index.entries == 3
    assert index.resize(16)  # below the entries: the ones beyond are dropped
    assert index.entries == 2 and index.last_offset == 1002
    index.trim_to_valid_size()
    assert index.path.stat().st_size == 16


def test_reset_empties_and_preallocates(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1001, 1), (1002, 2)], max_size=800)
    index.trim_to_valid_size()
    index.reset()
    assert index.entries == 0 and index.length == 800 and index.last_offset == BASE
    assert index.path.stat().st_size == 800
    index.append(1001, 7)
    assert index.lookup(1001) == OffsetPosition(1001, 7)


def test_rename_keeps_the_mapping(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1001, 1), (1002, 2)], max_size=800)
    target = tmp_path / "00000000000000001000.index.deleted"
    index.rename_to(target)
    assert index.path == target and target.exists()
    assert not (tmp_path / "00000000000000001000.index").exists()
    index.append(1003, 3)
    index.close()
    assert target.read_bytes() == struct.pack(">iiiiii", 1, 1, 2, 2, 3, 3)


def test_delete_if_exists(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1001, 1)], max_size=800)
    assert index.delete_if_exists()
    assert not index.path.exists()
    assert not index.delete_if_exists()


def test_lookup_on_a_closed_index_raises(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1001, 1)], max_size=800)
    index.close()
    with pytest.raises(ValueError, match="closed"):
        index.lookup(1001)


# -- read-only -----------------------------------------------------------------------------


def test_read_only_index_reads_and_refuses_writes(tmp_path: Path) -> None:
    entries = spaced_entries(20)
    make_index(tmp_path, entries).close()
    path = tmp_path / "00000000000000001000.index"
    before = path.read_bytes()
    index = OffsetIndex(path, BASE, TEN_MIB, writable=False)
    assert index.entries == 20 and not index.writable
    assert index.lookup(entries[7][0]) == OffsetPosition(*entries[7])
    index.sanity_check()
    with pytest.raises(io.UnsupportedOperation, match="read-only"):
        index.append(entries[-1][0] + 1, 0)
    with pytest.raises(io.UnsupportedOperation):
        index.resize(TEN_MIB)
    index.flush()
    index.close()
    assert path.read_bytes() == before


def test_read_only_empty_file(tmp_path: Path) -> None:
    (tmp_path / "a.index").touch()
    index = OffsetIndex(tmp_path / "a.index", BASE, TEN_MIB, writable=False)
    assert index.entries == 0 and index.length == 0
    assert index.lookup(1234) == OffsetPosition(BASE, 0)
    index.sanity_check()
    index.close()
    assert (tmp_path / "a.index").stat().st_size == 0


def test_read_only_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "missing.index", BASE, TEN_MIB, writable=False)


# -- sanity checks -------------------------------------------------------------------------


def test_sanity_check_passes_a_good_index_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    entries = spaced_entries(5000)
    index = make_index(tmp_path, entries)
    index.flush()
    before = index.path.read_bytes()
    index.sanity_check()
    assert index.entries == 5000 and index.entry(4999) == OffsetPosition(*entries[-1])
    assert index.lookup(entries[2500][0]) == OffsetPosition(*entries[2500])
    index.flush()
    assert index.path.read_bytes() == before


def test_untrimmed_index_after_a_crash_counts_its_zero_tail_and_fails(tmp_path: Path) -> None:
    index = make_index(tmp_path, spaced_entries(100), max_size=TEN_MIB)
    index.flush()
    crashed = tmp_path / "crashed.index"
    crashed.write_bytes(index.path.read_bytes())  # the file as a crash leaves it: untrimmed
    index.close()
    reopened = OffsetIndex(crashed, BASE, TEN_MIB)
    # As in Kafka, every 8 bytes of an existing file is an entry.
    assert reopened.entries == TEN_MIB // 8 and reopened.is_full()
    with pytest.raises(CorruptIndexError, match=r"crashed\.index.*entry 100 .*zeroed"):
        reopened.sanity_check()


def test_wholly_zeroed_index_fails(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(bytes(64))
    with pytest.raises(CorruptIndexError, match="entry 1 "):
        OffsetIndex(path, BASE).sanity_check()


def test_a_single_zero_entry_is_valid(tmp_path: Path) -> None:
    # (relative offset 0, position 0): the base offset's batch at the start of the log.
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(bytes(8))
    index = OffsetIndex(path, BASE)
    index.sanity_check()
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)


def test_length_not_a_multiple_of_the_entry_size_fails(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    path.write_bytes(struct.pack(">ii", 1, 0) + b"\x00\x00\x00\x02")
    index = OffsetIndex(path, BASE)
    assert index.entries == 1 and index.length == 12
    with pytest.raises(CorruptIndexError, match="12 bytes"):
        index.sanity_check()


def test_non_monotonic_offsets_fail(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    write_raw(path, [(1, 0), (5, 10), (3, 20)])
    with pytest.raises(CorruptIndexError, match=r"entry 2 .*1003.*1005"):
        OffsetIndex(path, BASE).sanity_check()


def test_decreasing_positions_fail(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    write_raw(path, [(1, 100), (5, 50)])
    with pytest.raises(CorruptIndexError, match="position 50"):
        OffsetIndex(path, BASE).sanity_check()


def test_offset_below_base_fails(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001000.index"
    write_raw(path, [(-1, 0)])
    with pytest.raises(CorruptIndexError, match="below the base offset"):
        OffsetIndex(path, BASE).sanity_check()


@pytest.mark.parametrize("bad_slot", [4095, 4096, 4097, 1_310_719])
def test_sanity_check_walks_every_entry_of_a_full_10_mib_index(tmp_path: Path,
                                                               bad_slot: int) -> None:
    path = tmp_path / "00000000000000001000.index"
    count = TEN_MIB // 8
    words = array("i", range(2 * count))  # entry i = (2i, 2i + 1): strictly increasing
    if sys.byteorder == "little":
        words.byteswap()
    data = bytearray(words.tobytes())
    struct.pack_into(">ii", data, bad_slot * 8, 0, 0)  # one zeroed entry anywhere
    path.write_bytes(bytes(data))
    index = OffsetIndex(path, BASE)
    assert index.entries == count
    with pytest.raises(CorruptIndexError, match=f"entry {bad_slot} "):
        index.sanity_check()


# -- a real Kafka broker's file ------------------------------------------------------------


def test_reads_a_real_kafka_offset_index(kafka_logdir: Path) -> None:
    partition = kafka_logdir / "__consumer_offsets-6"
    path = partition / "00000000000000000000.index"
    raw = path.read_bytes()
    expected = [OffsetPosition(rel, pos) for rel, pos in struct.iter_unpack(">ii", raw)]
    assert expected == [(3, 4730), (7, 9571)]
    index = OffsetIndex(path, 0, TEN_MIB)
    assert index.entries == 2 and index.last_offset == 7
    assert [index.entry(i) for i in range(2)] == expected
    index.sanity_check()
    assert [index.lookup(t) for t in (0, 2, 3, 6, 7, 12)] == [
        (0, 0), (0, 0), expected[0], expected[0], expected[1], expected[1]]
    # Each entry names a batch's last offset and that batch's start position in the .log.
    log = (partition / "00000000000000000000.log").read_bytes()
    for offset, position in expected:
        base_offset, = struct.unpack_from(">q", log, position)
        last_offset_delta, = struct.unpack_from(">i", log, position + 23)
        assert base_offset + last_offset_delta == offset
    index.close()
    assert path.read_bytes() == raw


def test_resize_of_a_closed_index_raises(tmp_path: Path) -> None:
    index = make_index(tmp_path, [(1001, 1)], max_size=800)
    index.close()
    with pytest.raises(ValueError, match="closed"):
        index.resize(800)
