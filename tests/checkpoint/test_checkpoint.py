"""OffsetCheckpointFile and LeaderEpochCheckpointFile: Kafka's text format, byte for byte."""

from __future__ import annotations

import re

import pytest

from tierlog.checkpoint.checkpoint_file import (
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
)
from tierlog.errors import CorruptCheckpointError, InvalidTopicError

OFFSET_CHECKPOINTS = [
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "replication-offset-checkpoint",
]
EPOCH_CHECKPOINTS = ["TestTopicPatient-0", "__consumer_offsets-6", "__cluster_metadata-0"]


def test_offset_checkpoint_bytes_and_order(tmp_path):
    cp = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    offsets = {("orders", 3): 1200, ("a.b_c-d", 0): 0, ("orders", 1): 7}
    cp.write(offsets)
    assert cp.path.read_bytes() == b"0\n3\norders 3 1200\na.b_c-d 0 0\norders 1 7\n"
    assert list(cp.read().items()) == list(offsets.items())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recovery-point-offset-checkpoint"]


def test_empty_missing_and_version_only_files_read_as_empty(tmp_path):
    cp = OffsetCheckpointFile(tmp_path / "cp")
    assert cp.read() == {}
    cp.write({})
    assert cp.path.read_bytes() == b"0\n0\n"
    assert cp.read() == {}
    for content in (b"", b"0\n"):
        cp.path.write_bytes(content)
        assert cp.read() == {}


@pytest.mark.parametrize("name", OFFSET_CHECKPOINTS)
def test_kafka_offset_checkpoints_round_trip_byte_identically(kafka_logdir, tmp_path, name):
    original = (kafka_logdir / name).read_bytes()
    offsets = OffsetCheckpointFile(kafka_logdir / name).read()
    assert len(offsets) == int(original.split(b"\n")[1])
    copy = OffsetCheckpointFile(tmp_path / name)
    copy.write(offsets)
    assert copy.path.read_bytes() == original


def test_kafka_recovery_point_values(kafka_logdir):
    offsets = OffsetCheckpointFile(kafka_logdir / "recovery-point-offset-checkpoint").read()
    assert len(offsets) == 54
    assert next(iter(offsets.items())) == (("__consumer_offsets", 22), 0)
    assert all(isinstance(p, int) and isinstance(o, int) for (_, p), o in offsets.items())


@pytest.mark.parametrize("partition", EPOCH_CHECKPOINTS)
def test_kafka_leader_epoch_checkpoints_round_trip(kafka_logdir, tmp_path, partition):
    source = kafka_logdir / partition / "leader-epoch-checkpoint"
    entries = LeaderEpochCheckpointFile(source).read()
    expected_epoch = 1 if partition == "__cluster_metadata-0" else 0
    assert entries == [EpochEntry(expected_epoch, 0)]
    copy = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    copy.write(entries)
    assert copy.path.read_bytes() == source.read_bytes()


def test_leader_epoch_checkpoint_bytes(tmp_path):
    cp = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    cp.write([EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(7, 9_000_000_000)])
    assert cp.path.read_bytes() == b"0\n3\n0 0\n3 120\n7 9000000000\n"
    assert cp.read() == [(0, 0), (3, 120), (7, 9_000_000_000)]
    # Kafka splits on runs of whitespace.
    cp.path.write_bytes(b"0\n1\n4  17\n")
    assert cp.read() == [EpochEntry(4, 17)]


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"1\n0\n", 1),  # unknown version
        (b"zero\n0\n", 1),
        (b"0\nmany\n", 2),
        (b"0\n2\nt 0 5\n", None),  # count mismatch: fewer entries
        (b"0\n1\nt 0 5\nt 1 6\n", None),  # count mismatch: more entries
        (b"0\n2\nt 0 5\nt 1\n", 4),  # too few fields
        (b"0\n1\nt 0 5x\n", 3),  # not an integer
        (b"0\n1\nt 0 1.5\n", 3),
        (b"0\n1\nt 99999999999 5\n", 3),  # partition beyond int32
        (b"0\n1\nt 0 5 extra\n", 3),
        (b"0\n2\nt 0 5\n\nt 1 6\n", 4),  # blank line
    ],
)
def test_malformed_offset_checkpoints_name_file_and_line(tmp_path, content, line):
    cp = OffsetCheckpointFile(tmp_path / "cp")
    cp.path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError) as err:
        cp.read()
    assert str(cp.path) in str(err.value)
    if line is not None:
        assert re.search(rf"\bline {line}\b", str(err.value))


def test_malformed_epoch_checkpoint(tmp_path):
    cp = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    cp.path.write_bytes(b"0\n1\n1 2 3\n")
    with pytest.raises(CorruptCheckpointError, match="line 3"):
        cp.read()
    cp.path.write_bytes(b"0\n1\n\xff 2\n")
    with pytest.raises(CorruptCheckpointError, match="UTF-8"):
        cp.read()


def test_write_refuses_illegal_topics(tmp_path):
    cp = OffsetCheckpointFile(tmp_path / "cp")
    for topic in ("has space", "", ".."):
        with pytest.raises(InvalidTopicError):
            cp.write({(topic, 0): 1})
    assert not cp.path.exists()


def test_stray_tmp_does_not_affect_reads_or_writes(kafka_logdir):
    cp = OffsetCheckpointFile(kafka_logdir / "replication-offset-checkpoint")
    before = cp.read()
    assert len(before) == 54
    (kafka_logdir / "replication-offset-checkpoint.tmp").write_bytes(b"0\n9\ntorn")
    assert cp.read() == before
    cp.write({("t", 0): 1})
    assert cp.read() == {("t", 0): 1}
    assert not (kafka_logdir / "replication-offset-checkpoint.tmp").exists()
