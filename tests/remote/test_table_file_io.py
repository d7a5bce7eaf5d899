"""TierFileIO: pyiceberg's FileIO over the tier. A file it writes appears whole when its stream
closes, and not at all when the writing fails; creating without overwrite never replaces; a
location off the tier is refused."""

from __future__ import annotations

import pytest

from tierlog.remote.table.file_io import TierFileIO
from tierlog.remote.tier.object_store import RemoteTier


def test_a_file_appears_whole_when_its_stream_closes(tier: RemoteTier) -> None:
    io = TierFileIO(tier)
    path = tier.path("t", "metadata", "snap-1.avro")
    output = io.new_output(path)
    with output.create(overwrite=True) as stream:
        stream.write(b"manifest ")
        assert not tier.fs.exists(path)  # nothing is published before the close
        stream.write(b"bytes")
    assert tier.get_bytes(path) == b"manifest bytes"
    assert len(output) == 14
    with io.new_input(path).open() as stream:
        assert stream.read() == b"manifest bytes"
    assert tier.stats.snapshot()["puts"] == 1


def test_a_failed_write_publishes_nothing(tier: RemoteTier) -> None:
    path = tier.path("t", "metadata", "snap-2.avro")
    with pytest.raises(RuntimeError, match="writer failed"), \
            TierFileIO(tier).new_output(path).create(overwrite=True) as stream:
        stream.write(b"half a manifest")
        raise RuntimeError("writer failed")
    assert not tier.fs.exists(path)
    assert tier.list_names(tier.path("t", "metadata")) == []


def test_create_without_overwrite_never_replaces(tier: RemoteTier) -> None:
    io = TierFileIO(tier)
    path = tier.path("t", "v1.metadata.json")
    with io.new_output(path).create() as stream:
        stream.write(b"first")
    with pytest.raises(FileExistsError, match="exists"), io.new_output(path).create() as stream:
        stream.write(b"second")
    assert tier.get_bytes(path) == b"first"


def test_a_location_off_the_tier_is_refused(tier: RemoteTier) -> None:
    with pytest.raises(ValueError, match="'s3' is not on the tier"):
        TierFileIO(tier).new_output("s3://bucket/t/data/x.parquet")
