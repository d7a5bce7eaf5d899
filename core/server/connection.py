"""One client connection's bytes: size-prefixed request frames in, responses out.

An asyncio Protocol rather than a StreamReader/StreamWriter pair: the stream pair wakes the
connection's task once per read and again per ``readexactly``, and writes each response
with its own ``send``, which cost about half of a small produce request's time on the
server. Here ``data_received`` cuts every complete frame out of what arrived at once, the
task takes them without suspending while any are queued, and responses to pipelined
requests leave in one write (:meth:`FramedConnection.write` buffers until
:meth:`FramedConnection.flush`; the server holds only produce responses that way, while the
next request is a produce request, so no response waits behind a long poll).

Memory stays bounded per connection: a frame announcing more than ``max_request_bytes``
fails the connection (:class:`FrameTooLargeError`) before its body is buffered, and reading
pauses while the queued frames hold more than :data:`QUEUED_BYTES_LIMIT` bytes, so a client
pipelining faster than it is served waits in its own socket buffer. Across connections, a
frame's size is reserved in the server's :class:`~tierlog.server.request_memory.RequestMemory`
(``queued.max.request.bytes``) before its body is buffered, and given back once it is served;
reading pauses while none is left. :attr:`FramedConnection.last_active` is when bytes last
went in or out (``connections.max.idle.ms``).
"""

from __future__ import annotations

import asyncio
import collections
import struct

from tierlog.errors import FrameTooLargeError
from tierlog.server.request_memory import RequestMemory

_SIZE = struct.Struct(">i")
#: Reading pauses while complete, unserved frames hold more than this.
QUEUED_BYTES_LIMIT = 1 << 20
#: Buffered responses are written once they reach this many bytes.
WRITE_BATCH_BYTES = 1 << 16


