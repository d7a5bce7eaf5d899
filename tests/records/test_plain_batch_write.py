"""write_plain_batch: the C accelerator and its Python twin, side by side.

Both must write the same bytes (the batch with its base offset and leader epoch patched in,
still CRC-valid), return the same result, and refuse the same batches by writing nothing.
"""

from __future__ import annotations

import importlib
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from crc32c import crc32c

from tierlog.records import Record, RecordBatch, build_batch, build_control_batch, plain_batch_write
from tierlog.records._accelerator import PURE_PYTHON_ENV
from tierlog.records._codec_py import encode_records
from tierlog.records.batch import CRC, HEADER_SIZE

NOW = 1_700_000_000_000
INT64_MAX = (1 << 63) - 1
OPEN = (INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, True)  # no limits; records are checked
TRUSTING = (*OPEN[:4], False)  # record.validation=crc

Writer = Callable[..., tuple[int, int, int, int, int] | None]


def _c_writer() -> Writer:
    # Imported here so that a missing accelerator fails the C cases instead of skipping them.
    return importlib.import_module("tierlog.records._plain_batch_write").write_plain_batch


@pytest.fixture(params=["c", "python"])
def write(request: pytest.FixtureRequest) -> Writer:
    return _c_writer() if request.param == "c" else plain_batch_write.write_plain_batch_py


def _batch(n: int = 3, **kwargs) -> bytes:
    records = [Record(key=b"k%d" % i, value=b"v" * (10 * i), timestamp=NOW + i)
               for i in range(n)]
    return build_batch(records, now_ms=NOW, **kwargs)


def _recrc(data: bytearray) -> bytes:
    """``data`` with its CRC recomputed, so only the edited field is wrong."""
    struct.pack_into(">I", data, CRC, crc32c(memoryview(data)[CRC + 4:]))
    return bytes(data)


def _lengthened(data: bytes, tail: bytes) -> bytearray:
    """``data`` with ``tail`` appended inside the batch (its length says so)."""
    out = bytearray(data) + tail
    struct.pack_into(">i", out, 8, len(out) - 12)
    return out


