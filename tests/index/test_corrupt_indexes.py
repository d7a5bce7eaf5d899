"""Damaged index files are detected at open and rebuilt byte for byte.

Zeroed, truncated (length not a multiple of the entry size), non-monotonic and missing
``.index``/``.timeindex`` files (and broken ``.txnindex`` files) of a segment below the recovery
point are caught by the sanity checks after a clean shutdown and after a crash alike; the
rebuilt files equal the ones the appends wrote.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from support.log_invariants import aborted_txns, check_indexes

from tierlog import Log, Record

CONFIG = {"segment.bytes": 6000, "index.interval.bytes": 300, "segment.index.bytes": 4096}
ENTRY_SIZES = {".index": 8, ".timeindex": 12, ".txnindex": 34}


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    """A cleanly closed log of three segments; the middle one holds two aborted transactions
    and every segment has several offset and time index entries."""
    directory = tmp_path_factory.mktemp("original") / "t-0"
    ts = 1_700_000_000_000
    with Log.open(directory, CONFIG, time_ms=lambda: ts, auto_high_watermark=True) as log:
        for i in range(120):
            pid = 9 if i % 7 == 3 else -1
            log.append_records(
                [Record(key=b"k%d" % i, value=b"v" * (i % 50), timestamp=ts + i * 3 - (i % 4))],
                "lz4" if i % 3 else "none", producer_id=pid, producer_epoch=0 if pid > 0 else -1,
                base_sequence=i // 7 if pid > 0 else -1, transactional=pid > 0,
            )
            if pid > 0:
                log.append_marker(9, 0, commit=i % 2 == 0)
        assert len(log.segments) == 3
        middle = log.segments.values()[1]
        assert middle.offset_index.entries >= 3 and middle.time_index.entries >= 3
        assert len(middle.txn_index.all_aborted_txns()) >= 2
    return directory


def _middle(directory: Path) -> str:
    return sorted(p.name for p in directory.glob("*.log"))[1][: -len(".log")]


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    size = ENTRY_SIZES[path.suffix]
    if how == "zeroed":
        path.write_bytes(bytes(len(data)))
    elif how == "truncated":
        path.write_bytes(bytes(data[:-3]))
    elif how == "non-monotonic":
        data[0:size], data[size:2 * size] = data[size:2 * size], data[0:size]
        path.write_bytes(bytes(data))
    elif how == "missing":
        path.unlink()
    elif how == "bad-version":
        struct.pack_into(">h", data, size, 7)
        path.write_bytes(bytes(data))
    else:
        raise AssertionError(how)


def _index_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.suffix in ENTRY_SIZES}


CASES = [(suffix, how) for suffix in (".index", ".timeindex")
         for how in ("zeroed", "truncated", "non-monotonic", "missing")]
CASES += [(".txnindex", "truncated"), (".txnindex", "bad-version"), (".txnindex", "non-monotonic")]


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
@pytest.mark.parametrize("suffix,how", CASES, ids=[f"{s[1:]}-{h}" for s, h in CASES])
def test_damaged_index_is_rebuilt_identically(tmp_path, original, clean, suffix, how):
    directory = tmp_path / "t-0"
    shutil.copytree(original, directory)
    expected = _index_files(directory)
    with Log.open(original.parent / "t-0", CONFIG, had_clean_shutdown=True,
                  auto_high_watermark=True) as log:
        leo, aborted = log.log_end_offset, aborted_txns(log)
    middle = _middle(directory)
    _damage(directory / (middle + suffix), how)
    # After a crash the middle segment is below the recovery point: only sanity-checked.
    with Log.open(directory, CONFIG, had_clean_shutdown=clean, recovery_point=leo,
                  auto_high_watermark=True) as log:
        report = log.recovery
        assert middle + ".log" in report.indexes_rebuilt
        assert report.clean_shutdown == clean
        assert report.bytes_truncated == 0 and not report.segments_deleted
        assert log.log_end_offset == leo
        assert aborted_txns(log) == aborted
        check_indexes(log)
        rebuilt = len(report.indexes_rebuilt)
        assert rebuilt == (1 if clean else 2)  # unclean: the active segment too
    assert _index_files(directory) == expected


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_intact_indexes_are_trusted(tmp_path, original, clean):
    directory = tmp_path / "t-0"
    shutil.copytree(original, directory)
    expected = _index_files(directory)
    with Log.open(directory, CONFIG, had_clean_shutdown=clean, recovery_point=10**9) as log:
        active = log.segments.active.path.name
        assert log.recovery.indexes_rebuilt == ([] if clean else [active])
        assert not log.recovery.changed_anything or not clean
    assert _index_files(directory) == expected


def test_index_pointing_past_the_end_of_its_log_is_rebuilt(tmp_path, original):
    """An index from a longer version of the segment (the .log lost its tail) fails the check."""
    directory = tmp_path / "t-0"
    shutil.copytree(original, directory)
    middle = _middle(directory)
    log_file = directory / (middle + ".log")
    with Log.open(directory, CONFIG, had_clean_shutdown=True) as log:
        segment = log.segments.values()[1]
        last_indexed = segment.offset_index.lookup(segment.offset_index.last_offset).position
    data = log_file.read_bytes()
    log_file.write_bytes(data[:last_indexed])
    with Log.open(directory, CONFIG, had_clean_shutdown=True) as log:
        assert middle + ".log" in log.recovery.indexes_rebuilt
        check_indexes(log)


def test_rebuild_after_both_indexes_of_every_segment_are_deleted(tmp_path, original):
    directory = tmp_path / "t-0"
    shutil.copytree(original, directory)
    expected = _index_files(directory)
    for path in list(directory.iterdir()):
        if path.suffix in (".index", ".timeindex", ".txnindex"):
            path.unlink()
    with Log.open(directory, CONFIG, had_clean_shutdown=True) as log:
        assert len(log.recovery.indexes_rebuilt) == 3
    assert _index_files(directory) == expected
