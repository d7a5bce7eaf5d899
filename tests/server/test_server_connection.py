"""FramedConnection, the server's per-connection framing: frames cut out of any split of the
byte stream, an oversized frame failing only after the frames before it, reading paused
while too much is queued, and pipelined responses leaving in one write."""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.errors import FrameTooLargeError
from tierlog.server.connection import QUEUED_BYTES_LIMIT, FramedConnection


class _Transport(asyncio.Transport):
    """What the protocol needs of asyncio's transport, recording writes and pauses."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.reading = True
        self.closing = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _connection(limit: int = 1 << 20) -> tuple[FramedConnection, _Transport]:
    connection = FramedConnection(limit)
    transport = _Transport()
    connection.connection_made(transport)
    return connection, transport


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.binary(max_size=300), max_size=12),
       cuts=st.lists(st.integers(0, 4000), max_size=20))
def test_frames_survive_any_split_of_the_stream(payloads: list[bytes],
                                               cuts: list[int]) -> None:
    async def run() -> list[bytes]:
        connection, _ = _connection()
        stream = b"".join(_framed(p) for p in payloads)
        points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
        for start, end in itertools.pairwise(points):
            connection.data_received(stream[start:end])
        connection.eof_received()
        got = []
        with pytest.raises(asyncio.IncompleteReadError):
            while True:
                got.append(await connection.next_frame())
        return got

    assert asyncio.run(run()) == payloads


def test_an_oversized_frame_fails_after_the_frames_before_it() -> None:
    async def run() -> None:
        connection, transport = _connection(limit=100)
        connection.data_received(_framed(b"a" * 100) + struct.pack(">i", 101) + b"x" * 10)
        assert await connection.next_frame() == b"a" * 100
        with pytest.raises(FrameTooLargeError, match="101 bytes"):
            await connection.next_frame()
        assert not transport.reading  # nothing more is buffered
        connection2, _ = _connection(limit=100)
        connection2.data_received(struct.pack(">i", -1))
        with pytest.raises(FrameTooLargeError):
            await connection2.next_frame()

    asyncio.run(run())


def test_reading_pauses_while_too_much_is_queued() -> None:
    async def run() -> None:
        connection, transport = _connection(limit=QUEUED_BYTES_LIMIT)
        frame = _framed(b"p" * (QUEUED_BYTES_LIMIT // 4))
        for _ in range(5):
            connection.data_received(frame)
        assert not transport.reading
        for _ in range(3):
            await connection.next_frame()
        assert transport.reading  # below half the limit again
        await connection.next_frame()
        await connection.next_frame()

    asyncio.run(run())


def test_a_waiting_task_wakes_on_data_and_on_eof() -> None:
    async def run() -> None:
        connection, _ = _connection()
        waiting = asyncio.ensure_future(connection.next_frame())
        await asyncio.sleep(0)
        assert not waiting.done()
        connection.data_received(_framed(b"hi")[:3])
        await asyncio.sleep(0)
        assert not waiting.done()
        connection.data_received(_framed(b"hi")[3:])
        assert await waiting == b"hi"
        waiting = asyncio.ensure_future(connection.next_frame())
        await asyncio.sleep(0)
        connection.connection_lost(None)
        with pytest.raises(asyncio.IncompleteReadError):
            await waiting

    asyncio.run(run())


def test_responses_are_batched_until_flush() -> None:
    async def run() -> None:
        connection, transport = _connection()
        connection.write(b"one")
        connection.write(b"two")
        assert transport.writes == []
        await connection.flush()
        assert transport.writes == [b"onetwo"]
        await connection.flush()
        assert transport.writes == [b"onetwo"]
        connection.write(b"x" * (1 << 16))  # a large response goes out at once
        assert len(transport.writes) == 2

    asyncio.run(run())


def test_flush_waits_while_the_transport_is_full_over_a_real_socket() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        try:
            connection = FramedConnection(1 << 20)
            await loop.connect_accepted_socket(lambda: connection, ours)
            await connection.made
            assert connection.transport is not None
            connection.transport.set_write_buffer_limits(high=1 << 16)
            chunk = b"z" * (1 << 20)
            for _ in range(8):
                connection.write(chunk)
            flushing = asyncio.ensure_future(connection.flush())
            for _ in range(5):
                await asyncio.sleep(0)  # let the loop try to send
            assert not flushing.done()  # the peer has not read: the buffer stays full
            received = 0
            while received < 8 * len(chunk):
                data = await loop.sock_recv(theirs, 1 << 20)
                received += len(data)
            await asyncio.wait_for(flushing, 30)
            connection.transport.close()
        finally:
            theirs.close()

    asyncio.run(run())


def _request(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    import io

    from kio.serial import entity_writer
    from kio.static.primitive import i16, i32
    header_type = type(body).__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_type)(buffer, header_type(
        request_api_key=i16(api_key), request_api_version=i16(version),
        correlation_id=i32(correlation_id), client_id="test"))
    entity_writer(type(body))(buffer, body)
    return _framed(buffer.getvalue())


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "connection closed"
            data += chunk
        return data
    return exactly(struct.unpack(">i", exactly(4))[0])


def test_a_response_is_not_held_behind_a_long_poll(tmp_path: Any) -> None:
    """ApiVersions and a Fetch that long-polls 8 s arrive in one write: the ApiVersions
    answer comes at once, not after the poll."""
    import datetime
    import sys

    from kio.index import load_request_schema
    from kio.static.primitive import i8, i32, i64
    from support.server_process import start

    from tierlog.manager.log_manager import LogManager

    fetch_t = load_request_schema(1, 4)
    module = sys.modules[fetch_t.__module__]
    fetch = fetch_t(replica_id=i32(-1), max_wait=datetime.timedelta(seconds=8),
                    min_bytes=i32(1 << 20), max_bytes=i32(1 << 20), isolation_level=i8(0),
                    topics=(module.FetchTopic(topic="t", partitions=(module.FetchPartition(
                        partition=i32(0), fetch_offset=i64(0),
                        partition_max_bytes=i32(1 << 20)),)),))
    versions = load_request_schema(18, 0)()
    with LogManager.open(tmp_path / "data", {}, start_scheduler=False) as manager:
        manager.create_topic("t", 1)  # empty: the fetch waits its whole max_wait
    with start(tmp_path, data_dir=tmp_path / "data") as server, \
            socket.create_connection((server.host, server.port), timeout=60) as sock:
        sock.sendall(_request(18, 0, 1, versions) + _request(1, 4, 2, fetch))
        sock.settimeout(4)  # below the 8 s poll
        first = _read_frame(sock)
        assert struct.unpack_from(">i", first)[0] == 1  # ApiVersions' correlation id
        sock.settimeout(60)
        second = _read_frame(sock)
        assert struct.unpack_from(">i", second)[0] == 2  # the fetch, after its poll


def test_a_frame_waits_for_request_memory_and_reads_on_when_it_comes_back() -> None:
    """queued.max.request.bytes across connections: a frame's size is reserved when its size
    prefix arrives; a connection finding the pool used up stops reading until it is not."""
    from tierlog.server.request_memory import RequestMemory

    async def run() -> None:
        memory = RequestMemory(100)
        big, big_transport = FramedConnection(1 << 20, memory), _Transport()
        small, small_transport = FramedConnection(1 << 20, memory), _Transport()
        big.connection_made(big_transport)
        small.connection_made(small_transport)
        big_frame = _framed(b"x" * 150)
        big.data_received(big_frame[:50])  # the pool had room: 150 bytes reserved
        assert memory.used == 150 and big_transport.reading
        small.data_received(_framed(b"y" * 10))  # none left: it waits, not reading
        assert memory.used == 150 and not small_transport.reading
        assert not small.has_frame()
        big.data_received(big_frame[50:])
        assert await big.next_frame() == b"x" * 150
        assert memory.used == 150  # held while it is served
        big.done_with_frame()
        assert memory.used == 10 and small_transport.reading
        assert await small.next_frame() == b"y" * 10
        small.connection_lost(None)  # closing gives back what it held
        assert memory.used == 0

    asyncio.run(run())