def _edited(data: bytes, fmt: str, at: int, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return _recrc(out)


def _write_to_file(write: Writer, path: Path, data, *, prefix: bytes = b"",
                   base_offset: int = 100, epoch: int | None = 7, rules=OPEN):
    path.write_bytes(prefix)
    fd = os.open(path, os.O_RDWR)
    try:
        result = write(fd, len(prefix), data, base_offset, epoch, rules)
    finally:
        os.close(fd)
    return result, path.read_bytes()[len(prefix):]


# --- selection --------------------------------------------------------------------------------


def test_the_c_writer_is_chosen_unless_pure_python_is_asked_for(monkeypatch) -> None:
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        assert plain_batch_write.write_plain_batch is plain_batch_write.write_plain_batch_py
    else:
        assert plain_batch_write.write_plain_batch is _c_writer()
    monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    try:
        assert importlib.reload(plain_batch_write).write_plain_batch is plain_batch_write.write_plain_batch_py
    finally:
        monkeypatch.undo()
        importlib.reload(plain_batch_write)


# --- what gets written ------------------------------------------------------------------------


@pytest.mark.parametrize("epoch", [7, None, -1])
@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_writes_the_batch_with_offset_and_epoch_patched(write, tmp_path, epoch, compression):
    data = _batch(4, compression=compression)
    original_epoch = struct.unpack_from(">i", data, 12)[0]
    # Checking a compressed batch's records means decompressing it: the general path's job.
    rules = OPEN if compression == "none" else TRUSTING
    result, written = _write_to_file(write, tmp_path / "f", data, prefix=b"x" * 33,
                                     base_offset=5_000_000_000, epoch=epoch, rules=rules)
    expected_epoch = original_epoch if epoch is None else epoch
    assert result == (len(data), 5_000_000_003, NOW + 3, 4, expected_epoch)
    assert written[:8] == struct.pack(">q", 5_000_000_000)
    assert written[12:16] == struct.pack(">i", expected_epoch)
    assert written[8:12] == data[8:12] and written[16:] == data[16:]
    batch = RecordBatch(written)
    batch.ensure_valid()  # the CRC does not cover the patched fields
    assert [r.offset for r in batch.records()] == [5_000_000_000 + i for i in range(4)]


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview"])
def test_takes_any_bytes_like_object(write, tmp_path, kind):
    data = _batch()
    wrapped = {"bytes": data, "bytearray": bytearray(data),
               "memoryview": memoryview(b"??" + data)[2:]}[kind]
    result, written = _write_to_file(write, tmp_path / "f", wrapped)
    assert result is not None and RecordBatch(written).base_offset == 100


def test_c_and_python_write_the_same_bytes(tmp_path):
    for n in (1, 2, 50):
        data = _batch(n, compression="lz4")
        outcomes = [_write_to_file(w, tmp_path / "f", data, base_offset=n * 1000, epoch=n)
                    for w in (_c_writer(), plain_batch_write.write_plain_batch_py)]
        assert outcomes[0] == outcomes[1]


# --- what is refused ------------------------------------------------------------------------


def _refusals() -> dict[str, tuple[bytes, tuple[int, int, int, int, bool]]]:
    good = _batch(3)
    size = len(good)
    gap = bytearray(good[:HEADER_SIZE]) + encode_records(
        [Record(key=b"k", value=b"v", offset=o) for o in (0, 2, 3)], NOW, NOW, 0)[0]
    struct.pack_into(">i", gap, 8, len(gap) - 12)
    return {
        "idempotent": (_batch(3, producer_id=9, producer_epoch=0, base_sequence=0), OPEN),
        "transactional": (_batch(3, producer_id=9, producer_epoch=0, base_sequence=0,
                                 is_transactional=True), OPEN),
        "control marker": (build_control_batch(1, producer_id=9, producer_epoch=0,
                                               timestamp=NOW), OPEN),
        "control bit without a producer": (_edited(good, ">h", 21, 0x20), OPEN),
        "magic 1": (_edited(good, ">b", 16, 1), OPEN),
        "bad crc": (good[:-1] + bytes([good[-1] ^ 1]), OPEN),
        "length too long": (_edited(good, ">i", 8, size - 11), OPEN),
        "length too short": (_edited(good, ">i", 8, size - 13), OPEN),
        "truncated": (good[:-5], OPEN),
        "shorter than a header": (good[:HEADER_SIZE - 1], OPEN),
        "no records": (_edited(_edited(good, ">i", 57, 0), ">i", 23, -1), OPEN),
        "delta disagrees with count": (_edited(good, ">i", 23, 1), OPEN),
        "too big": (good, (INT64_MAX, INT64_MAX, INT64_MAX, size - 1, True)),
        "past the segment end": (good, (size - 1, INT64_MAX, INT64_MAX, INT64_MAX, True)),
        "offset past the range": (good, (INT64_MAX, 101, INT64_MAX, INT64_MAX, True)),
        "too late": (good, (INT64_MAX, INT64_MAX, NOW + 1, INT64_MAX, True)),
        # CRC-valid batches whose records disagree with the header: only the records check
        # (record.validation=full) can tell.
        "records end early": (_recrc(_lengthened(good, b"\0" * 8)), OPEN),
        "one record fewer than counted": (_edited(_edited(good, ">i", 57, 4), ">i", 23, 3), OPEN),
        "offset delta gap": (_recrc(gap), OPEN),
        "compressed (checked by the general path)": (_batch(3, compression="lz4"), OPEN),
    }


@pytest.mark.parametrize("case", sorted(_refusals()))
def test_refuses_by_writing_nothing(write, tmp_path, case):
    data, rules = _refusals()[case]
    result, written = _write_to_file(write, tmp_path / "f", data, prefix=b"abc", rules=rules)
    assert result is None
    assert written == b""


@pytest.mark.parametrize("case", ["records end early", "one record fewer than counted",
                                  "offset delta gap", "compressed (checked by the general path)"])
def test_trusting_the_crc_skips_the_records_check(write, tmp_path, case):
    data, _ = _refusals()[case]
    result, written = _write_to_file(write, tmp_path / "f", data, rules=TRUSTING)
    assert result is not None and len(written) == len(data)


def test_limits_are_inclusive(write, tmp_path):
    data = _batch(3)
    exact = (3 + len(data), 102, NOW + 2, len(data), True)  # end, last offset, max ts, size
    result, written = _write_to_file(write, tmp_path / "f", data, prefix=b"abc", rules=exact)
    assert result == (len(data), 102, NOW + 2, 3, 7)
    assert len(written) == len(data)


def test_a_closed_descriptor_raises_oserror(write, tmp_path):
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    os.close(fd)
    with pytest.raises(OSError):
        write(fd, 0, _batch(), 0, None, OPEN)


def test_a_read_only_descriptor_raises_oserror_and_writes_nothing(write, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(OSError):
            write(fd, 0, _batch(), 0, None, OPEN)
    finally:
        os.close(fd)
    assert path.read_bytes() == b""
