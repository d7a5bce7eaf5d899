"""walk_headers and declared_size (tierlog.records.batch): the one walk over batch headers in
bytes, shared by segment recovery, the remote reader and the tier's offset checks. Checked
against RecordBatch over many random runs of batches cut at random points."""

from __future__ import annotations

import random
import struct

import pytest

from tierlog import Record
from tierlog.errors import CorruptRecordError, UnsupportedMagicError
from tierlog.records import build_batch
from tierlog.records.batch import (
    HEADER_SIZE,
    RecordBatch,
    declared_size,
    iter_batches,
    walk_headers,
)


def _run(rng: random.Random) -> bytes:
    out, offset = bytearray(), rng.randint(0, 1000)
    for _ in range(rng.randint(1, 8)):
        n = rng.randint(1, 5)
        out += build_batch([Record(value=rng.randbytes(rng.randint(0, 300)))] * n,
                           base_offset=offset, now_ms=1)
        offset += n + rng.randint(0, 3)
    return bytes(out)


@pytest.mark.parametrize("seed", range(40))
def test_walk_matches_record_batch_views_wherever_the_bytes_are_cut(seed):
    rng = random.Random(seed)
    data = _run(rng)
    whole = [(b.position, b.base_offset, b.last_offset, b.size_in_bytes)
             for b in iter_batches(data)]
    walked = [(p, h[0], h[0] + h[6], h[1] + 12) for p, h in walk_headers(data)]
    assert walked == whole
    cut = rng.randint(0, len(data))
    partial = [w for w in whole if w[0] + HEADER_SIZE <= cut]  # header in, body maybe cut
    assert [(p, h[0], h[0] + h[6], h[1] + 12) for p, h in walk_headers(data, 0, cut)] == partial
    for position, _, _, size in whole:
        assert declared_size(data, position) == size
        assert declared_size(data[:position + HEADER_SIZE - 1], position) is None


@pytest.mark.parametrize(("field", "value", "error"), [
    (">b", 1, UnsupportedMagicError),  # magic 1
    (">i", 48, CorruptRecordError),  # batchLength below the minimum
])
def test_a_bad_header_raises_what_record_batch_raises(field, value, error):
    first = build_batch([Record(value=b"a")], base_offset=5, now_ms=1)
    second = bytearray(build_batch([Record(value=b"b")], base_offset=6, now_ms=1))
    struct.pack_into(field, second, 16 if field == ">b" else 8, value)
    data = first + bytes(second)
    with pytest.raises(error) as expected:
        RecordBatch(data, len(first), header_only=True)
    walk = walk_headers(data)
    assert next(walk)[0] == 0  # the good batch comes first
    with pytest.raises(error) as walked:
        next(walk)
    assert str(walked.value) == str(expected.value)
    assert f"position {len(first)}" in str(walked.value)
    with pytest.raises(error):
        declared_size(data, len(first))