class FramedConnection(asyncio.Protocol):
    """The protocol of one connection; its serving task awaits :meth:`next_frame`."""

    def __init__(self, max_request_bytes: int, memory: RequestMemory | None = None) -> None:
        self._limit = max_request_bytes
        self._memory = memory if memory is not None else RequestMemory(-1)
        #: Whether the frame whose size prefix heads the buffer has its size reserved.
        self._head_reserved = 0
        #: Bytes of the frame the serving task holds (reserved until it asks for the next).
        self._in_service = 0
        self._serving = False
        self._waiting_memory = False
        self._buffer = bytearray()
        self._frames: collections.deque[bytes] = collections.deque()
        self._queued_bytes = 0
        self._error: Exception | None = None
        self._eof = False
        self._waiter: asyncio.Future[None] | None = None
        self._paused_reading = False
        self._paused_writing = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self.transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        #: The event loop's time when bytes last came in or went out.
        self.last_active = self._loop.time()
        #: Done once the transport is attached (made inside the event loop's accept).
        self.made: asyncio.Future[None] = self._loop.create_future()

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.made.done():
            self.made.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.last_active = self._loop.time()
        self._buffer += data
        self._cut_frames()

    def _cut_frames(self) -> None:
        """Queue every complete frame in the buffer, reserving each one's size first."""
        buffer = self._buffer
        start, end = 0, len(buffer)
        while end - start >= 4:
            size = _SIZE.unpack_from(buffer, start)[0]
            if size < 0 or size > self._limit:
                self._fail(FrameTooLargeError(size, self._limit))
                return
            if not self._head_reserved:
                if not self._memory.try_reserve(size):
                    self._waiting_memory = True
                    self._memory.wait(id(self), self._memory_back)
                    break
                self._head_reserved = size
            if end - start - 4 < size:
                break
            self._frames.append(bytes(buffer[start + 4:start + 4 + size]))
            self._queued_bytes += size
            self._head_reserved = 0  # the queued frame holds its reservation now
            start += 4 + size
        if start:
            del buffer[:start]
        self._update_reading()
        if self._frames:
            self._wake()

    def _memory_back(self) -> None:
        """The pool has memory again: reserve the waiting frame's size and read on."""
        self._waiting_memory = False
        if self._error is None and not self._eof:
            self._cut_frames()

    def _update_reading(self) -> None:
        """Pause reading while too much is queued here or the pool has nothing left."""
        pause = self._queued_bytes > QUEUED_BYTES_LIMIT or self._waiting_memory
        transport = self.transport
        if pause == self._paused_reading or transport is None or self._error is not None:
            return
        self._paused_reading = pause
        if pause:
            transport.pause_reading()
        elif not transport.is_closing():
            transport.resume_reading()

    def _release_all(self) -> None:
        """Give every reservation of this connection back to the pool (it is closing)."""
        held = self._in_service + self._queued_bytes + self._head_reserved
        self._in_service = self._head_reserved = 0
        self._memory.forget(id(self))
        self._waiting_memory = False
        if held:
            self._memory.release(held)

    def eof_received(self) -> bool | None:
        self._eof = True
        self._wake()
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._frames.clear()  # never served now: their reservations go back below
        self._release_all()
        self._queued_bytes = 0
        if not self.made.done():
            self.made.set_exception(ConnectionResetError("connection lost before it was made"))
        if exc is not None and self._error is None:
            self._error = exc
        self._wake()
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("connection lost"))

    def pause_writing(self) -> None:
        self._paused_writing = True

    def resume_writing(self) -> None:
        self._paused_writing = False
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the serving task's side ------------------------------------------------------------

    def has_frame(self) -> bool:
        """Whether a complete request is queued (so a buffered response may wait for it)."""
        return bool(self._frames)

    async def next_frame(self) -> bytes:
        """The next complete request frame (without its size prefix), waiting for one;
        asyncio.IncompleteReadError at the end of the stream, FrameTooLargeError or the
        connection's error when it failed."""
        while not self._frames:
            if self._error is not None:
                raise self._error
            if self._eof:
                raise asyncio.IncompleteReadError(bytes(self._buffer), None)
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        frame = self._frames.popleft()
        self._queued_bytes -= len(frame)
        self._in_service = len(frame)
        self._serving = True
        if (self._paused_reading and not self._waiting_memory
                and self._queued_bytes <= QUEUED_BYTES_LIMIT // 2):
            self._paused_reading = False
            assert self.transport is not None
            if not self.transport.is_closing():
                self.transport.resume_reading()
        return frame

    def done_with_frame(self) -> None:
        """The serving task is done with the frame :meth:`next_frame` returned: its
        reservation goes back to the pool."""
        held, self._in_service = self._in_service, 0
        self._serving = False
        if held:
            self._memory.release(held)

    @property
    def busy(self) -> bool:
        """Whether the connection waits on the server, not on its client: a request taken
        with :meth:`next_frame` is being served, or reading waits for request memory."""
        return self._serving or self._waiting_memory

    def has_pending(self) -> bool:
        """Whether responses wait in the write buffer for the next :meth:`flush`."""
        return bool(self._pending)

    def write(self, data: bytes) -> None:
        """Queue ``data`` for the socket (sent by :meth:`flush`, or now once enough is
        queued)."""
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= WRITE_BATCH_BYTES:
            self._write_pending()

    async def flush(self) -> None:
        """Send what :meth:`write` queued and wait while the transport's buffer is full."""
        self._write_pending()
        if self._paused_writing:
            if self.transport is None or self.transport.is_closing():
                raise ConnectionResetError("connection closed")
            waiter = self._drain_waiter = asyncio.get_running_loop().create_future()
            await waiter

    def _write_pending(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        assert self.transport is not None
        self.last_active = self._loop.time()
        self.transport.write(data)

    def _fail(self, error: Exception) -> None:
        self._error = error  # raised once the frames before it are served
        self._buffer.clear()
        assert self.transport is not None
        self.transport.pause_reading()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
