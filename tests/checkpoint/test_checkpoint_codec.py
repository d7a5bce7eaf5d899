"""The pure encode/decode pairs of the checkpoint formats (tierlog.checkpoint.checkpoint_file): the
one home of the text that the checkpoint files and the remote tier's leader-epoch copy both
write."""

from __future__ import annotations

import random

import pytest

from tierlog.checkpoint.checkpoint_file import (
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    decode_leader_epoch_checkpoint,
    decode_offset_checkpoint,
    encode_leader_epoch_checkpoint,
    encode_offset_checkpoint,
)
from tierlog.errors import CorruptCheckpointError

_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _random_epochs(rng: random.Random) -> list[EpochEntry]:
    return [EpochEntry(rng.randint(*_INT32), rng.randint(*_INT64))
            for _ in range(rng.randint(0, 20))]


def _random_offsets(rng: random.Random) -> dict[tuple[str, int], int]:
    alphabet = "abcXYZ019._-"
    return {("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))).strip(".") or "t",
             rng.randint(*_INT32)): rng.randint(*_INT64) for _ in range(rng.randint(0, 20))}


@pytest.mark.parametrize("seed", range(50))
def test_leader_epoch_round_trip_and_file_bytes(tmp_path, seed):
    entries = _random_epochs(random.Random(seed))
    data = encode_leader_epoch_checkpoint(entries)
    assert decode_leader_epoch_checkpoint(data, "x") == entries
    # The file class writes exactly the codec's bytes and reads them back through it.
    cp = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    cp.write(entries)
    assert cp.path.read_bytes() == data
    assert cp.read() == entries


@pytest.mark.parametrize("seed", range(50))
def test_offset_round_trip_and_file_bytes(tmp_path, seed):
    offsets = _random_offsets(random.Random(seed))
    data = encode_offset_checkpoint(offsets)
    assert decode_offset_checkpoint(data, "x") == offsets
    cp = OffsetCheckpointFile(tmp_path / "cp")
    cp.write(offsets)
    assert cp.path.read_bytes() == data
    assert cp.read() == offsets


def test_leader_epoch_text_is_kafkas():
    assert encode_leader_epoch_checkpoint(iter([EpochEntry(0, 0), EpochEntry(5, 77)])) == (
        b"0\n2\n0 0\n5 77\n")
    assert encode_leader_epoch_checkpoint([]) == b"0\n0\n"
    assert decode_leader_epoch_checkpoint(b"", "x") == []
    assert decode_leader_epoch_checkpoint(b"0\n", "x") == []


@pytest.mark.parametrize("data", [b"1\n0\n", b"0\n2\n0 0\n", b"0\n1\n0\n", b"0\n1\n\xff 1\n",
                                  b"0\n1\n0 99999999999999999999\n"])
def test_decode_names_the_source(data):
    with pytest.raises(CorruptCheckpointError, match="remote-object-name"):
        decode_leader_epoch_checkpoint(data, "remote-object-name")


def test_remote_copy_of_the_epoch_checkpoint_uses_the_codec(tmp_path):
    """What the remote log manager uploads beside a segment is the codec's text of the epochs
    that started before the segment's end."""
    from tierlog import Log
    from tierlog.remote.rlm.rlm import _epoch_checkpoint_bytes

    log = Log.open(tmp_path / "t-0")
    try:
        for epoch in (0, 2, 5):
            log.leader_epoch_cache.assign(epoch, log.log_end_offset)
            log.append_records([_record()])
        entries = log.leader_epoch_cache.entries()
        assert _epoch_checkpoint_bytes(log, 2) == encode_leader_epoch_checkpoint(entries[:2])
        assert decode_leader_epoch_checkpoint(_epoch_checkpoint_bytes(log, 10), "x") == entries
    finally:
        log.close()


def _record():
    from tierlog import Record

    return Record(key=b"k", value=b"v")
