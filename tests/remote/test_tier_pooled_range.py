"""RemoteTier.get_range(pooled=True), the reader's fetch: on a local tier the range is read with
pread into a buffer of Arrow's memory pool (no fresh pages per segment), and must be the bytes,
the errors and the request counts of the plain read: a byte-for-byte view (unsigned bytes, so
``==`` against bytes and codecs' magic checks see the same values), a cut object raising the cut
error with both sizes, a missing one RemoteResourceNotFoundError."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from tierlog.errors import CorruptRecordError, RemoteResourceNotFoundError
from tierlog.remote.tier.object_store import RemoteTier

DATA = bytes(range(256)) * 64  # every byte value, bytes above 127 among them


@pytest.fixture
def tier(tmp_path: Path) -> RemoteTier:
    tier = RemoteTier(fsspec.filesystem("file"), str(tmp_path / "tier"))
    tier.put_bytes(DATA, tier.path("seg.log"))
    return tier


def test_a_pooled_read_is_the_plain_reads_bytes_from_the_pool(tier: RemoteTier) -> None:
    import pyarrow as pa

    path = tier.path("seg.log")
    before = pa.total_allocated_bytes()
    pooled = tier.get_range(path, 130, 9000, len(DATA), pooled=True)
    assert isinstance(pooled, memoryview) and pooled.readonly and pooled.format == "B"
    assert pa.total_allocated_bytes() - before >= 9000 - 130  # from Arrow's pool
    assert pooled == tier.get_range(path, 130, 9000, len(DATA)) == DATA[130:9000]
    assert pooled[:4] == DATA[130:134]
    assert tier.stats.gets == 2 and tier.stats.bytes == 2 * (9000 - 130)


def test_a_pooled_read_of_a_cut_object_names_both_sizes(tier: RemoteTier) -> None:
    path = tier.path("seg.log")
    with pytest.raises(CorruptRecordError, match=rf"returned {len(DATA) - 100}: .*expected "
                       rf"{len(DATA) + 50} bytes \(its metadata\), found {len(DATA)}"):
        tier.get_range(path, 100, len(DATA) + 50, len(DATA) + 50, pooled=True)
    with pytest.raises(CorruptRecordError, match="returned 0"):
        tier.get_range(path, len(DATA) + 10, len(DATA) + 50, len(DATA) + 50, pooled=True)


def test_a_pooled_read_of_a_missing_object_is_not_found(tier: RemoteTier) -> None:
    with pytest.raises(RemoteResourceNotFoundError, match=r"gone\.log"):
        tier.get_range(tier.path("gone.log"), 0, 10, 10, pooled=True)
