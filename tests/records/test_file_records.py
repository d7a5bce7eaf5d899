"""FileRecords: the next offset of a ``.log`` (the one home of that rule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.errors import CorruptRecordError, TruncatedBatchError
from tierlog.records import Record, build_batch
from tierlog.records.file_records import FileRecords


def _batch(base_offset: int, records: int = 2) -> bytes:
    return build_batch([Record(key=b"k", value=b"v") for _ in range(records)],
                       base_offset=base_offset, now_ms=1_700_000_000_000)


def _log(tmp_path: Path, *pieces: bytes) -> FileRecords:
    path = tmp_path / "00000000000000000010.log"
    path.write_bytes(b"".join(pieces))
    return FileRecords.open(path, mutable=False)


def test_next_offset_is_after_the_last_batch(tmp_path: Path) -> None:
    records = _log(tmp_path, _batch(10), _batch(12, records=3))
    try:
        assert records.next_offset() == 15
        assert records.next_offset(len(_batch(10))) == 15  # from the last index entry
        assert records.next_offset(records.size) is None
    finally:
        records.close()


def test_an_empty_log_has_no_next_offset(tmp_path: Path) -> None:
    records = _log(tmp_path)
    try:
        assert records.next_offset() is None
    finally:
        records.close()


def test_a_cut_off_batch_raises_unless_damage_ends_the_scan(tmp_path: Path) -> None:
    records = _log(tmp_path, _batch(10), _batch(12)[:-5])
    try:
        with pytest.raises(TruncatedBatchError):
            records.next_offset()
        seen: list[CorruptRecordError] = []
        assert records.next_offset(on_damage=seen.append) == 12
        assert len(seen) == 1 and isinstance(seen[0], TruncatedBatchError)
    finally:
        records.close()


def test_a_file_dropped_without_close_gives_back_its_descriptor(tmp_path: Path) -> None:
    """A raw descriptor outlives its object unless someone closes it: a FileRecords (a Log)
    dropped unclosed closes it when collected, with Python's ResourceWarning; one closed
    properly warns of nothing."""
    import os
    import warnings

    path = tmp_path / "00000000000000000000.log"
    held = [FileRecords.open(path)]
    fd = held[0].fileno()
    with pytest.warns(ResourceWarning, match="unclosed segment file .*00000000000000000000.log"):
        held.clear()  # the last reference: collected here
    with pytest.raises(OSError):  # EBADF: closed, not kept until the process ends
        os.fstat(fd)

    closed = FileRecords.open(path)
    closed.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del closed  # the last reference (other tests' unclosed files may warn meanwhile)
    assert not [w for w in caught if str(path) in str(w.message)]
