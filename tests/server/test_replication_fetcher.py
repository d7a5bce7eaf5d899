"""A follower's fetcher (tierlog.server.replication.fetcher) against a real ``tierlog serve``
leader: it copies the leader's batches byte for byte (compressed and transactional ones too)
and follows its high watermark; a follower holding records of an epoch the leader never had
truncates them away (OffsetsForLeaderEpoch) before it fetches, and ends byte-identical; a
leader that is gone ends a round with BrokerConnectionError and the next round after its
restart goes on from where the follower's log ends."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.log_invariants import log_batches
from support.replication_wire import leader_bytes, produce
from support.server_process import ServerProcess

from tierlog import Log, Record
from tierlog.errors import BrokerConnectionError
from tierlog.server.replication.fetcher import FollowedPartition, LeaderFetcher
from tierlog.server.replication.wire_client import BrokerConnection

SERVER_TOPICS = ["replicated"]
SERVER_PER_TEST = True


def _fetcher(server: ServerProcess, timeout_s: float = 30.0) -> LeaderFetcher:
    """Replica 2's fetcher from ``server`` (answers awaited at most 10 ms for new data)."""
    return LeaderFetcher(BrokerConnection("127.0.0.1", server.port,
                                          client_id="tierlog-replica-2", timeout_s=timeout_s),
                         2, max_wait_ms=10)


def _follower_bytes(log: Log) -> bytes:
    return b"".join(bytes(b.view()) for b in log_batches(log))


async def _catch_up(fetcher: LeaderFetcher, log: Log, end: int) -> None:
    for _ in range(20):  # each round is one request; the leader answers at once when it has data
        await fetcher.run_once()
        if log.log_end_offset >= end and log.high_watermark >= end:
            return
    raise AssertionError(f"the follower stopped at {log.log_end_offset}, not {end}")


def test_a_follower_copies_its_leaders_batches_byte_for_byte(server: ServerProcess,
                                                              tmp_path: Path) -> None:
    produce(server, "replicated", 20)
    produce(server, "replicated", 15, compression="gzip")

    async def scenario() -> None:
        with Log.open(tmp_path / "follower" / "replicated-0", {}) as log:
            fetcher = _fetcher(server)
            fetcher.follow(FollowedPartition("replicated", 0, log, leader_epoch=0))
            await _catch_up(fetcher, log, 35)
            assert _follower_bytes(log) == await leader_bytes(server, "replicated")
            assert (log.log_end_offset, log.high_watermark) == (35, 35)
            await fetcher.connection.close()

    asyncio.run(scenario())


def test_a_diverged_follower_truncates_then_ends_byte_identical(server: ServerProcess,
                                                                 tmp_path: Path) -> None:
    produce(server, "replicated", 10)

    async def scenario() -> None:
        with Log.open(tmp_path / "follower" / "replicated-0", {}) as log:
            fetcher = _fetcher(server)
            followed = FollowedPartition("replicated", 0, log, leader_epoch=0)
            fetcher.follow(followed)
            await _catch_up(fetcher, log, 10)
            # A zombie leader's writes in an epoch the real leader never had ...
            log.append_records([Record(key=b"lost", value=b"x")] * 3, leader_epoch=5)
            assert log.log_end_offset == 13
            produce(server, "replicated", 4)  # ... while the leader took four more
            fetcher.follow(followed)  # its leader moved: agree on the epochs again
            first = await fetcher.run_once()
            assert first.truncated == {"replicated-0": 10}
            await _catch_up(fetcher, log, 14)
            assert _follower_bytes(log) == await leader_bytes(server, "replicated")
            await fetcher.connection.close()

    asyncio.run(scenario())


def test_a_gone_leader_ends_the_round_and_the_next_one_goes_on(server: ServerProcess,
                                                               tmp_path: Path) -> None:
    produce(server, "replicated", 5)

    async def scenario() -> None:
        with Log.open(tmp_path / "follower" / "replicated-0", {}) as log:
            fetcher = _fetcher(server, timeout_s=5)
            fetcher.follow(FollowedPartition("replicated", 0, log, leader_epoch=0))
            await _catch_up(fetcher, log, 5)
            server.kill()
            with pytest.raises(BrokerConnectionError):
                await fetcher.run_once()
            server.start()  # the same port: the follower's address stays right
            produce(server, "replicated", 3)
            await _catch_up(fetcher, log, 8)
            assert _follower_bytes(log) == await leader_bytes(server, "replicated")
            await fetcher.connection.close()

    asyncio.run(scenario())


def test_a_stopped_leader_holds_up_no_role_change(server: ServerProcess,
                                                  tmp_path: Path) -> None:
    """While a fetch waits on a leader that stopped answering (SIGSTOP), the fetcher's lock is
    free: the partition can be given up at once (a new leader elected elsewhere), not after
    ``replica.socket.timeout.ms``; the answer that comes late is not applied to it."""
    produce(server, "replicated", 10)

    async def scenario() -> None:
        with Log.open(tmp_path / "follower" / "replicated-0", {}) as log:
            fetcher = _fetcher(server)
            fetcher.follow(FollowedPartition("replicated", 0, log, leader_epoch=0))
            await _catch_up(fetcher, log, 10)
            produce(server, "replicated", 5)  # what the late answer would bring
            assert server.proc is not None
            server.proc.send_signal(19)  # SIGSTOP
            try:
                pending = asyncio.ensure_future(fetcher.run_once())
                await asyncio.sleep(0.2)  # the fetch is on its way to the stopped leader
                assert not pending.done()
                async with asyncio.timeout(1):
                    async with fetcher.lock:
                        fetcher.unfollow("replicated", 0)
            finally:
                server.proc.send_signal(18)  # SIGCONT
            done = await pending
            assert done.appended == {} and log.log_end_offset == 10
            await fetcher.connection.close()

    asyncio.run(scenario())
