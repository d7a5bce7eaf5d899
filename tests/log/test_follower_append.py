"""A follower's append (``Log.append(..., assign_offsets=False, origin="replication")``, Kafka's
appendAsFollower): the leader's batches are written as they are. A LogAppendTime batch keeps
the leader's time (the replicas' bytes are identical); a timestamp outside this node's
``message.timestamp.*.max.ms`` and a batch above its ``max.message.bytes`` are taken, since the
leader already acknowledged them; a client's append of the same bytes is still refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.clock import FakeClock
from support.log_invariants import log_batches

from tierlog import Log, Record
from tierlog.errors import (
    InvalidTimestampError,
    NotLeaderOrFollowerError,
    RecordBatchTooLargeError,
)

HOUR_MS = 3_600_000


def _leader_bytes(tmp_path: Path, clock: FakeClock, config: dict[str, object],
                  records: list[Record]) -> bytes:
    """The bytes of the leader's log after one append of ``records`` (two batches)."""
    with Log.open(tmp_path / "leader" / "t-0", config, time_ms=clock) as leader:
        leader.leader_epoch = 3
        leader.append_records(records[:2])
        leader.append_records(records[2:], compression="zstd")
        return b"".join(bytes(b.view()) for b in log_batches(leader))


def test_a_replicated_log_append_time_batch_keeps_the_leaders_time_and_bytes(
        tmp_path: Path) -> None:
    config = {"message.timestamp.type": "LogAppendTime"}
    leader_clock = FakeClock(1_700_000_000_000)
    data = _leader_bytes(tmp_path, leader_clock, config,
                         [Record(key=b"k%d" % i, value=b"v" * 30) for i in range(5)])
    follower_clock = FakeClock(leader_clock.now + HOUR_MS)  # a later clock of its own
    with Log.open(tmp_path / "follower" / "t-0", config, time_ms=follower_clock) as follower:
        follower.append(data, assign_offsets=False, origin="replication")
        copied = log_batches(follower)
        assert b"".join(bytes(b.view()) for b in copied) == data
        assert {b.max_timestamp for b in copied} == {leader_clock.now}
        assert [b.partition_leader_epoch for b in copied] == [3, 3]
        assert follower.leader_epoch_cache.entries()[-1].epoch == 3
        assert follower.log_end_offset == 5


def test_a_replicated_batch_outside_the_followers_limits_is_taken(tmp_path: Path) -> None:
    clock = FakeClock()
    old = clock.now - 10 * HOUR_MS
    data = _leader_bytes(tmp_path, clock, {},
                         [Record(key=b"k", value=b"x" * 400, timestamp=old) for _ in range(4)])
    strict = {"message.timestamp.before.max.ms": HOUR_MS, "max.message.bytes": 200}
    with Log.open(tmp_path / "client" / "t-0", strict, time_ms=clock) as log:
        with pytest.raises((InvalidTimestampError, RecordBatchTooLargeError)):
            log.append(data, assign_offsets=False, origin="client")
        assert log.log_end_offset == 0
    with Log.open(tmp_path / "follower" / "t-0", strict, time_ms=clock) as follower:
        follower.append(data, assign_offsets=False, origin="replication")
        assert b"".join(bytes(b.view()) for b in log_batches(follower)) == data
        assert follower.log_end_offset == 4


def test_a_leaders_append_is_refused_once_its_epoch_is_gone(tmp_path: Path) -> None:
    """A replicated partition's leader decides to append at its epoch; a leadership lost (or
    moved to a newer epoch) before the append runs refuses it, writing nothing, so a record
    never lands unstamped or under a stale epoch on what is now a follower's log."""
    records = [Record(key=b"k", value=b"v")]
    with Log.open(tmp_path / "t-0", {}) as log:
        log.leader_epoch = 3
        info = log.append_records(records)  # the epoch this node leads at: stamped with it
        data = b"".join(bytes(b.view()) for b in log_batches(log))
        assert log.append(data, as_leader_at=3).first_offset == info.last_offset + 1
        assert log_batches(log)[-1].partition_leader_epoch == 3
        end = log.log_end_offset
        for now in (None, 4):  # resigned; led again at a newer epoch
            log.leader_epoch = now
            with pytest.raises(NotLeaderOrFollowerError, match="leader epoch 3"):
                log.append(data, as_leader_at=3)
            with pytest.raises(NotLeaderOrFollowerError):
                log.append_marker(7, 0, commit=True, as_leader_at=3)
            assert log.log_end_offset == end
