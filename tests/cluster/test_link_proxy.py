"""LinkProxy (support.link_proxy) in front of a loopback echo server: bytes flow both ways and
are counted, ``cut("reset")`` resets open and new connections, ``cut("blackhole")`` stalls
without closing, ``heal()`` lets traffic through again, EOFs pass, ``close()`` leaves no thread.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest
from support.link_proxy import LinkProxy

#: Bound on every wait for bytes that must arrive.
WAIT_S = 5.0
#: How long a stalled link is watched for bytes that must not arrive.
SILENCE_S = 0.2


class EchoServer:
    """Echoes each connection's bytes back and closes it at the client's EOF."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.threads: list[threading.Thread] = []
        self.ended = threading.Semaphore(0)
        self.acceptor = threading.Thread(target=self._accept, name="echo-accept")
        self.acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._echo, args=(conn,), name="echo-conn")
            self.threads.append(thread)
            thread.start()

    def _echo(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(65536):
                conn.sendall(data)
        self.ended.release()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.acceptor.join(WAIT_S)
        for thread in self.threads:
            thread.join(WAIT_S)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[LinkProxy]:
    with LinkProxy("127.0.0.1", echo.port) as p:
        yield p


def connect(proxy: LinkProxy) -> socket.socket:
    sock = socket.create_connection(proxy.address, timeout=WAIT_S)
    sock.settimeout(WAIT_S)
    return sock


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, f"EOF after {len(data)} of {n} bytes"
        data += chunk
    return bytes(data)


def assert_reset(sock: socket.socket) -> None:
    """The proxy reset this connection: the next read fails with ECONNRESET."""
    with pytest.raises(ConnectionResetError):
        sock.recv(1)


def assert_refused(proxy: LinkProxy) -> None:
    """A new connection is reset on arrival (during the connect, or at the first read)."""
    with pytest.raises(ConnectionResetError), connect(proxy) as sock:
        sock.recv(1)


def assert_silent(sock: socket.socket) -> None:
    """Nothing arrives and the connection stays open for SILENCE_S."""
    sock.settimeout(SILENCE_S)
    with pytest.raises(TimeoutError):
        sock.recv(1)
    sock.settimeout(WAIT_S)


def test_bytes_flow_both_ways_and_are_counted(proxy: LinkProxy) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB: more than the proxy buffers in one direction
    with connect(proxy) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        assert recv_exactly(sock, len(payload)) == payload
        sender.join(WAIT_S)
    stats = proxy.stats()
    assert (stats.accepted, stats.refused, stats.reset) == (1, 0, 0)
    assert stats.bytes_to_target == stats.bytes_from_target == len(payload)


def test_eof_passes_through_after_the_bytes(proxy: LinkProxy) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)
        assert recv_exactly(sock, 10) == b"last words"
        assert sock.recv(1) == b""  # the echo server closed at our EOF, and that came back


def test_cut_reset_resets_open_connections_and_refuses_new_ones(
        proxy: LinkProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"hello")
        assert recv_exactly(sock, 5) == b"hello"
        proxy.cut("reset")
        assert proxy.mode == "reset"
        assert_reset(sock)
        assert echo.ended.acquire(timeout=WAIT_S)  # the target's side was closed too
    assert_refused(proxy)
    stats = proxy.stats()
    assert (stats.accepted, stats.refused, stats.reset, stats.open) == (2, 1, 1, 0)


def test_blackhole_stalls_without_closing_and_heal_resumes(proxy: LinkProxy) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"before")
        assert recv_exactly(sock, 6) == b"before"
        proxy.cut("blackhole")
        sock.sendall(b"during")
        assert_silent(sock)
        with connect(proxy) as late:  # accepted, but nothing moves either
            late.sendall(b"new")
            assert_silent(late)
            assert proxy.stats().open == 2
            assert proxy.stats().bytes_to_target == 6
            proxy.heal()
            assert recv_exactly(sock, 6) == b"during"
            assert recv_exactly(late, 3) == b"new"
    assert proxy.stats().reset == 0


def test_heal_after_a_reset_cut_lets_new_connections_through(proxy: LinkProxy) -> None:
    proxy.cut("reset")
    assert_refused(proxy)
    proxy.heal()
    assert proxy.mode is None
    with connect(proxy) as sock:
        sock.sendall(b"again")
        assert recv_exactly(sock, 5) == b"again"


def test_a_dead_target_resets_the_client() -> None:
    spare = socket.create_server(("127.0.0.1", 0))
    port = spare.getsockname()[1]
    spare.close()  # nothing listens there now
    with LinkProxy("127.0.0.1", port) as proxy:
        assert_refused(proxy)
        stats = proxy.stats()
        assert (stats.accepted, stats.refused + stats.reset, stats.open) == (1, 1, 0)


def test_close_ends_connections_and_leaves_no_thread(echo: EchoServer) -> None:
    before = set(threading.enumerate())
    proxy = LinkProxy("127.0.0.1", echo.port)
    sock = connect(proxy)
    sock.sendall(b"hi")
    assert recv_exactly(sock, 2) == b"hi"
    proxy.close()
    proxy.close()  # idempotent
    assert sock.recv(1) == b""
    sock.close()
    assert {t for t in threading.enumerate() if t.name.startswith("link-proxy")} - before == set()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(proxy.address, timeout=WAIT_S)
    with pytest.raises(RuntimeError, match="closed"):
        proxy.cut()


def test_an_unknown_cut_mode_is_refused(proxy: LinkProxy) -> None:
    with pytest.raises(ValueError, match="'drop'"):
        proxy.cut("drop")  # type: ignore[arg-type]
