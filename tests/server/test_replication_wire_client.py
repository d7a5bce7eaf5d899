"""The broker-to-broker client (tierlog.server.replication.wire_client) against a real
``tierlog serve`` subprocess: a Fetch v12 as a follower sends it returns the leader's batches
and high watermark, an OffsetForLeaderEpoch v4 the end of an epoch; an answer that does not
come in time (the leader SIGSTOPped) or a broker that is gone is a BrokerConnectionError naming
it, and the next request connects again."""

from __future__ import annotations

import asyncio
import signal

import pytest
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.offset_for_leader_epoch.v4.response import OffsetForLeaderEpochResponse
from support.replication_wire import end_of_epoch, fetch, produce
from support.server_process import ServerProcess

from tierlog.errors import BrokerConnectionError
from tierlog.records.batch import iter_batches
from tierlog.server.replication.wire_client import BrokerConnection

SERVER_TOPICS = ["replicated"]
SERVER_PER_TEST = True


def test_a_follower_fetch_and_an_epoch_end_round_trip(server: ServerProcess) -> None:
    produce(server, "replicated", 5)

    async def exchange() -> tuple[FetchResponse, OffsetForLeaderEpochResponse]:
        connection = BrokerConnection("127.0.0.1", server.port, client_id="tierlog-replica-2")
        try:
            fetched = await connection.send(fetch("replicated", 0), FetchResponse)
            ended = await connection.send(end_of_epoch("replicated", 0), OffsetForLeaderEpochResponse)
            return fetched, ended
        finally:
            await connection.close()

    fetched, ended = asyncio.run(exchange())
    part = fetched.responses[0].partitions[0]
    assert part.error_code.value == 0 and part.high_watermark == 5
    batches = list(iter_batches(bytes(part.records or b"")))
    assert sum(b.last_offset_delta + 1 for b in batches) == 5 and batches[0].base_offset == 0
    end = ended.topics[0].partitions[0]
    assert end.error_code.value == 0 and (end.leader_epoch, end.end_offset) == (0, 5)


def test_a_silent_or_gone_broker_is_a_connection_error_and_the_next_request_reconnects(
        server: ServerProcess) -> None:
    produce(server, "replicated", 1)
    assert server.proc is not None

    async def scenario() -> None:
        connection = BrokerConnection("127.0.0.1", server.port, client_id="tierlog-replica-2",
                                      timeout_s=0.5)
        await connection.send(fetch("replicated", 0), FetchResponse)
        server.proc.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(BrokerConnectionError, match=r"127\.0\.0\.1:\d+: no answer"):
                await connection.send(fetch("replicated", 0), FetchResponse)
            assert not connection.connected
        finally:
            server.proc.send_signal(signal.SIGCONT)
        connection.timeout_s = 30.0
        again = await connection.send(fetch("replicated", 0), FetchResponse)
        assert again.responses[0].partitions[0].high_watermark == 1
        with pytest.raises(ValueError, match="not the answer"):
            await connection.send(fetch("replicated", 0), OffsetForLeaderEpochResponse)
        server.kill()
        with pytest.raises(BrokerConnectionError, match=r"FetchRequest v12 to 127\.0\.0\.1"):
            await connection.send(fetch("replicated", 0), FetchResponse)
        await connection.close()

    asyncio.run(scenario())
